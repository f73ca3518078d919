"""Row kernels that sum columns too (``Reduce.across``, :mod:`ember.inductor.mixed`).

A norm's backward as one kernel: each program of ``<name>_partial`` walks a chunk of
rows, whole rows in registers (a persistent reduction's ``[XBLOCK, RBLOCK]`` tile),
computes the row reductions and stores as a plain row kernel would, and adds each
across reduction's argument into a tile-sized accumulator. At the end it sums the
accumulator over its rows and stores that partial column sum into a workspace row
(``[programs, columns]``, allocated by the launcher like a split reduction's). Then
``<name>`` sums the workspace down its rows, ``RBLOCK`` columns a program (16-64: enough
programs for the GPU), and runs the statements that read the sums (the weight
gradient's cast).

So ``x`` and ``dy`` are read once for ``dx`` and the weight gradient, where a separate
column kernel read them again (RMSNorm 16384 x 4096, bf16, H100: 193 us).
"""

from __future__ import annotations

from ember.inductor.codegen.triton import reductions
from ember.inductor.codegen.triton.dtypes import pointer_type, tl_type
from ember.inductor.codegen.triton.heuristics import (
    PERSISTENT_MAX,
    LaunchConfig,
    choose_config,
    next_power_of_2,
    warps_for,
)
from ember.inductor.codegen.triton.kernel_code import (
    SplitLaunch,
    TritonKernelCode,
    cdiv,
    identifier,
)
from ember.inductor.codegen.triton.kernel_writer import KernelWriter
from ember.inductor.codegen.triton.reduction_layout import column_element_bytes
from ember.inductor.codegen.triton.sizes import (
    SizeFacts,
    blocks,
    chunk,
    is_static,
    operand_source,
)
from ember.inductor.loop_ir import Kernel, Store
from ember.inductor.loop_ir.across import AcrossParts, across_parts

#: how many programs walk the rows (fewer when there are fewer row blocks): two for
#: each of an H100's or H200's 132 multiprocessors. Measured on an H100 (bf16 training,
#: session 53, ``tools/gpu/ab_matmul_choice.py MODEL ... ember,ember_mixed_264``): 264
#: against 528 took rms_norm's step from 0.995x to 1.010x of torch.compile's,
#: softmax_layernorm's from 1.258x to 1.268x, gpt's from 1.006x to 1.009x; hf_gpt2 level;
#: 1056 was 1.005x on rms_norm
MIXED_PROGRAMS = 264
#: the fewest elements (rows x columns) a program's step over the rows covers. Not yet
#: measured (``... ember_mixed_tile_1``: the plain row kernel's row blocks)
MIXED_TILE = 4096
#: columns a program of the combining function sums: at most 64 (256-byte rows of the
#: workspace), at least 16 (64 bytes), otherwise as few as give each of an H100's or
#: H200's 132 multiprocessors a program (4096 columns: 32 a program, 128 programs)
COMBINE_COLUMNS = (16, 64)
COMBINE_SMS = 132
#: workspace rows the combining function adds a step
COMBINE_ROWS = 64


def mixable(kernel: Kernel) -> bool:
    """Whether Triton runs ``kernel``, which sums across its rows, as one kernel (module
    doc): its body splits (:func:`~ember.inductor.loop_ir.across.across_parts`), its
    across reductions are floating-point sums, its rows are the contiguous loads (not a
    column reduction summing rows across) and fit registers whole (a static row of at
    most ``PERSISTENT_MAX`` elements)."""
    parts = across_parts(kernel)
    if parts is None or any(r.op != "sum" or not r.dtype.is_floating_point
                            for r in parts.reduces):
        return False
    rnumel = kernel.reduction_numel
    if not is_static(rnumel) or next_power_of_2(int(rnumel)) > PERSISTENT_MAX:
        return False
    return column_element_bytes(kernel) == 0


