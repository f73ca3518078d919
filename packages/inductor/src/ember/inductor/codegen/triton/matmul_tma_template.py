"""The persistent TMA variant of the matmul template (Hopper).

The same kernel as :mod:`.matmul_template` (the same split of the body into the dot,
constants and the epilogue; the epilogue's fused bias, activation, residual and casts
run on the float32 accumulator before the masked stores), with two differences in the
main loop:

- **TMA loads.** A and B are read through device-side tensor descriptors
  (``tl.make_tensor_descriptor``, built once per program from the base pointer, the
  run-time sizes and the row stride), so the tiles are copied by the Tensor Memory
  Accelerator and pipelined over ``num_stages`` stages; out-of-bounds parts of a tile
  read zero (no masks). A transposed operand (a ``linear`` weight) is described as it
  lies in memory and its tile transposed (``tl.trans``) before the dot.
- **Persistent.** The grid is ``min(SMs, tiles)`` programs; each loops over output tiles
  ``program_id, program_id + programs, ...`` in the GROUP_M-swizzled order
  (``tl.range(..., flatten=True)``: the compiler overlaps one tile's epilogue with the
  next tile's loads).

The generated code (a linear layer with GELU, a transposed weight)::

    @triton.jit
    def kernel0(arg0_ptr, arg1_ptr, arg2_ptr, buf1_ptr, BLOCK_M: tl.constexpr, ...):
        # matmul template (TMA, persistent): addmm [M=64, N=48] reduce [K=32], tma_...
        M = 64
        ...
        tiles = grid_m * grid_n
        a_desc = tl.make_tensor_descriptor(arg0_ptr, shape=[M, K], strides=[32, 1], ...)
        b_desc = tl.make_tensor_descriptor(arg1_ptr, shape=[N, K], strides=[32, 1], ...)
        tile_c = tl.program_id(0) - tl.num_programs(0)
        for tile in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
            first_m = (tile // width) * GROUP_M
            ...
            for koff in range(0, K, BLOCK_K):
                v0 = a_desc.load([tl.cast(pid_m * BLOCK_M, tl.int32), tl.cast(koff, ...)])
                v2 = tl.trans(b_desc.load([...]))
                acc = tl.dot(v0, v2, acc)
            tile_c += tl.num_programs(0)
            ... (the epilogue's tile, from tile_c: xm, xn, xmask)
            # epilogue [BLOCK_M, BLOCK_N]
            ...
            tl.store(buf1_ptr + ((xm*48 + xn)), v19, mask=xmask)

Device-side descriptors live in global scratch memory that Triton asks an allocator for
at each launch (a few hundred bytes); the runtime's launcher installs one in every thread
that launches such a binary (``ember.runtime.compiled.triton_scratch``), so the module
sets none itself.

A descriptor needs a 16-byte-aligned base address, which only the run time knows for a
graph input or a constant (a view ``x[1:]`` of a bfloat16 tensor starts 2 bytes in);
:func:`descriptor_buffers` names those buffers, and the wrapper copies one that arrives
unaligned for that call (``_aligned``, ``ember.runtime.compiled.triton_alignment``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import sympy
import torch
from ember.inductor.codegen.triton.kernel_code import TritonKernelCode
from ember.inductor.codegen.triton.matmul_configs import MatmulConfig
from ember.inductor.codegen.triton.matmul_template import MatmulTemplateWriter
from ember.inductor.codegen.triton.matmul_tma import (
    TmaUnsuitable,
    sm_count,
    stride_reason,
)
from ember.inductor.codegen.triton.sizes import SizeFacts, size_source
from ember.inductor.loop_ir import (
    Add,
    IndexExpr,
    Int,
    Kernel,
    Load,
    Mul,
    Size,
    Sym,
    Var,
)
from ember.runtime.ir import symbolic
from ember.runtime.logs import log
from ember.runtime.phases import count


@dataclass(frozen=True)
class Descriptor:
    """How one dot operand is read: ``name`` over the buffer parameter ``param`` with
    ``shape`` (size names, as the memory lies), the row stride's text, the block's
    constexpr names, the tile's offsets, whether the tile is transposed for the dot, and
    the wrapper's buffer behind ``param``."""

    name: str
    param: str
    shape: tuple[str, str]
    stride: str
    block: tuple[str, str]
    offsets: tuple[str, str]
    transposed: bool
    buffer: str

    def create(self) -> str:
        return (f"{self.name} = tl.make_tensor_descriptor({self.param}, "
                f"shape=[{self.shape[0]}, {self.shape[1]}], strides=[{self.stride}, 1], "
                f"block_shape=[{self.block[0]}, {self.block[1]}])")

    def load(self) -> str:
        offsets = ", ".join(f"tl.cast({o}, tl.int32)" for o in self.offsets)
        tile = f"{self.name}.load([{offsets}])"
        return f"tl.trans({tile})" if self.transposed else tile


