"""Loop-IR kernel -> Triton source.

The shape of the generated code (a softmax over rows of 8, four rows):

.. code-block:: python

    @triton.jit
    def k0(arg0_ptr, buf0_ptr, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
        xoffset = tl.program_id(0) * XBLOCK
        xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
        xmask = xindex < 4
        rindex = tl.arange(0, RBLOCK)[None, :]
        rmask = rindex < 8
        xrmask = xmask & rmask
        x0 = xindex
        r0 = rindex
        v0 = tl.load(arg0_ptr + (8 * x0 + r0), mask=xrmask, other=0.0)
        ...

Pointwise kernels use a 1-D ``xindex``. Reduction kernels use ``[XBLOCK, RBLOCK]`` tiles:
*persistent* ones (a row fits in registers) emit the body once in order; *looped* ones
walk the row in ``RBLOCK`` steps, one pass per :class:`~ember.inductor.loop_ir.Phase`.
Outer values have shape ``[XBLOCK, 1]``, inner values ``[XBLOCK, RBLOCK]``. Indexes are
int32 unless the kernel can address 2**31 elements or more, then int64.
"""

from __future__ import annotations

import sympy
import torch
from ember.inductor.codegen.triton import reductions, welford
from ember.inductor.codegen.triton.combo import combo_parts
from ember.inductor.codegen.triton.dtypes import pointer_type, scalar_literal, tl_type
from ember.inductor.codegen.triton.heuristics import LaunchConfig
from ember.inductor.codegen.triton.kernel_code import (
    TritonKernelCode,
    identifier,
    literal_source,
)
from ember.inductor.codegen.triton.ops import HELPERS as OP_HELPERS
from ember.inductor.codegen.triton.ops import format_compute
from ember.inductor.codegen.triton.ranges import Dim, drop_unit_vars, linear_form, merge_dims
from ember.inductor.codegen.triton.reduction_layout import reduces_columns as reduces_columns
from ember.inductor.codegen.triton.sizes import (
    SizeFacts,
    blocks,
    is_static,
    operand_source,
    size_source,
)
from ember.inductor.loop_ir import (
    Compute,
    IndexExpr,
    IndexValue,
    Kernel,
    Literal,
    Load,
    Phase,
    Reduce,
    Size,
    Stmt,
    Store,
    Var,
    free_vars,
    reduction_phases,
    render,
)
from ember.inductor.loop_ir.index import indirect_values

INT32_LIMIT = 2**31 - 1

HEADER = '''import triton
import triton.language as tl

from ember.runtime.compiled.triton_math import libdevice_for_this_import

libdevice = libdevice_for_this_import()
'''

_RESERVED = {
    "triton", "tl", "libdevice", "xoffset", "xindex", "xmask", "rbase", "roffset",
    "rindex", "rmask", "xrmask", "XBLOCK", "RBLOCK", "SBLOCK", "rsplit", "rstart", "sindex", "smask",
    "float", "xnumel", "rnumel",
}


