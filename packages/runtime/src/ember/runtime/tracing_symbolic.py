"""Symbolic shapes while recording (``GraphRecorder(dynamic=True)``): torch's ShapeEnv,
the two-way map between torch's symbols and IR symbol names, and the translation of
torch's size expressions into the IR's grammar (:mod:`ember.runtime.ir.symbolic`).

* Backed symbols (input sizes) are named ``s0, s1, ...`` in the order inputs are added
  (or keep the names :meth:`RecordedSymbols.meta_fake` is given); data-dependent ones
  ``u0, u1, ...`` in the order they first appear as a plain size of a recorded result
  (``aten::nonzero``: ``i64[u0, 2]``).
* Torch's size functions are translated by :data:`TORCH_FUNCTIONS`, one entry a
  function; an expression with any other function is a :class:`RecordingError` naming it.
* :meth:`RecordedSymbols.finish` applies the ShapeEnv's final replacements to the graph
  (a symbol specialised to 8 becomes 8; two symbols found equal become one), fills
  ``graph.symbols`` (the ranges asked for, hints) and ``graph.guards`` (each ShapeEnv
  guard with the source line current when torch added it, one canonical form per
  relation, none implied by the ranges or the other guards:
  :mod:`ember.runtime.tracing_guards`).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping
from typing import Any

import sympy
import torch
from ember.runtime._torch import (
    DimDynamic,
    FakeTensorMode,
    StatelessSymbolicContext,
    StrictMinMaxConstraint,
    ValueRanges,
    input_source,
    int_oo,
    is_unbacked,
    runtime_asserts,
    statically_true,
    symbol_range,
    sympy_functions,
    track_guards,
)
from ember.runtime.ir import (
    UNBOUNDED_LOWER,
    Argument,
    Graph,
    IRFormatError,
    Meta,
    ScalarMeta,
    ShapeGuard,
    SourceLocation,
    SymbolRange,
    SymExpr,
    SymInt,
    TensorMeta,
    symbolic,
)
from ember.runtime.logs import log
from ember.runtime.tracing_errors import RecordingError
from ember.runtime.tracing_guards import one_form_per_relation
from ember.runtime.tracing_views import strides_derivable, view_fake

__all__ = ["TORCH_FUNCTIONS", "RecordedSymbols"]


def _pow(base: sympy.Expr, exp: sympy.Expr) -> sympy.Expr:
    if not (exp.is_Integer and int(exp) >= 0):
        raise RecordingError(f"size expression {base}**{exp}: only natural powers have an "
                             "IR form")
    return sympy.Pow(base, exp)


F = sympy_functions
TORCH_FUNCTIONS: dict[type, Callable[..., sympy.Basic]] = {
    F.FloorDiv: lambda a, b: sympy.floor(a / b),
    F.CleanDiv: lambda a, b: sympy.floor(a / b),  # exact division
    F.ModularIndexing: lambda x, d, m: sympy.Mod(sympy.floor(x / d), m),  # (x // d) % m
    F.PythonMod: sympy.Mod,
    F.Mod: sympy.Mod,  # C modulo of non-negative sizes: the same
    F.Max: sympy.Max,
    F.Min: sympy.Min,
    sympy.Max: sympy.Max,
    sympy.Min: sympy.Min,
    F.CeilToInt: sympy.ceiling,
    F.FloorToInt: sympy.floor,
    sympy.floor: sympy.floor,
    sympy.ceiling: sympy.ceiling,
    sympy.Mod: sympy.Mod,
    F.IntTrueDiv: lambda a, b: a / b,  # an IR form only inside floor / ceiling
    F.PowByNatural: _pow,
    sympy.Pow: _pow,
    F.Identity: lambda x: x,
}
"""Torch's sympy function -> its meaning in the IR's sympy (floor, Mod, Max, Min)."""

_STRUCTURE = (sympy.Add, sympy.Mul, sympy.Eq, sympy.Ne, sympy.Lt, sympy.Le, sympy.Gt,
              sympy.Ge, sympy.And, sympy.Or, sympy.Not)


class RecordedSymbols:
    """The symbolic side of one recorder: its ShapeEnv, symbol names and ranges.

    Args:
        fake_mode: a FakeTensorMode with a ShapeEnv.
        where: the recorder's current source line, noted with each guard torch adds.
    """

    def __init__(self, fake_mode: FakeTensorMode,
                 where: Callable[[], SourceLocation | None]) -> None:
        if fake_mode.shape_env is None:
            raise RecordingError("a dynamic recorder needs a FakeTensorMode with a ShapeEnv")
        self.fake_mode = fake_mode
        self.shape_env = fake_mode.shape_env
        self._guards = track_guards(self.shape_env, where)
        self._names: dict[sympy.Symbol, str] = {}  # torch symbol -> IR name
        self._torch: dict[str, sympy.Symbol] = {}  # IR name -> torch symbol
        self._symints: dict[str, torch.SymInt] = {}  # IR name -> its SymInt
        self.ranges: dict[str, SymbolRange] = {}  # backed: the range asked for, with hint
        self._texts: dict[sympy.Basic, SymInt] = {}
        # dims of equal size and range share one symbol (duck sizing), also between a
        # dense input and a view (torch's own sharing does not reach view_fake's symbols
        # on every torch: on 2.11 each head of a qkv split got a symbol of its own)
        self._duck: dict[tuple[int, int, int | None], torch.SymInt] = {}

    # ---- inputs -----------------------------------------------------------------------

    def fake_of(self, tensor: torch.Tensor, name: str,
                dynamic_dims: Mapping[int, tuple[int, int | None]]) -> torch.Tensor:
        """A fake of ``tensor`` whose dims in ``dynamic_dims`` are symbols with those
        inclusive ranges (lower clipped to 2; a size 0 or 1 stays static); the other
        dims static.

        Raises:
            RecordingError: for a dim out of bounds or a size outside its range.
        """
        ndim = tensor.dim()
        wanted: dict[int, tuple[int, int | None]] = {}
        for dim, bounds in dynamic_dims.items():
            if not -ndim <= dim < ndim:
                raise RecordingError(f"input {name!r}: dynamic dim {dim} is out of range "
                                     f"for {ndim} dims")
            wanted[dim % ndim] = bounds
        dynamic: list[Any] = []
        constraints: list[Any] = []
        for dim, size in enumerate(tensor.shape):
            asked = wanted.get(dim)
            if asked is None or size < 2:
                dynamic.append(DimDynamic.STATIC)
                constraints.append(None)
                continue
            lower, upper = max(2, asked[0]), asked[1]
            if size < lower or (upper is not None and size > upper):
                raise RecordingError(
                    f"input {name!r} dim {dim}: size {size} is outside its dynamic range "
                    f"{SymbolRange(lower, upper)}")
            wanted[dim] = (lower, upper)
            dynamic.append(DimDynamic.DUCK)
            constraints.append(StrictMinMaxConstraint(
                vr=ValueRanges(lower, int_oo if upper is None else upper), warn_only=False))
        context: Any = StatelessSymbolicContext(dynamic_sizes=dynamic,
                                                constraint_sizes=constraints)
        if not _strides_follow_sizes(tensor):
            # NOTE: a view into a larger tensor (e.g. one head of a fused qkv projection)
            # has strides that are no expression of its own sizes; torch would give them
            # symbols of their own, which the IR's binding rule (symbols bound by sizes)
            # cannot bind. Its strides become expressions of its sizes where they follow
            # them, else ints, and its offset an int (:mod:`.tracing_views`).
            if tensor.numel() == 0:
                return self.static_fake(tensor, name)
            fake = view_fake(self.fake_mode, tensor, name,
                             [d is not DimDynamic.STATIC for d in dynamic], constraints,
                             lambda d: self._duck.get((int(tensor.shape[d]), *wanted[d])))
        else:
            fake = self.fake_mode.from_tensor(tensor, source=input_source(name),
                                              symbolic_context=context)
        for dim, size in enumerate(fake.shape):
            if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol):
                lower, upper = wanted.get(dim, (2, None))
                self._register_backed(size, SymbolRange(lower, upper, int(tensor.shape[dim])))
                self._duck.setdefault((int(tensor.shape[dim]), lower, upper), size)
        if not _strides_follow_sizes(tensor):
            strides = ", ".join(str(self.ir(s, f"input {name!r}")) for s in fake.stride())
            log("dynamic", f"input {name!r} is a view into a larger tensor (strides "
                f"{tuple(tensor.stride())}, offset {tensor.storage_offset()}): its guard "
                f"checks strides ({strides}) and offset {tensor.storage_offset()}")
        return fake

    def static_fake(self, tensor: torch.Tensor, name: str) -> torch.Tensor:
        """A fake of ``tensor`` with every size, stride and offset static."""
        # NOTE: static_shapes, not a context of STATIC sizes: torch would still give
        # the strides of a non-dense view symbols of their own.
        return self.fake_mode.from_tensor(tensor, static_shapes=True,
                                          source=input_source(name))

    def meta_fake(self, meta: TensorMeta, symbols: Mapping[str, SymbolRange]) -> torch.Tensor:
        """A fake tensor whose sizes, strides and offset are ``meta``'s expressions over
        the IR symbols ``symbols`` (made in the ShapeEnv at their hints and ranges, and
        kept under the same names; a symbol without a hint is made unbacked).

        Raises:
            RecordingError: for a symbol missing from ``symbols``.
        """
        values: tuple[SymInt, ...] = (*meta.sizes, *meta.strides, meta.storage_offset)
        for name in sorted(set().union(*(symbolic.free_symbols(v) for v in values))):
            if name not in self._torch:
                if name not in symbols:
                    raise RecordingError(f"input metadata uses symbol {name!r}, which is "
                                         "not among the symbols given")
                self._make_symbol(name, symbols[name])
        sizes = [self._symint_of(v) for v in meta.sizes]
        strides = [self._symint_of(v) for v in meta.strides]
        offset = self._symint_of(meta.storage_offset)
        with self.fake_mode:
            fake = torch.empty_strided(sizes, strides, dtype=meta.dtype, device=meta.device)
            if not (isinstance(offset, int) and offset == 0):
                fake = fake.as_strided(sizes, strides, offset)
            if meta.requires_grad:
                fake.requires_grad_(True)
        return fake

    def _make_symbol(self, name: str, r: SymbolRange) -> None:
        env = self.shape_env
        symint: Any
        if r.hint is None:
            symint = env.create_unbacked_symint()
            env.constrain_symbol_range(symint.node.expr, compiler_min=r.lower,
                                       compiler_max=int_oo if r.upper is None else r.upper)
        else:
            source = input_source(name)
            constraint = StrictMinMaxConstraint(
                vr=ValueRanges(r.lower, int_oo if r.upper is None else r.upper),
                warn_only=False)
            expr = env.create_symbol(r.hint, source=source, dynamic_dim=DimDynamic.DYNAMIC,
                                     constraint_dim=constraint)
            symint = env.create_symintnode(expr, hint=r.hint, source=source)
            self.ranges[name] = r
        self._bind_name(symint.node.expr, name, symint)

    def _symint_of(self, value: SymInt) -> Any:
        """``value`` (IR) as an int or a SymInt over this ShapeEnv's symbols."""
        if isinstance(value, int):
            return value
        return _build(symbolic.parse(value), self._symints)

    def _register_backed(self, size: torch.SymInt, r: SymbolRange) -> None:
        name = self._names.get(size.node.expr)
        if name is None:
            name = self._fresh("s")
            self._bind_name(size.node.expr, name, size)
            self.ranges[name] = r
        else:
            self.ranges[name] = _intersect(self.ranges.get(name, r), r)

    def _bind_name(self, sym: sympy.Symbol, name: str,
                   size: torch.SymInt | None = None) -> None:
        """Name torch's symbol ``sym`` ``name`` in the IR; ``size``: its SymInt, which
        :meth:`symint` builds from."""
        self._names[sym] = name
        self._torch[name] = sym
        if size is not None:
            self._symints[name] = size

    def _fresh(self, prefix: str) -> str:
        i = 0
        while f"{prefix}{i}" in self._torch:
            i += 1
        return f"{prefix}{i}"

    # ---- values -----------------------------------------------------------------------

    def ir(self, value: int | torch.SymInt, what: str) -> SymInt:
        """An int or SymInt as an IR size: an int, or canonical text over IR symbols.

        Raises:
            RecordingError: for a function without an IR form, or a data-dependent
                symbol no recorded result has as a plain size (naming ``what``).
        """
        if isinstance(value, int):
            return value
        expr = value.node.expr
        if isinstance(expr, sympy.Integer):
            return int(expr)
        known = self._texts.get(expr)
        if known is not None:
            return known
        converted = self.to_ir(expr, what)
        try:
            text = symbolic.format(converted)
        except IRFormatError as e:
            raise RecordingError(f"{what}: {e}") from None
        self._texts[expr] = text
        return text

    def symint(self, expr: sympy.Basic) -> Any:
        """An int size expression over torch's symbols as an int or a SymInt built from
        the SymInts of the IR symbols it uses.

        Raises:
            RecordingError: for an unbound symbol or a function without an IR form.
            KeyError: for a symbol whose SymInt this recorder does not hold.
        """
        return _build(self.to_ir(expr, "a float computed from sizes"), self._symints)

    def argument(self, value: torch.SymInt, what: str) -> Argument:
        """A SymInt argument: an int when it is constant, else a :class:`SymExpr`."""
        ir = self.ir(value, what)
        return ir if isinstance(ir, int) else SymExpr(ir)

    def tensor_meta(self, t: torch.Tensor, what: str) -> TensorMeta:
        """The metadata of a fake result; a data-dependent symbol that is a plain size
        here for the first time gets its IR name (``u0``)."""
        for size in t.shape:
            if isinstance(size, torch.SymInt):
                expr = size.node.expr
                if (isinstance(expr, sympy.Symbol) and expr not in self._names
                        and is_unbacked(self.shape_env, expr)):
                    self._bind_name(expr, self._fresh("u"), size)
        return TensorMeta(
            dtype=t.dtype,
            sizes=tuple(self.ir(s, what) for s in t.shape),
            strides=tuple(self.ir(s, what) for s in t.stride()),
            device=t.device,
            storage_offset=self.ir(t.storage_offset(), what),
            requires_grad=bool(t.requires_grad),
        )

    def scalar_meta(self, value: torch.SymInt) -> ScalarMeta:
        """The metadata of an int result (``aten::_local_scalar_dense``, ``.item()``):
        a data-dependent symbol seen here for the first time gets its IR name and the
        result binds it (``int(u0)``)."""
        expr = value.node.expr
        if (isinstance(expr, sympy.Symbol) and expr not in self._names
                and is_unbacked(self.shape_env, expr)):
            name = self._fresh("u")
            self._bind_name(expr, name, value)
            return ScalarMeta("int", name)
        return ScalarMeta("int")

    def to_ir(self, expr: sympy.Basic, what: str) -> sympy.Basic:
        """A torch size expression or relation as IR sympy (IR symbol names, the
        grammar's functions).

        Raises:
            RecordingError: naming an unknown function or an unbound symbol.
        """
        if isinstance(expr, sympy.Symbol):
            name = self._names.get(expr)
            if name is None:
                kind = ("the data-dependent size" if is_unbacked(self.shape_env, expr)
                        else "the size symbol")
                raise RecordingError(
                    f"{what}: {kind} {expr} is not a plain size of any input or recorded "
                    "result, so the IR cannot bind it (e.g. an .item() used as a size)")
            return symbolic.symbol(name)
        if isinstance(expr, (sympy.Number, sympy.logic.boolalg.BooleanAtom)):
            return expr
        args = [self.to_ir(a, what) for a in expr.args]
        if isinstance(expr, _STRUCTURE):
            return expr.func(*args)
        convert = TORCH_FUNCTIONS.get(type(expr))
        if convert is None:
            raise RecordingError(f"{what}: size expression {expr} uses torch's "
                                 f"{type(expr).__name__}, which has no IR form")
        return convert(*args)

    # ---- finishing --------------------------------------------------------------------

    def finish(self, graph: Graph) -> None:
        """Apply the ShapeEnv's replacements to ``graph``'s metas and symbolic
        arguments; fill ``graph.symbols`` and ``graph.guards``."""
        replacements = self._replacements()
        if replacements:
            rewrite = functools.partial(_rewrite, replacements)
            for node in graph.nodes:
                node.meta = _map_meta(node.meta, rewrite)
                node.args = tuple(_map_argument(a, rewrite) for a in node.args)
                node.kwargs = {k: _map_argument(v, rewrite) for k, v in node.kwargs.items()}
        used = _used_symbols(graph)
        ranges = self._final_ranges(used, replacements)
        graph.symbols = {name: ranges[name] for name in sorted(used, key=_symbol_order)}
        graph.guards = self._graph_guards(ranges, replacements)

    def _replacements(self) -> dict[sympy.Symbol, sympy.Basic]:
        result: dict[sympy.Symbol, sympy.Basic] = {}
        for sym, name in self._names.items():
            replaced = self.shape_env.replace(sym)
            if replaced != sym:
                result[symbolic.symbol(name)] = self.to_ir(replaced, f"symbol {name}")
        return result

    def _final_ranges(self, used: set[str],
                      replacements: Mapping[sympy.Symbol, sympy.Basic]) -> dict[str, SymbolRange]:
        ranges = dict(self.ranges)
        for old, new in replacements.items():  # s1 == s0: s0 keeps both ranges
            if isinstance(new, sympy.Symbol) and old.name in ranges and new.name in ranges:
                ranges[new.name] = _intersect(ranges[new.name], ranges[old.name])
        for name in used:
            if name not in ranges:  # data-dependent: the range torch knows now (a size
                # is >= 0; k.item() used as a number may be negative)
                lower, upper = symbol_range(self.shape_env, self._torch[name])
                if upper is not None and upper >= sys.maxsize - 1:  # torch's "no bound"
                    upper = None
                if lower is None or lower <= -sys.maxsize:
                    lower = UNBOUNDED_LOWER
                ranges[name] = SymbolRange(lower, upper)
        return ranges

    def _graph_guards(self, ranges: Mapping[str, SymbolRange],
                      replacements: Mapping[sympy.Symbol, sympy.Basic]) -> list[ShapeGuard]:
        torch_ranges = {self._torch[n]: (r.lower, r.upper) for n, r in ranges.items()
                        if n in self._torch}
        relations: list[tuple[sympy.Basic, SourceLocation | None]] = []
        for expr, source in self._guards():
            replaced = self.shape_env.replace(expr)
            if replaced is sympy.true or statically_true(self.shape_env, replaced, torch_ranges):
                continue
            assert source is None or isinstance(source, SourceLocation)
            relations.append((self.to_ir(replaced, f"guard {expr}"), source))
        for expr in runtime_asserts(self.shape_env):
            replaced = self.shape_env.replace(expr)
            if not replaced.free_symbols <= self._names.keys():
                continue  # on a value the graph never uses as a size: nothing to check
            if replaced is not sympy.true and not statically_true(self.shape_env, replaced,
                                                                  torch_ranges):
                relations.append((self.to_ir(replaced, f"runtime assert {expr}"), None))
        for old, new in replacements.items():  # an eliminated symbol's range still holds
            r = self.ranges.get(old.name)
            if r is not None and not isinstance(new, (sympy.Symbol, sympy.Integer)):
                relations.append((sympy.Ge(new, r.lower), None))
                if r.upper is not None:
                    relations.append((sympy.Le(new, r.upper), None))
        return one_form_per_relation(relations, ranges)


