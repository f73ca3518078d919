"""The Triton matmul template: a kernel marked ``Kernel.template`` -> a tiled ``tl.dot``.

A template kernel's body is a loop-IR reduction (``buffers.MatmulBuffer``): one
``sum`` over ``r0`` (K) of ``mul(a, b)`` where ``a`` depends on ``(batch,) m, k`` and
``b`` on ``(batch,) k, n``, plus whatever the scheduler fused: the statements ``a`` and
``b`` need are the *prologues* (inlined producers: a cast, a scale, a transposed view's
index), evaluated per step of K on ``[BLOCK_M, BLOCK_K]`` and ``[BLOCK_K, BLOCK_N]``
tiles; the statements after the reduction are the *epilogue* (bias, activation,
residual, cast, other outputs), evaluated on the ``[BLOCK_M, BLOCK_N]`` float32
accumulator before the masked stores. The generated code (a linear layer with GELU)::

    @triton.jit
    def kernel0(arg0_ptr, arg1_ptr, arg2_ptr, buf1_ptr, BLOCK_M: tl.constexpr, ...):
        # matmul template: mm [M=64, N=48] reduce [K=32], bm32_bn32_bk32_g8_s4_w4
        # fused: addmm, gelu
        M = 64
        ...
        pid_m, pid_n: program 0's tile, swizzled in groups of GROUP_M row tiles
        xm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
        xn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        acc = tl.full([BLOCK_M, BLOCK_N], 0, tl.float32)
        for koff in range(0, K, BLOCK_K):
            ka = koff + tl.arange(0, BLOCK_K)[None, :]
            kb = koff + tl.arange(0, BLOCK_K)[:, None]
            # prologue A [BLOCK_M, BLOCK_K]
            v0 = tl.load(arg1_ptr + (32*xm + ka), mask=amask, other=0.0)
            # prologue B [BLOCK_K, BLOCK_N]
            v1 = tl.load(arg2_ptr + (kb + 32*xn), mask=bmask, other=0.0)
            acc = tl.dot(v0, v1, acc)
        # epilogue [BLOCK_M, BLOCK_N]
        v3 = acc
        ...
        tl.store(buf1_ptr + (48*xm + xn), v9, mask=xmask)

Float16/bfloat16 operands enter the dot as they are (the loop IR's cast to float32 is
the dot's own widening); float32 operands use TF32 only when the kernel records that it
was allowed (``MatmulTemplate.allow_tf32``). Batched matmuls take the batch from
``tl.program_id(1)``. Split-K configs write two functions (the launcher's split form,
:class:`~.kernel_code.SplitLaunch`): ``<name>_partial`` over ``(tiles, split)`` reduces one
chunk of K into a float32 workspace, ``<name>`` sums the chunks and runs the epilogue.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sympy
import torch
from ember.inductor.codegen.triton.dtypes import tl_type
from ember.inductor.codegen.triton.heuristics import LaunchConfig
from ember.inductor.codegen.triton.kernel_code import (
    SplitLaunch,
    TritonKernelCode,
    identifier,
    literal_source,
)
from ember.inductor.codegen.triton.kernel_writer import KernelWriter
from ember.inductor.codegen.triton.matmul_configs import MatmulConfig
from ember.inductor.codegen.triton.sizes import SizeFacts, blocks, operand_source, size_source
from ember.inductor.loop_ir import (
    Compute,
    IndexExpr,
    Kernel,
    Literal,
    Load,
    MatmulTemplate,
    Reduce,
    Size,
    Stmt,
    Store,
    free_vars,
    render,
    stmt_inputs,
)
from ember.inductor.loop_ir.index import indirect_values
from ember.runtime.ir import symbolic

HALF = (torch.float16, torch.bfloat16)

#: a bfloat16 template's module: whether it was imported for Triton's interpreter (the
#: runtime sets TRITON_INTERPRET while it imports a kernel module for CPU tensors)
INTERPRETER_FLAG = """
import os