def mixed_config(kernel: Kernel, facts: SizeFacts | None = None) -> LaunchConfig:
    """The row tiling: a persistent row reduction's (whole rows in registers), with at
    least :data:`MIXED_TILE` elements a step (rows of 768: 4 a step, where the plain row
    kernel takes one a program), so that each of the few programs keeps enough loads in
    flight."""
    facts = facts or SizeFacts()
    rows = facts.hint(kernel.numel)
    config = choose_config(rows, int(kernel.reduction_numel))
    xblock = max(config.xblock, min(MIXED_TILE // config.rblock, next_power_of_2(rows)))
    if xblock == config.xblock:
        return config
    return LaunchConfig(xblock, config.rblock, True,
                        max(config.num_warps, warps_for(xblock * config.rblock) // 4))


def combine_columns(columns: int) -> int:
    """Columns a program of the combining function sums (:data:`COMBINE_COLUMNS`)."""
    low, high = COMBINE_COLUMNS
    return max(low, min(high, next_power_of_2(cdiv(columns, COMBINE_SMS))))


class MixedReductionWriter(KernelWriter):
    """Writes the two functions of a row kernel with across reductions (module doc)."""

    def __init__(self, kernel: Kernel, config: LaunchConfig,
                 facts: SizeFacts | None = None) -> None:
        super().__init__(kernel, config, facts)
        parts = across_parts(kernel)
        assert parts is not None, "MixedReductionWriter: a kernel mixable() refused"
        self.parts: AcrossParts = parts
        # the column statements vary along the columns: masked and shaped as inner values
        self.inner |= {s.name for s in (*parts.columns, *parts.reduces)
                       if not isinstance(s, Store)}

    def programs(self) -> tuple[int, str]:
        """How many programs walk the rows, and the rows each walks (a multiple of
        ``XBLOCK``; over the size arguments for a symbolic row count)."""
        xblock = self.config.xblock
        numel = self.kernel.numel
        programs = max(1, min(MIXED_PROGRAMS, cdiv(self.facts.hint(numel), xblock)))
        rows = chunk(numel, programs, xblock)
        if is_static(numel):  # no program without rows
            return cdiv(int(numel), int(rows)), str(rows)
        return programs, operand_source(rows)

    def workspace_params(self) -> list[str]:
        return [f"{self.value(r.name)}_ws" for r in self.parts.reduces]

    def emit_partial(self, rows: str) -> None:
        """Program ``pid`` walks rows ``[pid * rows, (pid + 1) * rows)``."""
        rnumel = self.numel_source(reduction=True)
        self.size_prologue()
        pid = "tl.program_id(0).to(tl.int64)" if self.use64 else "tl.program_id(0)"
        self.line(f"pid = {pid}")
        rbase = "tl.arange(0, RBLOCK)[None, :]"
        self.line(f"rindex = {rbase}.to(tl.int64)" if self.use64 else f"rindex = {rbase}")
        self.line(f"rmask = rindex < {rnumel}")
        self.dims_code("r", self.rdims, "rindex")
        for r in self.parts.reduces:
            self.init_accumulator(r)
        self.line(f"for xstep in range(0, {rows}, XBLOCK):")
        self.indent += 1
        self.line(f"xindex = pid * {rows} + xstep + tl.arange(0, XBLOCK)[:, None]")
        self.line(f"xmask = xindex < {self.numel_source(reduction=False)}")
        self.line("xrmask = xmask & rmask")
        self.dims_code("x", self.xdims, "xindex")
        for s in self.parts.rows:
            self.emit(s)
        for r in self.parts.reduces:
            self.accumulate(r)
        self.indent -= 1
        for r in self.parts.reduces:
            out = self.value(r.name)
            self.line(f"{out} = tl.reduce({out}_acc, 0, {reductions.helper_for('sum', r.dtype)})"
                      "[None, :]")
            self.line(f"tl.store({out}_ws + (pid * {rnumel} + rindex), {out}, mask=rmask)")

    def emit_combine(self, programs: int) -> None:
        """Program ``c`` sums the workspace rows of columns ``[c * RBLOCK, (c + 1) *
        RBLOCK)``, then runs the column statements."""
        rnumel = self.numel_source(reduction=True)
        self.size_prologue()
        self.line("rindex = tl.program_id(0) * RBLOCK + tl.arange(0, RBLOCK)[None, :]")
        self.line(f"rmask = rindex < {rnumel}")
        self.line("xmask = rmask")
        self.line("xrmask = rmask")
        self.dims_code("r", self.rdims, "rindex")
        self.line("sbase = tl.arange(0, SBLOCK)[:, None]")
        for r in self.parts.reduces:
            self.line(f"{self.value(r.name)}_acc = tl.full([SBLOCK, RBLOCK], 0, "
                      f"{tl_type(r.dtype)})")
        self.line(f"for soffset in range(0, {programs}, SBLOCK):")
        self.indent += 1
        self.line("sindex = soffset + sbase")
        self.line(f"smask = (sindex < {programs}) & rmask")
        for r in self.parts.reduces:
            out = self.value(r.name)
            self.line(f"{out}_acc = {out}_acc + tl.load({out}_ws + (sindex * {rnumel} + "
                      "rindex), mask=smask, other=0.0)")
        self.indent -= 1
        for r in self.parts.reduces:
            out = self.value(r.name)
            self.dtypes[r.name] = r.dtype
            self.line(f"{out} = tl.reduce({out}_acc, 0, {reductions.helper_for('sum', r.dtype)})"
                      "[None, :]")
        for s in self.parts.columns:
            self.emit(s)

    def write(self) -> TritonKernelCode:
        k = self.kernel
        programs, rows = self.programs()
        if k.origins:
            self.line(f"# fused: {', '.join(k.origins)}")
        self.line(f"# rows and {len(self.parts.reduces)} column sum(s): {programs} programs "
                  f"of {rows} rows a program")
        self.emit_partial(rows)
        partial_lines, self.lines = self.lines, []
        self.emit_combine(programs)
        fn_name = identifier(k.name)
        params = self.param_list() + self.workspace_params()
        partial = SplitLaunch(
            name=fn_name + "_partial",
            constexprs={"XBLOCK": self.config.xblock, "RBLOCK": self.config.rblock},
            grid=(programs, 1, 1),
            workspace_dtypes=[str(r.dtype).replace("torch.", "") for r in self.parts.reduces],
            workspace_numel=programs * int(k.reduction_numel),
        )
        columns = combine_columns(int(k.reduction_numel))
        combine_constexprs = {"XBLOCK": 1, "RBLOCK": columns, "SBLOCK": COMBINE_ROWS}
        source = self.module_source([
            (partial.name, params, list(partial.constexprs), partial_lines),
            (fn_name, params, list(combine_constexprs), self.lines),
        ])
        signature = self.signature()
        for r, ws in zip(self.parts.reduces, self.workspace_params(), strict=True):
            signature[ws] = pointer_type(r.dtype)
        return TritonKernelCode(
            name=fn_name, source=source, signature=signature, constexprs=combine_constexprs,
            grid=(blocks(k.reduction_numel, columns), 1, 1),
            num_warps=self.config.num_warps, num_stages=self.config.num_stages,
            split=partial,
        )


__all__ = ["COMBINE_COLUMNS", "MIXED_PROGRAMS", "MIXED_TILE", "MixedReductionWriter",
           "combine_columns", "mixable", "mixed_config"]