def linear_terms(expr: IndexExpr) -> dict[str, sympy.Expr] | None:
    """``expr`` as ``{variable: coefficient, "": constant}``, None when it is not a sum
    of variables times sizes (a division, a modulo, an indirect index)."""
    if isinstance(expr, Var):
        return {expr.name: sympy.Integer(1)}
    if isinstance(expr, Int):
        return {"": sympy.Integer(expr.value)}
    if isinstance(expr, Sym):
        return {"": sympy.sympify(expr.expr)}
    if isinstance(expr, Add):
        total: dict[str, sympy.Expr] = {}
        for term in expr.terms:
            part = linear_terms(term)
            if part is None:
                return None
            for name, c in part.items():
                total[name] = total.get(name, sympy.Integer(0)) + c
        return total
    if isinstance(expr, Mul):
        scale: sympy.Expr = sympy.Integer(1)
        varying: dict[str, sympy.Expr] | None = None
        for factor in expr.factors:
            part = linear_terms(factor)
            if part is None:
                return None
            if set(part) == {""}:
                scale = scale * part[""]
            elif varying is None:
                varying = part
            else:
                return None  # a product of two variables
        if varying is None:
            return {"": scale}
        return {name: scale * c for name, c in varying.items()}
    return None


def _size(value: sympy.Expr) -> Size:
    value = sympy.simplify(value)
    return int(value) if value.is_Integer else value