DOT_IN_FLOAT32 = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0") == "1")
"""


class MatmulTemplateWriter(KernelWriter):
    """Writes one matmul template kernel (module doc).

    Raises (from :meth:`write`):
        NotImplementedError: the kernel is not of the template's form (a value over K
        outside the dot's operands, a value needing both ``m`` and ``n`` in a prologue).
    """

    def __init__(self, kernel: Kernel, facts: SizeFacts | None = None,
                 config: MatmulConfig | None = None) -> None:
        template = kernel.template
        if template is None:
            raise ValueError(f"kernel {kernel.name} is not a matmul template")
        self.template: MatmulTemplate = template
        self.mm = config or MatmulConfig.parse(template.config)
        super().__init__(kernel, LaunchConfig(1, 1, True, self.mm.num_warps,
                                              self.mm.num_stages), facts)
        first = 1 if template.batched else 0
        self.batch_var, self.m_var, self.n_var = (
            "x0" if template.batched else None, f"x{first}", f"x{first + 1}")
        self.var_text: dict[str, str] = {}
        self.section_mask: str | None = "xmask"
        self.out_mask: str | None = "xmask"
        self._split_plan()

    # --- analysis ---------------------------------------------------------------------

    def _split_plan(self) -> None:
        """Which statements are the dot's operands' prologues, the dot and the
        epilogue."""
        body = self.kernel.body
        reduces = [s for s in body if isinstance(s, Reduce)]
        if len(reduces) != 1 or reduces[0].op != "sum":
            raise NotImplementedError(
                f"matmul template {self.kernel.name}: expected one sum (the dot), "
                f"found {[r.op for r in reduces]}")
        self.dot = reduces[0]
        defs = {s.name: s for s in body if not isinstance(s, Store)}
        product = defs[self.dot.arg]
        if not isinstance(product, Compute) or product.op != "mul":
            raise NotImplementedError(
                f"matmul template {self.kernel.name}: the reduction is not of a product")
        skip = {product.name}
        operands = []
        for arg in product.args:
            stmt = defs[arg]
            if (isinstance(stmt, Compute) and stmt.op == "cast"
                    and defs[stmt.args[0]].dtype in HALF):
                skip.add(stmt.name)
                arg = stmt.args[0]
            operands.append(arg)
        self.a_value, self.b_value = operands
        self.dot_dtype = defs[self.a_value].dtype
        varying = self.kernel.values_depending_on(
            {v.name for v in self.kernel.ranges + self.kernel.reduction_ranges})
        self.a_side = self._closure(self.a_value, defs) & varying
        self.b_side = self._closure(self.b_value, defs) & varying
        after_dot = {self.dot.name}
        for s in body:
            if not isinstance(s, Store) and any(a in after_dot for a in stmt_inputs(s)):
                after_dot.add(s.name)
        self.common = [s for s in body if not isinstance(s, Store) and s.name not in varying
                       and s.name not in skip and s.name not in after_dot]
        common = {s.name for s in self.common}
        inner = self.kernel.inner_values()
        self.epilogue: list[Stmt] = []
        m, n = self.m_var, self.n_var
        for s in body:
            if isinstance(s, Store):
                if any(a in inner for a in stmt_inputs(s)) or "r0" in {
                        v.name for v in free_vars(s.index)}:
                    raise NotImplementedError(
                        f"matmul template {self.kernel.name}: a store inside the K loop")
                self.epilogue.append(s)
                continue
            if s.name in skip or s.name in self.a_side or s.name in self.b_side:
                continue
            if s.name in common or isinstance(s, Reduce):
                continue
            if s.name in inner:
                raise NotImplementedError(
                    f"matmul template {self.kernel.name}: {s.name} depends on K outside "
                    "the dot's operands")
            self.epilogue.append(s)
        for side, other in ((self.a_side, n), (self.b_side, m)):
            if side & self.kernel.values_depending_on({other}):
                raise NotImplementedError(
                    f"matmul template {self.kernel.name}: an operand's prologue depends "
                    f"on {other}")

    @staticmethod
    def _closure(value: str, defs: Mapping[str, Stmt]) -> set[str]:
        found: set[str] = set()
        stack = [value]
        while stack:
            name = stack.pop()
            if name in found or name not in defs:
                continue
            found.add(name)
            stack.extend(stmt_inputs(defs[name]))
        return found

    # --- emission overrides -----------------------------------------------------------

    def index(self, expr: IndexExpr) -> str:
        return render(expr, lambda v: self.var_text[v.name], self.value, div="//",
                      sym=size_source)

    def axes_of(self, expr: IndexExpr) -> set[str]:
        return {"x"} if free_vars(expr) or indirect_values(expr) else set()

    def mask_for(self, s: Stmt, extra: str | None) -> str | None:
        base = self.section_mask
        if extra is None:
            return base
        extra = self.value(extra)
        return extra if base is None else f"{base} & {extra}"

    def emit_store(self, s: Store) -> None:
        if s.mode != "store":
            raise NotImplementedError(f"matmul template {self.kernel.name}: a scatter store")
        ptr = f"{self.params[s.buffer]} + ({self.index(s.index)})"
        used = {v.name for v in free_vars(s.index)}
        if not {self.m_var, self.n_var} <= used:
            ptr += " + tl.full([BLOCK_M, BLOCK_N], 0, tl.int32)"
        mask = self.mask_for(s, s.mask)
        value = self.value(s.value)
        if s.mask is not None:
            mask = f"(({mask}) != 0)"
        masked = "" if mask is None else f", mask={mask}"
        self.line(f"tl.store({ptr}, {value}{masked})")

    # --- the template -----------------------------------------------------------------

    def size_prologue(self) -> None:
        """The size arguments widened to 64 bits when indexes are (no ``xnumel``: the
        template's sizes are ``M``, ``N``, ``K``)."""
        if self.use64:
            for name in self.size_args:
                self.line(f"{name} = {name} + tl.full([], 0, tl.int64)")

    def size(self, name: str, size: Size) -> None:
        self.line(f"{name} = {size_source(size)}")

    def sizes_of(self) -> tuple[Size, Size, Size, Size]:
        var_sizes = {v.name: v.size for v in self.kernel.ranges + self.kernel.reduction_ranges}
        batch: Size = var_sizes.get(self.batch_var or "", 1)
        return batch, var_sizes[self.m_var], var_sizes[self.n_var], var_sizes["r0"]

    def tile_prologue(self, pid: str) -> None:
        """Sizes, the program's output tile (GROUP_M swizzle) and the output mask."""
        self.size_lines()
        self.line(f"pid = {pid}")
        self.grid_lines()
        self.tile_of("pid")

    def size_lines(self) -> None:
        """``M``, ``N``, ``K`` (after the size arguments' widening)."""
        _, m, n, k = self.sizes_of()
        self.size_prologue()
        self.size("M", m)
        self.size("N", n)
        self.size("K", k)

    def grid_lines(self) -> None:
        """The output's tiles along M and N, and the swizzle group's width in tiles."""
        self.line("grid_m = (M + BLOCK_M - 1) // BLOCK_M")
        self.line("grid_n = (N + BLOCK_N - 1) // BLOCK_N")
        self.line("width = GROUP_M * grid_n")

    def tile_of(self, pid: str) -> None:
        """Output tile ``pid`` (GROUP_M swizzle): ``pid_m``, ``pid_n``, ``xm``, ``xn``
        and the output mask."""
        self.line(f"first_m = ({pid} // width) * GROUP_M")
        self.line("rows = tl.minimum(grid_m - first_m, GROUP_M)")
        self.line(f"pid_m = first_m + ({pid} % width) % rows")
        self.line(f"pid_n = ({pid} % width) // rows")
        wide = ".to(tl.int64)" if self.use64 else ""
        self.line(f"xm = (pid_m{wide} * BLOCK_M + tl.arange(0, BLOCK_M))[:, None]")
        self.line(f"xn = (pid_n{wide} * BLOCK_N + tl.arange(0, BLOCK_N))[None, :]")
        xmask = self.bounds(("xm", "M", self.mm.block_m), ("xn", "N", self.mm.block_n))
        if xmask is not None:
            self.line(f"xmask = {xmask}")
        self.out_mask = None if xmask is None else "xmask"
        self.var_text = {self.m_var: "xm", self.n_var: "xn"}
        if self.batch_var is not None:
            self.line(f"xb = tl.program_id(1){wide}")
            self.var_text[self.batch_var] = "xb"

    def emit_section(self, title: str, names: set[str], mask: str | None,
                     var_text: dict[str, str]) -> None:
        self.line(f"# {title}")
        self.section_mask = mask
        self.var_text.update(var_text)
        for s in self.kernel.body:
            if not isinstance(s, Store) and s.name in names:
                self.emit(s)

    def operand(self, value: str, names: set[str], mask: str | None, tile_vars: set[str]
                ) -> str:
        """The dot operand: its tile, zero outside ``mask`` and of the tile's shape,
        unless it is a masked load over both of the tile's variables (which reads 0
        outside the mask already)."""
        text = self.value(value)
        stmt = next(s for s in self.kernel.body if not isinstance(s, Store) and s.name == value)
        if (isinstance(stmt, Load) and stmt.mask is None
                and tile_vars <= {v.name for v in free_vars(stmt.index)}):
            return text
        dtype = tl_type(self.dot_dtype)
        if mask is None:  # every point of the tile is in bounds: only its shape
            shape = "[BLOCK_M, BLOCK_K]" if self.m_var in tile_vars else "[BLOCK_K, BLOCK_N]"
            self.line(f"{text}_tile = tl.broadcast_to({text}, {shape}).to({dtype})")
        else:
            self.line(f"{text}_tile = tl.where({mask}, {text}, 0.0).to({dtype})")
        return f"{text}_tile"

    def exact(self, size: Size, block: int) -> bool:
        """Whether ``block`` divides ``size`` (static): no mask along it."""
        return isinstance(size, int) and block > 0 and size % block == 0

    def bounds(self, *parts: tuple[str, str, int]) -> str | None:
        """The conjunction of ``index < size`` over the ``(index, size name, block)``
        parts whose block does not divide the size, None when every one does."""
        sizes = dict(zip("MNK", self.sizes_of()[1:]))
        tests = [f"({index} < {name})" for index, name, block in parts
                 if not self.exact(sizes[name], block)]
        return " & ".join(tests) or None

    def k_loop(self, extent: str, start: str | None) -> None:
        """``acc`` over ``[start, start + extent)`` of K (the whole of K without start)."""
        self.line("acc = tl.full([BLOCK_M, BLOCK_N], 0, tl.float32)")
        self.line(f"for koff in range(0, {extent}, BLOCK_K):")
        self.indent += 1
        base = "koff" if start is None else f"{start} + koff"
        wide = ".to(tl.int64)" if self.use64 else ""
        self.line(f"ka = ({base} + tl.arange(0, BLOCK_K)){wide}[None, :]")
        self.line(f"kb = ({base} + tl.arange(0, BLOCK_K)){wide}[:, None]")
        # split-K: the last chunk may end past K
        block_k = self.mm.block_k if start is None else 0
        amask = self.bounds(("xm", "M", self.mm.block_m), ("ka", "K", block_k))
        bmask = self.bounds(("kb", "K", block_k), ("xn", "N", self.mm.block_n))
        for name, mask in (("amask", amask), ("bmask", bmask)):
            if mask is not None:
                self.line(f"{name} = {mask}")
        self.emit_section("prologue A [BLOCK_M, BLOCK_K]", self.a_side,
                          amask and "amask", {"r0": "ka"})
        a = self.operand(self.a_value, self.a_side, amask and "amask", {self.m_var, "r0"})
        self.emit_section("prologue B [BLOCK_K, BLOCK_N]", self.b_side,
                          bmask and "bmask", {"r0": "kb"})
        b = self.operand(self.b_value, self.b_side, bmask and "bmask", {"r0", self.n_var})
        self.emit_dot(a, b)
        self.indent -= 1

    def emit_dot(self, a: str, b: str) -> None:
        """``acc += a @ b`` on the operand tiles ``a``, ``b`` (their dtype's precision)."""
        precision = ""
        if self.dot_dtype == torch.float32:
            precision = f", input_precision=\"{'tf32' if self.template.allow_tf32 else 'ieee'}\""
        if self.dot_dtype == torch.bfloat16:
            # NOTE: Triton's interpreter (3.6, 3.9) multiplies bfloat16 dot operands as
            # their integer bits; it gets them widened (exact) instead
            self.line("if DOT_IN_FLOAT32:")
            self.line(f"    acc = tl.dot({a}.to(tl.float32), {b}.to(tl.float32), acc, "
                      "input_precision=\"ieee\")")
            self.line("else:")
            self.line(f"    acc = tl.dot({a}, {b}, acc)")
        else:
            self.line(f"acc = tl.dot({a}, {b}, acc{precision})")

    def emit_common(self) -> None:
        for s in self.common:
            if isinstance(s, Literal):
                self.dtypes[s.name] = s.dtype
                self.line(f"{self.value(s.name)} = {literal_source(s)}")
            else:
                self.section_mask = None
                self.emit(s)

    def emit_epilogue(self) -> None:
        self.line("# epilogue [BLOCK_M, BLOCK_N]")
        self.section_mask = self.out_mask
        self.var_text.pop("r0", None)
        self.dtypes[self.dot.name] = torch.float32
        self.line(f"{self.value(self.dot.name)} = acc")
        for s in self.epilogue:
            self.emit(s)

    def header(self, note: str = "") -> None:
        batch, m, n, k = self.sizes_of()
        shape = (f"[B={size_source(batch)}, " if self.template.batched else "[") + \
            f"M={size_source(m)}, N={size_source(n)}] reduce [K={size_source(k)}]"
        self.line(f"# matmul template: {self.template.op} {shape}, {self.mm.name}{note}")
        if self.kernel.origins:
            self.line(f"# fused: {', '.join(self.kernel.origins)}")

    def module_source(self, functions: list[tuple[str, list[str], list[str], list[str]]]
                      ) -> str:
        source = super().module_source(functions)
        if self.dot_dtype != torch.bfloat16:
            return source
        head, sep, rest = source.partition("\n\n@triton.jit")
        return (head + "\n" + INTERPRETER_FLAG + sep + rest)

    def constexprs(self) -> dict[str, int]:
        return {"BLOCK_M": self.mm.block_m, "BLOCK_N": self.mm.block_n,
                "BLOCK_K": self.mm.block_k, "GROUP_M": self.mm.group_m}

    def tiles(self) -> int | str:
        """The number of output tiles (a size expression when symbolic)."""
        _, m, n, _ = self.sizes_of()
        count = (sympy.floor((sympy.sympify(m) + self.mm.block_m - 1) / self.mm.block_m)
                 * sympy.floor((sympy.sympify(n) + self.mm.block_n - 1) / self.mm.block_n))
        if count.is_Integer:
            return int(count)
        text = symbolic.format(count)
        return text if isinstance(text, str) else int(text)

    def write(self) -> TritonKernelCode:
        if self.mm.split_k > 1:
            return self.write_split()
        batch = self.sizes_of()[0]
        self.header()
        self.tile_prologue("tl.program_id(0)")
        self.emit_common()
        self.k_loop("K", None)
        self.emit_epilogue()
        return self.kernel_code((self.tiles(), blocks(batch, 1), 1))

    def kernel_code(self, grid: tuple[Any, Any, Any]) -> TritonKernelCode:
        """The written lines as one kernel's module, launched over ``grid``."""
        name = identifier(self.kernel.name)
        constexprs = self.constexprs()
        source = self.module_source([(name, self.param_list(), list(constexprs),
                                      self.lines)])
        return TritonKernelCode(
            name=name, source=source, signature=self.signature(), constexprs=constexprs,
            grid=grid, num_warps=self.mm.num_warps, num_stages=self.mm.num_stages)

    def write_split(self) -> TritonKernelCode:
        """The split-K form (module doc): a partial function over ``(tiles, split)``
        into a ``[split, M, N]`` float32 workspace, then the summing one."""
        split = self.mm.split_k
        _, m, n, k = self.sizes_of()
        self.header(f" (split-K: {split} chunks)")
        self.tile_prologue("tl.program_id(0)")
        self.line("ksplit = tl.program_id(1)")
        chunk_size = sympy.floor((sympy.floor((sympy.sympify(k) + split - 1) / split)
                                  + self.mm.block_k - 1) / self.mm.block_k) * self.mm.block_k
        chunk = operand_source(chunk_size if not chunk_size.is_Integer else int(chunk_size))
        self.line(f"kstart = ksplit * {chunk}")
        self.emit_common()
        self.k_loop(chunk, "kstart")
        masked = "" if self.out_mask is None else ", mask=xmask"
        self.line(f"tl.store(acc_ws + (ksplit * (M * N) + xm * N + xn), acc{masked})")
        partial_lines, self.lines = self.lines, []
        self.indent = 1
        self.header(f" (split-K: sums {split} chunks)")
        self.tile_prologue("tl.program_id(0)")
        self.emit_common()
        self.line("acc = tl.full([BLOCK_M, BLOCK_N], 0, tl.float32)")
        self.line(f"for ksplit in range(0, {split}):")
        masked = "" if self.out_mask is None else ", mask=xmask, other=0.0"
        self.line(f"    acc += tl.load(acc_ws + (ksplit * (M * N) + xm * N + xn){masked})")
        self.emit_epilogue()
        name = identifier(self.kernel.name)
        constexprs = self.constexprs()
        params = self.param_list() + ["acc_ws"]
        numel = sympy.sympify(m) * n * split
        partial = SplitLaunch(
            name=name + "_partial", constexprs=constexprs, grid=(self.tiles(), split, 1),
            workspace_dtypes=["float32"],
            workspace_numel=int(numel) if numel.is_Integer else symbolic.format(numel))
        source = self.module_source([(partial.name, params, list(constexprs), partial_lines),
                                     (name, params, list(constexprs), self.lines)])
        signature = self.signature()
        signature["acc_ws"] = "*fp32"
        return TritonKernelCode(
            name=name, source=source, signature=signature, constexprs=constexprs,
            grid=(self.tiles(), 1, 1), num_warps=self.mm.num_warps,
            num_stages=self.mm.num_stages, split=partial)


__all__ = ["MatmulTemplateWriter"]