# ---- helpers ------------------------------------------------------------------------------


def _intersect(a: SymbolRange, b: SymbolRange) -> SymbolRange:
    uppers = [u for u in (a.upper, b.upper) if u is not None]
    return SymbolRange(max(a.lower, b.lower), min(uppers) if uppers else None,
                       a.hint if a.hint is not None else b.hint)


def _symbol_order(name: str) -> tuple[str, int]:
    return name[0], int(name[1:]) if name[1:].isdigit() else -1


def _build(e: sympy.Basic, env: Mapping[str, Any]) -> Any:
    """The value of IR sympy ``e`` computed with SymInt arithmetic over ``env``."""
    if isinstance(e, sympy.Integer):
        return int(e)
    if isinstance(e, sympy.Symbol):
        return env[e.name]
    if isinstance(e, (sympy.floor, sympy.ceiling)):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        if isinstance(e, sympy.floor):
            return _build(num, env) // _build(den, env)
        return -(_build(-num, env) // _build(den, env))
    args = [_build(a, env) for a in e.args]
    if isinstance(e, sympy.Add):
        return functools.reduce(lambda a, b: a + b, args)
    if isinstance(e, sympy.Mul):
        return functools.reduce(lambda a, b: a * b, args)
    if isinstance(e, sympy.Pow):
        return functools.reduce(lambda a, b: a * b, [args[0]] * int(e.args[1]), 1)
    if isinstance(e, sympy.Mod):
        return args[0] % args[1]
    if isinstance(e, (sympy.Max, sympy.Min)):
        pick = torch.sym_max if isinstance(e, sympy.Max) else torch.sym_min
        return functools.reduce(pick, args)
    raise RecordingError(f"size expression {e} has no SymInt form")


def _rewrite(replacements: Mapping[sympy.Symbol, sympy.Basic], value: SymInt) -> SymInt:
    if isinstance(value, int):
        return value
    expr = symbolic.parse(value)
    if not expr.free_symbols & replacements.keys():
        return value
    return symbolic.format(expr.xreplace(replacements))


def _map_meta(meta: Meta, f: Callable[[SymInt], SymInt]) -> Meta:
    if isinstance(meta, tuple):
        return tuple(_map_meta(m, f) for m in meta)  # type: ignore[misc]
    if not isinstance(meta, TensorMeta):
        return meta
    return TensorMeta(meta.dtype, tuple(f(s) for s in meta.sizes),
                      tuple(f(s) for s in meta.strides), meta.device,
                      f(meta.storage_offset), meta.requires_grad)


def _map_argument(a: Argument, f: Callable[[SymInt], SymInt]) -> Argument:
    if isinstance(a, SymExpr):
        value = f(a.expr)
        return value if isinstance(value, int) else SymExpr(value)
    if isinstance(a, tuple):
        return tuple(_map_argument(x, f) for x in a)
    return a


def _used_symbols(graph: Graph) -> set[str]:
    used: set[str] = set()

    def note(value: SymInt) -> SymInt:
        used.update(symbolic.free_symbols(value))
        return value

    for node in graph.nodes:
        _map_meta(node.meta, note)
        for m in node.meta if isinstance(node.meta, tuple) else (node.meta,):
            if isinstance(m, ScalarMeta) and m.symbol is not None:  # int(u0) binds it
                used.add(m.symbol)
        for a in (*node.args, *node.kwargs.values()):
            _map_argument(a, note)
    return used


def _strides_follow_sizes(tensor: torch.Tensor) -> bool:
    """Whether ``tensor``'s fake can come from torch's own ``from_tensor``: it starts at
    its storage's start, is dense in some dim order (each stride the product of the
    sizes inside it; dims of size 1 aside) and torch derives every stride from the
    sizes, those of size-1 dims included (:func:`~.tracing_views.strides_derivable`).

    NOTE: a size-1 dim's stride never moves an address, but it is no free choice: torch
    gives one it cannot derive (``(8, 100, 1)`` for ``[s0, 1, 8]``) a symbol of its own,
    which the IR cannot bind, and eager reads it when it infers a memory format (a
    ``[N, 1, H, W]`` input with stride 1 in dim 1 is channels-last to a convolution,
    which then returns a channels-last result). Such an input is made by
    :func:`~.tracing_views.view_fake`, which keeps the example's int."""
    if tensor.storage_offset() != 0:
        return False
    dims = sorted((st, size) for size, st in zip(tensor.shape, tensor.stride()) if size != 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return strides_derivable(tensor)