class KernelWriter:
    """Writes one kernel's Triton module (``generate.generate_triton_kernel`` picks the
    writer: this one, or ``split_writer.SplitReductionWriter``). ``facts``: the ranges
    of the kernel's size symbols (symbolic kernels; see :mod:`.sizes`)."""
    def __init__(self, kernel: Kernel, config: LaunchConfig,
                 facts: SizeFacts | None = None) -> None:
        self.kernel = kernel
        self.config = config
        self.facts = facts or SizeFacts()
        self.size_args = kernel.size_args
        self.lines: list[str] = []
        self.indent = 1
        self.helpers: set[str] = set()
        self.dtypes: dict[str, torch.dtype] = {}
        self.inner = kernel.inner_values() if kernel.is_reduction else set()
        self.unit = {v.name for v in kernel.ranges + kernel.reduction_ranges if v.size == 1}
        exprs = [drop_unit_vars(e, self.unit) for e in self._index_exprs()]
        self.xdims = merge_dims([v for v in kernel.ranges if v.name not in self.unit], exprs)
        self.rdims = merge_dims([v for v in kernel.reduction_ranges if v.name not in self.unit],
                                exprs)
        self.dim_of: dict[str, tuple[str, Dim]] = {}
        for prefix, dims in (("x", self.xdims), ("r", self.rdims)):
            for j, d in enumerate(dims):
                for v in d.vars:
                    self.dim_of[v.name] = (f"{prefix}{j}", d)
        self.use64 = self._needs_int64()
        self.params = self._param_names()
        self.names = self._value_names()

    # --- analysis ---------------------------------------------------------------------

    def _index_exprs(self) -> list[IndexExpr]:
        return [s.index for s in self.kernel.body if isinstance(s, (Load, Store, IndexValue))]

    def _needs_int64(self) -> bool:
        """Whether an index can reach 2**31: for symbolic sizes, at the upper bounds of
        their ranges (an unbounded size: yes, 64-bit indexes)."""
        k = self.kernel
        if not k.size_args:
            total = k.numel * max(1, k.reduction_numel)
            extents = [
                1 + sum((size - 1) * abs(stride) for size, stride in zip(b.sizes, b.strides))
                for b in k.buffers if b.numel != 0
            ]
            return bool(max([total, *extents]) > INT32_LIMIT)
        sizes: list[Size] = [k.numel * (k.reduction_numel if k.is_reduction else 1)]
        for b in k.buffers:
            sizes.append(1 + sum((size - 1) * sympy.Abs(sympy.sympify(stride))
                                 for size, stride in zip(b.sizes, b.strides)))
        bounds = [self.facts.upper(sympy.sympify(n)) for n in sizes]
        return any(b is None or b > INT32_LIMIT for b in bounds)

    def _param_names(self) -> dict[str, str]:
        params: dict[str, str] = {}
        for b in self.kernel.buffers:
            base = identifier(b.name) + ("_val" if b.host else "_ptr")
            while base in params.values() or base in _RESERVED or base in self.size_args:
                base += "_"
            params[b.name] = base
        return params

    def _value_names(self) -> dict[str, str]:
        taken = set(_RESERVED) | set(self.params.values()) | set(self.dim_of)
        taken |= set(self.size_args)
        taken |= {f"x{j}" for j in range(len(self.xdims))}
        taken |= {f"r{j}" for j in range(len(self.rdims))}
        names: dict[str, str] = {}
        for s in self.kernel.body:
            if isinstance(s, Store):
                continue
            ident = identifier(s.name)
            while ident in taken:
                ident += "_"
            taken.add(ident)
            names[s.name] = ident
        return names

    # --- emission helpers ---------------------------------------------------------------

    def line(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    def _lines(self, lines: list[str]) -> None:
        for text in lines:
            self.line(text)

    def value(self, name: str) -> str:
        return self.names[name]

    def index(self, expr: IndexExpr) -> str:
        """Triton source of an index expression over the merged dimensions."""
        expr = drop_unit_vars(expr, self.unit)
        form = linear_form(expr)
        if form is not None:
            coefs, const = form
            terms: list[str] = []
            for prefix, dims in (("x", self.xdims), ("r", self.rdims)):
                for j, d in enumerate(dims):
                    c = coefs.get(d.inner.name, 0)
                    if not isinstance(c, int):
                        terms.append(f"{operand_source(c)} * {prefix}{j}")
                    elif c == 1:
                        terms.append(f"{prefix}{j}")
                    elif c != 0:
                        terms.append(f"{c} * {prefix}{j}" if c > 0 else f"({c}) * {prefix}{j}")
            if not isinstance(const, int):
                terms.append(operand_source(const))
            elif const or not terms:
                terms.append(str(const) if const >= 0 else f"({const})")
            return " + ".join(terms)
        return render(expr, self._var_source, self.value, div="//", sym=size_source)

    def _var_source(self, v: Var) -> str:
        if v.name in self.unit:
            return "0"
        dim_name, dim = self.dim_of[v.name]
        stride = dim.stride_of(v.name)
        text = dim_name if stride == 1 else f"({dim_name} // {operand_source(stride)})"
        if v is not dim.vars[0] and v.name != dim.vars[0].name:
            text = f"({text} % {operand_source(v.size)})"
        return text

    def axes_of(self, expr: IndexExpr) -> set[str]:
        """Which tile axes (``x``, ``r``) an index expression varies along."""
        axes: set[str] = set()
        for v in free_vars(drop_unit_vars(expr, self.unit)):
            axes.add(self.dim_of[v.name][0][0])
        for name in indirect_values(expr):
            axes.add("x")
            if name in self.inner:
                axes.add("r")
        return axes

    def is_inner(self, s: Stmt) -> bool:
        if isinstance(s, Store):
            return s.value in self.inner or "r" in self.axes_of(s.index)
        if isinstance(s, Reduce):
            return True
        return s.name in self.inner

    def base_mask(self, inner: bool) -> str | None:
        if not self.kernel.is_reduction:
            return None if self.xblocks_exact() else "xmask"
        return "xrmask" if inner else "xmask"

    def xblocks_exact(self) -> bool:
        """Whether ``XBLOCK`` divides the outer numel for every size in range (then a
        pointwise kernel needs no mask)."""
        numel = self.kernel.numel
        if isinstance(numel, int):
            return numel % self.config.xblock == 0
        return bool(sympy.Mod(numel, self.config.xblock) == 0)

    def numel_source(self, reduction: bool) -> str:
        """``xnumel``/``rnumel`` for a symbolic kernel (a variable the prologue sets),
        else the number."""
        numel = self.kernel.reduction_numel if reduction else self.kernel.numel
        if is_static(numel):
            return str(int(numel))
        return "rnumel" if reduction else "xnumel"

    def size_prologue(self) -> None:
        """A symbolic kernel's first lines: its size arguments widened to 64 bits when
        indexes are (Triton passes a small int as i32), then ``xnumel``/``rnumel``."""
        if not self.size_args:
            return
        if self.use64:
            for name in self.size_args:
                self.line(f"{name} = {name} + tl.full([], 0, tl.int64)")
        if not is_static(self.kernel.numel):
            self.line(f"xnumel = {size_source(self.kernel.numel)}")
        if self.kernel.is_reduction and not is_static(self.kernel.reduction_numel):
            self.line(f"rnumel = {size_source(self.kernel.reduction_numel)}")

    # --- prologue -------------------------------------------------------------------------

    def dims_code(self, prefix: str, dims: list[Dim], flat: str) -> None:
        sizes = [d.size for d in dims]
        for j, d in enumerate(dims):
            stride: Size = 1
            for s in sizes[j + 1:]:
                stride *= s
            text = flat if stride == 1 else f"({flat} // {operand_source(stride)})"
            if j > 0:
                text = f"{text} % {operand_source(d.size)}"
            self.line(f"{prefix}{j} = {text}")

    def prologue(self, reduction_axis: bool = True) -> None:
        self.size_prologue()
        pid = "tl.program_id(0).to(tl.int64)" if self.use64 else "tl.program_id(0)"
        self.line(f"xoffset = {pid} * XBLOCK")
        numel = self.numel_source(reduction=False)
        if self.kernel.is_reduction:
            self.line("xindex = xoffset + tl.arange(0, XBLOCK)[:, None]")
            self.line(f"xmask = xindex < {numel}")
            if reduction_axis:
                rbase = "tl.arange(0, RBLOCK)[None, :]"
                self.line(f"rbase = {rbase}.to(tl.int64)" if self.use64 else f"rbase = {rbase}")
        else:
            self.line("xindex = xoffset + tl.arange(0, XBLOCK)")
            if not self.xblocks_exact():
                self.line(f"xmask = xindex < {numel}")
        self.dims_code("x", self.xdims, "xindex")

    def reduction_indexes(self, offset: str | None) -> None:
        rnumel = self.numel_source(reduction=True)
        self.line("rindex = rbase" if offset is None else f"rindex = {offset} + rbase")
        self.line(f"rmask = rindex < {rnumel}")
        self.line("xrmask = xmask & rmask")
        self.dims_code("r", self.rdims, "rindex")

    # --- statements ---------------------------------------------------------------------

    def mask_for(self, s: Stmt, extra: str | None) -> str | None:
        base = self.base_mask(self.is_inner(s))
        if extra is None:
            return base
        extra = self.value(extra)
        return extra if base is None else f"{base} & {extra}"

    def emit(self, s: Stmt) -> None:
        if isinstance(s, Load):
            self.emit_load(s)
        elif isinstance(s, Literal):
            self.dtypes[s.name] = s.dtype
            self.line(f"{self.value(s.name)} = {literal_source(s)}")
        elif isinstance(s, IndexValue):
            self.dtypes[s.name] = s.dtype
            text = self.index(s.index)
            if not self.axes_of(s.index):
                self.line(f"{self.value(s.name)} = tl.full([], {text}, {tl_type(s.dtype)})")
            else:
                self.line(f"{self.value(s.name)} = ({text}).to({tl_type(s.dtype)})")
        elif isinstance(s, Compute):
            self.dtypes[s.name] = s.dtype
            args = [self.value(a) for a in s.args]
            arg_dtype = self.dtypes[s.args[1] if s.op == "where" else s.args[0]]
            self.line(f"{self.value(s.name)} = {format_compute(s.op, args, arg_dtype, s.dtype)}")
        elif isinstance(s, Store):
            self.emit_store(s)
        elif isinstance(s, Reduce) and not self.kernel.is_reduction:
            self.emit_single_element_reduce(s)
        elif isinstance(s, Reduce):
            self.emit_persistent_reduce(s)
        else:  # pragma: no cover - the statement set is closed
            raise NotImplementedError(f"Triton codegen: statement {type(s).__name__}")

    def emit_load(self, s: Load) -> None:
        self.dtypes[s.name] = s.dtype
        if self.kernel.buffer(s.buffer).host:
            # a host scalar (lowering/host_scalars.py): its value is the argument
            value = self.params[s.buffer]
            if s.mask is not None:
                mask = self.mask_for(s, s.mask)
                value = f"tl.where(({mask}) != 0, {value}, {scalar_literal(s.other, s.dtype)})"
            self.line(f"{self.value(s.name)} = {value}")
            return
        ptr = f"{self.params[s.buffer]} + ({self.index(s.index)})"
        mask = self.mask_for(s, s.mask)
        if not self.axes_of(s.index) and s.mask is None:
            mask = None  # one address, always in bounds: a scalar load
        if mask is None:
            self.line(f"{self.value(s.name)} = tl.load({ptr})")
        else:
            if s.mask is not None:
                # NOTE: `!= 0`: Triton's interpreter makes `0-d bool & block bool` an
                # int64 array, which it refuses as a mask
                mask = f"(({mask}) != 0)"
                if not self.axes_of(s.index):
                    # one address under a per-element mask (a one-element part of a
                    # cat): the pointer takes the mask's shape
                    ptr += f" + ({mask}).to(tl.int32) * 0"
            other = scalar_literal(s.other, s.dtype)
            self.line(f"{self.value(s.name)} = tl.load({ptr}, mask={mask}, other={other})")

    def emit_store(self, s: Store) -> None:
        ptr = f"{self.params[s.buffer]} + ({self.index(s.index)})"
        inner = self.is_inner(s)
        want = {"x", "r"} if inner else {"x"}
        if not self.kernel.is_reduction and not self.xdims:
            want = set()
        shape = None
        if not want <= self.axes_of(s.index) and want:
            # Broadcast the pointer to the tile so a tile-shaped value can be stored.
            shape = ("[XBLOCK, RBLOCK]" if inner else "[XBLOCK, 1]" if self.kernel.is_reduction
                     else "[XBLOCK]")
            ptr += f" + tl.full({shape}, 0, tl.int32)"
        mask = self.mask_for(s, s.mask)
        value = self.value(s.value)
        if not want and not self.axes_of(s.index):
            # NOTE: a one-element kernel: Triton's interpreter makes some math results
            # (libdevice.tanh of a scalar) blocks; the pointer takes the value's shape
            ptr += f" + ({value} == {value}).to(tl.int32) * 0"
        if shape is not None and s.mask is not None:
            # NOTE: a mask computed from constants only (the run-time check of a literal
            # divisor 0) is 0-d; Triton's interpreter rejects it, even broadcast, unless
            # it is rebuilt by a comparison in the pointer's shape
            mask = f"((tl.full({shape}, 0, tl.int32) + ({mask}).to(tl.int32)) != 0)"
            value = f"tl.broadcast_to({value}, {shape})"
        masked = "" if mask is None else f", mask={mask}"
        if s.mode == "add":
            # NOTE: scatter indexes may repeat within and across programs
            self.line(f"tl.atomic_add({ptr}, {value}{masked}, sem='relaxed')")
        else:
            self.line(f"tl.store({ptr}, {value}{masked})")

    def masked_arg(self, s: Reduce) -> str:
        arg_dtype = self.dtypes[s.arg]
        arg = self.value(s.arg)
        if s.op not in ("argmax", "argmin") and arg_dtype != s.dtype:
            arg = f"{arg}.to({tl_type(s.dtype)})"
        value_dtype = arg_dtype if s.op in ("argmax", "argmin") else s.dtype
        return f"tl.where(xrmask, {arg}, {reductions.identity(s.op, value_dtype)})"

    def emit_single_element_reduce(self, s: Reduce) -> None:
        """A reduction over no dimensions (a kernel without reduction ranges): of one
        element, it is the element itself (argmax/argmin: position 0)."""
        self.dtypes[s.name] = s.dtype
        arg = self.value(s.arg)
        out = self.value(s.name)
        if s.op == "m2":
            self._lines(welford.single(out, arg, tl_type(s.dtype)))
        elif s.op in ("argmax", "argmin"):
            self.line(f"{out} = ({arg} != {arg}).to(tl.int64) * 0")
        elif s.op in ("any", "all") or s.dtype == torch.bool:
            self.line(f"{out} = {arg} != 0")
        elif self.dtypes[s.arg] != s.dtype:
            self.line(f"{out} = {arg}.to({tl_type(s.dtype)})")
        else:
            self.line(f"{out} = {arg}")

    def emit_persistent_reduce(self, s: Reduce) -> None:
        self.dtypes[s.name] = s.dtype
        helper = reductions.helper_for(s.op, self.dtypes[s.arg])
        if helper:
            self.helpers.add(helper)
        out = self.value(s.name)
        if s.op == "m2":
            self.helpers.add("_ember_add")
            self._lines(welford.persistent(out, self.value(s.arg), "xrmask", tl_type(s.dtype)))
            return
        self.line(f"{out}_tile = {self.masked_arg(s)}")
        if s.op in ("argmax", "argmin"):
            self.line(f"{out}_pos = (rindex + tl.full([XBLOCK, 1], 0, tl.int32)).to(tl.int64)")
            self.line(f"_, {out} = tl.reduce(({out}_tile, {out}_pos), 1, {helper})")
            self.line(f"{out} = {out}[:, None]")
        else:
            self.line(f"{out} = {reductions.row_reduce(s.op, s.dtype, f'{out}_tile')}")

    # --- looped reductions --------------------------------------------------------------

    def emit_looped(self) -> None:
        before, phases = reduction_phases(self.kernel)
        for s in before:
            self.emit(s)
        for phase in phases:
            self.emit_reduction_loop(phase, self.numel_source(reduction=True), "roffset")
            for s in phase.after:
                self.emit(s)

    def emit_reduction_loop(self, phase: Phase, extent: str, offset: str) -> list[Reduce]:
        """One pass over the reduction range: initialise the accumulators of ``phase``,
        loop ``roffset`` over ``[0, extent)`` in RBLOCK steps with the reduction index at
        ``offset``, accumulate, and finish the accumulators. Returns the pass's reductions."""
        reduces = [s for s in phase.inner if isinstance(s, Reduce)]
        for r in reduces:
            self.init_accumulator(r)
        self.line(f"for roffset in range(0, {extent}, RBLOCK):")
        self.indent += 1
        self.reduction_indexes(offset)
        for s in phase.inner:
            if isinstance(s, Reduce):
                self.accumulate(s)
            else:
                self.emit(s)
        self.indent -= 1
        for r in reduces:
            self.finish_accumulator(r)
        return reduces

    def init_accumulator(self, s: Reduce) -> None:
        arg_dtype = self._arg_dtype(s)
        value_dtype = arg_dtype if s.op in ("argmax", "argmin") else s.dtype
        ident = reductions.identity(s.op, value_dtype)
        acc = self.value(s.name) + "_acc"
        if s.op == "m2":
            self._lines(welford.init(acc, tl_type(s.dtype)))
        else:
            self.line(f"{acc} = tl.full([XBLOCK, RBLOCK], {ident}, {tl_type(value_dtype)})")
        if s.op in ("argmax", "argmin"):
            self.line(f"{acc}_pos = tl.full([XBLOCK, RBLOCK], 0, tl.int64)")
        helper = reductions.helper_for(s.op, value_dtype)
        if helper:
            self.helpers.add(helper)

    def _arg_dtype(self, s: Reduce) -> torch.dtype:
        # The argument may be defined later in the phase body: find its statement.
        for t in self.kernel.body:
            if not isinstance(t, Store) and t.name == s.arg:
                return t.dtype
        raise KeyError(s.arg)

    def accumulate(self, s: Reduce) -> None:
        acc = self.value(s.name) + "_acc"
        if s.op == "m2":
            self._lines(welford.update(acc, self.value(s.arg), "xrmask", tl_type(s.dtype)))
            return
        masked = self.masked_arg(s)
        if s.op in ("argmax", "argmin"):
            pos = "(rindex + tl.full([XBLOCK, 1], 0, tl.int32)).to(tl.int64)"
            self.line(f"{acc}, {acc}_pos = _ember_{s.op}({acc}, {acc}_pos, {masked}, {pos})")
        else:
            self.line(f"{acc} = {reductions.accumulate(s.op, s.dtype, acc, masked)}")

    def finish_accumulator(self, s: Reduce) -> None:
        self.dtypes[s.name] = s.dtype
        out = self.value(s.name)
        acc = out + "_acc"
        if s.op == "m2":
            self._lines(welford.finish(out, acc))
        elif s.op in ("argmax", "argmin"):
            self.line(f"_, {out} = tl.reduce(({acc}, {acc}_pos), 1, _ember_{s.op})")
            self.line(f"{out} = {out}[:, None]")
        else:
            self.line(f"{out} = {reductions.row_reduce(s.op, s.dtype, acc)}")

    def module_source(self, functions: list[tuple[str, list[str], list[str], list[str]]]) -> str:
        """The module: header, helpers, then each (name, params, constexprs, lines)."""
        bodies = ["\n".join(lines) for _, _, _, lines in functions]
        text = "\n".join(bodies)
        self.helpers |= {h for h in OP_HELPERS if h + "(" in text}
        all_helpers = {**reductions.HELPERS, **OP_HELPERS}
        source = HEADER + "".join("\n" + all_helpers[h] for h in sorted(self.helpers))
        for (name, params, constexprs, _), body in zip(functions, bodies):
            signature = ", ".join(params + [f"{c}: tl.constexpr" for c in constexprs])
            source += f"\n\n@triton.jit\ndef {name}({signature}):\n{body}\n"
        return source

    # --- the whole kernel ---------------------------------------------------------------

    def param_list(self) -> list[str]:
        """The runtime parameters: a pointer per buffer, then the size arguments."""
        return [self.params[b.name] for b in self.kernel.buffers] + list(self.size_args)

    def signature(self) -> dict[str, str]:
        """Triton types of :meth:`param_list` (size arguments: ``i64``; a host scalar
        passed by value: its type, ``fp32``)."""
        signature = {self.params[b.name]: (pointer_type(b.dtype)[1:] if b.host
                                           else pointer_type(b.dtype))
                     for b in self.kernel.buffers}
        signature.update({name: "i64" for name in self.size_args})
        return signature

    def write(self) -> TritonKernelCode:
        k = self.kernel
        if k.origins:
            self.line(f"# fused: {', '.join(k.origins)}")
        self.prologue()
        parts = combo_parts(k)
        if parts is not None:  # one part a program (combo.py)
            self.line("part = tl.program_id(1)")
            for i, stmts in enumerate(parts):
                self.line(f"if part == {i}:")
                self.indent += 1
                for s in stmts:
                    self.emit(s)
                self.indent -= 1
        elif not k.is_reduction:
            for s in k.body:
                self.emit(s)
        elif self.config.persistent:
            self.reduction_indexes(None)
            for s in k.body:
                self.emit(s)
        else:
            self.emit_looped()
        constexprs = {"XBLOCK": self.config.xblock}
        if k.is_reduction:
            constexprs["RBLOCK"] = self.config.rblock
        fn_name = identifier(k.name)
        source = self.module_source([(fn_name, self.param_list(), list(constexprs),
                                      self.lines)])
        return TritonKernelCode(
            name=fn_name,
            source=source,
            signature=self.signature(),
            constexprs=constexprs,
            grid=(blocks(k.numel, self.config.xblock), 1 if parts is None else len(parts), 1),
            num_warps=self.config.num_warps,
            num_stages=self.config.num_stages,
        )
