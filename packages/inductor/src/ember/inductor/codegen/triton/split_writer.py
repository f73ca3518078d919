"""Split reductions: a few long rows reduced by many programs, in two kernels.

``x.sum()`` over 10**8 elements has one output: one program per row would use one of the
GPU's 132 multiprocessors. Instead the module holds two functions: ``<name>_partial``
over ``(programs, split)`` reduces chunk ``rsplit`` of each row into a workspace (one per
``Reduce``, allocated by the launcher), and ``<name>`` combines the ``split`` partial
results of each row and runs the kernel's epilogue (the statements after the reduction).

Only one-pass kernels of sum/prod/max/min/any/all/m2 split (:func:`splittable`); others
run as looped reductions. An ``m2`` stores its Welford state's three parts, which the
combine merges by Chan's formula (:mod:`.welford`). A run-time check's stores inside the
pass run in the partial kernel.
"""

from __future__ import annotations

from ember.inductor.codegen.triton import reductions, welford
from ember.inductor.codegen.triton.dtypes import pointer_type
from ember.inductor.codegen.triton.heuristics import choose_config, next_power_of_2
from ember.inductor.codegen.triton.kernel_code import (
    SplitLaunch,
    TritonKernelCode,
    identifier,
)
from ember.inductor.codegen.triton.kernel_writer import KernelWriter
from ember.inductor.codegen.triton.reduction_layout import column_element_bytes
from ember.inductor.codegen.triton.sizes import SizeFacts, blocks, chunk, operand_source
from ember.inductor.loop_ir import Kernel, Reduce, Store, reduction_phases
from ember.runtime.ir import symbolic


def splittable(kernel: Kernel) -> bool:
    """One pass of sum/prod/max/min/any/all/m2 reductions. Stores inside the pass run in
    the partial kernel: its programs cover disjoint chunks of each row, so every element
    is written once (a ReLU's gradient stored while a batch norm's backward sums it; a
    run-time check's, ``lowering/checks.py``: an embedding recomputed in a column
    reduction checks the rows it reads). An accumulating store (``mode="add"``) does not
    split."""
    _, phases = reduction_phases(kernel)
    return len(phases) == 1 and all(
        not (isinstance(s, Store) and s.mode != "store")
        and not (isinstance(s, Reduce) and s.op in ("argmax", "argmin"))
        for s in phases[0].inner
    )


def wants_split(kernel: Kernel, facts: SizeFacts | None = None) -> bool:
    """Whether ``kernel``'s sizes (symbolic ones at their hints) call for a split
    reduction (whether or not it is :func:`splittable`)."""
    facts = facts or SizeFacts()
    if not kernel.is_reduction:
        return False
    column_bytes = column_element_bytes(kernel)
    return choose_config(
        facts.hint(kernel.numel), facts.hint(kernel.reduction_numel),
        columns=column_bytes > 0, element_bytes=column_bytes or 4).split > 1


class SplitReductionWriter(KernelWriter):
    """Writes the two functions of a split reduction (module doc)."""

    def workspaces(self, reduces: list[Reduce]) -> list[tuple[Reduce, str]]:
        """``(reduction, part)`` of each workspace, in parameter order: one a reduction,
        an ``m2``'s three (its state's parts, :data:`.welford.PARTS`)."""
        return [(r, part) for r in reduces for part in welford.parts_of(r.op)]

    def workspace_params(self, reduces: list[Reduce]) -> list[str]:
        return [f"{self.value(r.name)}{part}_ws" for r, part in self.workspaces(reduces)]

    def emit_split_partial(self, split: int) -> list[Reduce]:
        """The body of the partial kernel: program (x, s) reduces chunk s of row x."""
        before, (phase,) = reduction_phases(self.kernel)
        rblock = self.config.rblock
        # over the size arguments for a symbolic row
        span = operand_source(chunk(self.kernel.reduction_numel, split, rblock))
        self.line("rsplit = tl.program_id(1)")
        for s in before:
            self.emit(s)
        self.line(f"rstart = rsplit * {span}")
        reduces = self.emit_reduction_loop(phase, span, "rstart + roffset")
        for r, part in self.workspaces(reduces):
            value = f"{self.value(r.name)}{part}"
            self.line(f"tl.store({value}_ws + (xindex * {split} + rsplit), {value}, "
                      "mask=xmask)")
        return reduces

    def emit_split_final(self, split: int, reduces: list[Reduce]) -> None:
        """The body of the main kernel of a split reduction: combine, then the rest."""
        before, (phase,) = reduction_phases(self.kernel)
        for s in before:
            self.emit(s)
        self.line("sindex = tl.arange(0, SBLOCK)[None, :]")
        self.line(f"smask = xmask & (sindex < {split})")
        for r in reduces:
            out = self.value(r.name)
            ident = reductions.identity(r.op, r.dtype)
            parts = {}
            for part in welford.parts_of(r.op):
                self.line(f"{out}{part}_part = tl.load({out}{part}_ws + (xindex * {split} + "
                          f"sindex), mask=smask, other={ident})")
                parts[part] = f"tl.where(smask, {out}{part}_part, {ident})"
            if r.op == "m2":
                for text in welford.combine_partials(out, parts):
                    self.line(text)
            else:
                self.line(f"{out} = {reductions.row_reduce(r.op, r.dtype, parts[''])}")
            self.dtypes[r.name] = r.dtype
        for s in phase.after:
            self.emit(s)

    def write(self) -> TritonKernelCode:
        k = self.kernel
        split = self.config.split
        self.prologue()
        reduces = self.emit_split_partial(split)
        partial_lines, self.lines = self.lines, []
        if k.origins:
            self.line(f"# fused: {', '.join(k.origins)} (split reduction: {split} chunks a row)")
        self.prologue(reduction_axis=False)
        self.emit_split_final(split, reduces)
        fn_name = identifier(k.name)
        # the launcher passes the kernel's arguments (buffers, sizes), then the workspaces
        params = self.param_list() + self.workspace_params(reduces)
        xblock = self.config.xblock
        workspace_numel = k.numel * split
        partial = SplitLaunch(
            name=fn_name + "_partial",
            constexprs={"XBLOCK": xblock, "RBLOCK": self.config.rblock},
            grid=(blocks(k.numel, xblock), split, 1),
            workspace_dtypes=[str(r.dtype).replace("torch.", "")
                              for r, _ in self.workspaces(reduces)],
            workspace_numel=workspace_numel if isinstance(workspace_numel, int)
            else symbolic.format(workspace_numel),
        )
        final_xblock = min(64, next_power_of_2(self.facts.hint(k.numel)))
        final_constexprs = {"XBLOCK": final_xblock, "SBLOCK": next_power_of_2(split)}
        source = self.module_source([
            (partial.name, params, list(partial.constexprs), partial_lines),
            (fn_name, params, list(final_constexprs), self.lines),
        ])
        signature = self.signature()
        for (r, _), ws in zip(self.workspaces(reduces), self.workspace_params(reduces)):
            signature[ws] = pointer_type(r.dtype)
        return TritonKernelCode(
            name=fn_name, source=source, signature=signature, constexprs=final_constexprs,
            grid=(blocks(k.numel, final_xblock), 1, 1), num_warps=self.config.num_warps,
            num_stages=self.config.num_stages, split=partial,
        )