class TmaMatmulTemplateWriter(MatmulTemplateWriter):
    """Writes one matmul template kernel as the persistent TMA variant (module doc).

    Raises (from the constructor):
        TmaUnsuitable: the kernel is not of the variant's form (a batched matmul, an
            operand with a prologue, an unaligned or offset operand), naming why.
    """

    def __init__(self, kernel: Kernel, facts: SizeFacts | None = None,
                 num_sms: int | None = None) -> None:
        super().__init__(kernel, facts)
        if not self.mm.tma:
            raise ValueError(f"config {self.mm.name} is not a TMA config")
        if self.template.batched:
            raise TmaUnsuitable(f"{self.template.op} is batched")
        if self.dot_dtype == torch.float32 and not self.template.allow_tf32:
            raise TmaUnsuitable("float32 without TF32 allowed")
        self.num_sms = num_sms or sm_count()
        self.a_desc = self._descriptor("a_desc", self.a_value, self.a_side, self.m_var)
        self.b_desc = self._descriptor("b_desc", self.b_value, self.b_side, self.n_var)

    def _descriptor(self, name: str, value: str, side: set[str], outer: str) -> Descriptor:
        """The descriptor of operand ``value`` (``outer``: its M or N variable)."""
        which = "A" if name == "a_desc" else "B"
        loads = {s.name: s for s in self.kernel.body if isinstance(s, Load)}
        stmt = loads.get(value)
        if stmt is None or side != {value}:
            raise TmaUnsuitable(f"operand {which} has a fused prologue "
                                f"({len(side)} statements; TMA loads stored tensors)")
        if stmt.mask is not None:
            raise TmaUnsuitable(f"operand {which} is a masked load")
        terms = linear_terms(stmt.index)
        if terms is None or set(terms) - {"", outer, "r0"}:
            raise TmaUnsuitable(f"operand {which}'s index {stmt.index} is not affine in "
                                f"{outer} and the reduction")
        if sympy.simplify(terms.get("", sympy.Integer(0))) != 0:
            raise TmaUnsuitable(f"operand {which} starts at an offset "
                                f"({terms['']} elements: TMA needs an aligned base)")
        outer_stride = _size(terms.get(outer, sympy.Integer(0)))
        k_stride = _size(terms.get("r0", sympy.Integer(0)))
        outer_block = "BLOCK_M" if which == "A" else "BLOCK_N"
        outer_size = "M" if which == "A" else "N"
        first = "pid_m * BLOCK_M" if which == "A" else "pid_n * BLOCK_N"
        if k_stride == 1:  # rows of the outer variable, K contiguous
            lead, shape = outer_stride, (outer_size, "K")
            block, offsets = (outer_block, "BLOCK_K"), (first, "koff")
        elif outer_stride == 1:  # rows of K, the outer variable contiguous
            lead, shape = k_stride, ("K", outer_size)
            block, offsets = ("BLOCK_K", outer_block), ("koff", first)
        else:
            raise TmaUnsuitable(f"operand {which} has no unit stride ({stmt.index})")
        reason = stride_reason(lead, stmt.dtype.itemsize)
        if reason is not None:
            raise TmaUnsuitable(f"operand {which}: {reason}")
        # the dot takes A as [BLOCK_M, BLOCK_K] and B as [BLOCK_K, BLOCK_N]
        transposed = (shape[0] == "K") if which == "A" else (shape[1] == "K")
        return Descriptor(name, self.params[stmt.buffer], shape, size_source(lead), block,
                          offsets, transposed, stmt.buffer)

    def grid_size(self) -> int | str:
        """``min(SMs, tiles)`` programs (a size expression when symbolic)."""
        tiles = self.tiles()
        if isinstance(tiles, int):
            return min(self.num_sms, tiles)
        text = symbolic.format(sympy.Min(self.num_sms, sympy.sympify(tiles)))
        return text if isinstance(text, str) else int(text)

    def write(self) -> TritonKernelCode:
        self.header(" (TMA, persistent)")
        self.size_lines()
        self.grid_lines()
        self.line("tiles = grid_m * grid_n")
        for desc in (self.a_desc, self.b_desc):
            self.line(desc.create())
        self.emit_common()
        # NOTE: the epilogue finds its tile from a counter of its own (``tile_c``), not
        # from the loads' ``pid_m``/``pid_n``: Triton's pipelining of a flattened loop
        # cannot take a value used both before and after the inner loop (the same
        # work-around as Triton's persistent matmul tutorial)
        self.line("tile_c = tl.program_id(0) - tl.num_programs(0)")
        self.line("for tile in tl.range(tl.program_id(0), tiles, tl.num_programs(0), "
                  "flatten=True):")
        self.indent += 1
        self.line("first_m = (tile // width) * GROUP_M")
        self.line("rows = tl.minimum(grid_m - first_m, GROUP_M)")
        self.line("pid_m = first_m + (tile % width) % rows")
        self.line("pid_n = (tile % width) // rows")
        self.line("acc = tl.full([BLOCK_M, BLOCK_N], 0, tl.float32)")
        self.line("for koff in range(0, K, BLOCK_K):")
        self.indent += 1
        self.line(f"{self.value(self.a_value)} = {self.a_desc.load()}")
        self.line(f"{self.value(self.b_value)} = {self.b_desc.load()}")
        self.emit_dot(self.value(self.a_value), self.value(self.b_value))
        self.indent -= 1
        self.line("tile_c += tl.num_programs(0)")
        self.tile_of("tile_c")
        self.emit_epilogue()
        self.indent -= 1
        return self.kernel_code((self.grid_size(), 1, 1))


def write_tma_template(kernel: Kernel, facts: SizeFacts | None = None) -> TritonKernelCode:
    """The TMA variant of template ``kernel`` (a ``tma_`` config); where the kernel does
    not suit it, the pointer template with the same tiles, logged under ``autotune`` and
    counted (``matmul TMA fallbacks``)."""
    try:
        return TmaMatmulTemplateWriter(kernel, facts).write()
    except TmaUnsuitable as e:
        assert kernel.template is not None
        config = dataclasses.replace(MatmulConfig.parse(kernel.template.config), tma=False)
        log("autotune", f"matmul template {kernel.name}: TMA variant not used ({e}); "
                        f"the pointer template {config.name}")
        count("matmul TMA fallbacks")
        return MatmulTemplateWriter(kernel, facts, config).write()


def descriptor_buffers(kernel: Kernel, facts: SizeFacts | None = None) -> tuple[str, ...]:
    """The buffers ``kernel`` reads through TMA descriptors, whose base address must be
    16-byte aligned at run time (module doc): its A and B operands when it is a ``tma_``
    template :func:`write_tma_template` writes as the variant, none otherwise."""
    if kernel.template is None or not kernel.template.config.startswith("tma_"):
        return ()
    try:
        writer = TmaMatmulTemplateWriter(kernel, facts)
    except TmaUnsuitable:
        return ()  # written as the pointer template
    return tuple(dict.fromkeys((writer.a_desc.buffer, writer.b_desc.buffer)))


__all__ = ["Descriptor", "TmaMatmulTemplateWriter", "descriptor_buffers", "linear_terms",
           "write_tma_template"]
