"""BodyBuilder: emits loop-IR statements for one kernel, with CSE and store forwarding.

Lowering rules describe a tensor as a function ``fn(builder, index) -> value name`` (see
:mod:`.values`). When the scheduler builds a kernel it calls those functions with the
kernel's loop variables; the builder names the values, removes duplicates (the same op
on the same arguments is one value), forwards a value stored earlier in the same kernel
to later loads at the same index (so fused intermediates are never re-read), and applies
the current mask to loads (for ``cat`` / ``constant_pad_nd`` / the scatters). A value
computed under a mask is never reused where that mask does not hold.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator

import sympy
import torch
from ember.inductor.loop_ir import (
    BOOL_RESULT_OPS,
    POINTWISE_OPS,
    Compute,
    IndexExpr,
    IndexValue,
    Literal,
    Load,
    Reduce,
    Stmt,
    Store,
    ValueStmt,
    canonical,
    stmt_inputs,
)
from ember.inductor.loop_ir.index import as_index

NARROW_FLOATS = (torch.bfloat16, torch.float16)
#: ops whose float32 result is exactly representable in a narrow float dtype when the
#: operands at these positions are (a literal: when the dtype holds it): rounding it to
#: that dtype, as eager does after each op, changes nothing
EXACT_IN_NARROW: dict[str, tuple[int, ...]] = {
    "neg": (0,), "abs": (0,), "sign": (0,),
    "maximum": (0, 1), "minimum": (0, 1),
    "where": (1, 2),
}


#: whether each op's float16/bfloat16 result is rounded as eager rounds it, also where a
#: fused consumer reads it (the inductor option ``emulate_precision_casts``; off: a fused
#: consumer reads the float32 value and only stored values and explicit casts round,
#: as in torch.compile's kernels: fewer instructions, results as close to float64)
EMULATE_PRECISION_CASTS: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "emulate_precision_casts", default=False)


@contextlib.contextmanager
def precision_casts(emulate: bool) -> Iterator[None]:
    """Kernels built inside round each op's narrow-float result (``emulate``) or not."""
    token = EMULATE_PRECISION_CASTS.set(emulate)
    try:
        yield
    finally:
        EMULATE_PRECISION_CASTS.reset(token)


#: ops whose operands commute exactly (IEEE addition and multiplication, comparisons for
#: equality, bitwise and logical ops): their CSE key takes the operands in sorted order,
#: so that ``add(a, b)`` and ``add(b, a)`` are one value (GELU's forward and its
#: gradient, both computed in one backward kernel, write ``1 + erf`` in both orders)
COMMUTATIVE_OPS = frozenset({
    "add", "mul", "eq", "ne", "logical_and", "logical_or", "logical_xor",
    "bitwise_and", "bitwise_or", "bitwise_xor",
})


def _as_dtype(value: float, dtype: torch.dtype) -> float:
    """``value`` rounded to ``dtype``, the value a literal of that dtype holds: the CSE key
    of a float literal (GELU's ``1/sqrt(2)`` is 0.7071067811865475 in one decomposition and
    0.7071067811865476 in another, one float32 value)."""
    return _rounded(repr(value), dtype)


@functools.cache
def _rounded(text: str, dtype: torch.dtype) -> float:
    # NOTE: keyed by repr, not the float: 0.0 == -0.0 would share one cache entry
    value = float(text)
    return value if dtype == torch.float64 else float(torch.tensor(value, dtype=dtype))


@functools.cache
def _holds_exactly(value: float, dtype: torch.dtype) -> bool:
    """Whether ``dtype`` represents ``value`` exactly (NaN: yes)."""
    return value != value or float(torch.tensor(value, dtype=dtype).float()) == value


class BodyBuilder:
    """Accumulates the statements of one kernel body."""

    def __init__(self, prefix: str = "v") -> None:
        self.stmts: list[Stmt] = []
        self._prefix = prefix
        self._count = 0
        self._cse: dict[tuple[object, ...], str] = {}
        self._dtypes: dict[str, torch.dtype] = {}
        self._stored: dict[tuple[str, IndexExpr], str] = {}
        self._masks: list[str] = []
        #: memo for inlined lazy tensors: (id(fn), index, mask) -> value name
        self.memo: dict[tuple[object, ...], str] = {}
        #: buffers loaded that were not forwarded from a store in this kernel
        self.external_loads: list[tuple[str, IndexExpr]] = []
        #: float32 values exactly representable in a narrower float dtype, the narrow
        #: casts of such values (name -> the float32 value), float literals
        self._exact: dict[str, torch.dtype] = {}
        self._narrowed: dict[str, str] = {}
        self._literals: dict[str, float] = {}
        #: reductions emitted now are over the outer ranges (``Reduce.across``: a column
        #: reduction placed in a row kernel, :mod:`ember.inductor.mixed`)
        self.across = False

    # -- values -----------------------------------------------------------------------
    def _emit(self, key: tuple[object, ...], make: type[ValueStmt], *fields: object,
              dtype: torch.dtype, **kw: object) -> str:
        if key in self._cse:
            return self._cse[key]
        name = f"{self._prefix}{self._count}"
        self._count += 1
        stmt = make(name, *fields, **kw)  # type: ignore[arg-type]
        self.stmts.append(stmt)
        self._dtypes[name] = dtype
        self._cse[key] = name
        return name

    def dtype(self, value: str) -> torch.dtype:
        return self._dtypes[value]

    def load(self, buffer: str, index: IndexExpr, dtype: torch.dtype) -> str:
        """``buffer[index]``, under the current mask; forwarded if stored in this kernel."""
        forwarded = self._stored.get((buffer, canonical(index)))
        if forwarded is not None:
            return forwarded
        self.external_loads.append((buffer, index))
        mask = self._masks[-1] if self._masks else None
        other: bool | int | float = False if dtype == torch.bool else (
            0.0 if dtype.is_floating_point else 0)
        key = ("load", buffer, index, dtype, mask)
        unmasked = self._cse.get(("load", buffer, index, dtype, None))
        if unmasked is not None:
            # NOTE: a value loaded everywhere is valid under any mask; the converse is
            # not true (a masked load is `other` outside its mask), so never share that.
            return unmasked
        return self._emit(key, Load, buffer, index, dtype, mask, other, dtype=dtype)

    def literal(self, value: bool | float | sympy.Expr, dtype: torch.dtype) -> str:
        """``value`` as ``dtype``; a symbolic size (a sympy expression over the size
        symbols: a mean's count) is read at run time from the kernel's size arguments."""
        if isinstance(value, sympy.Basic) and not value.is_Number:
            return self.cast(self.index_value(as_index(value)), dtype)
        if dtype == torch.bool:
            value = bool(value)
        elif dtype.is_floating_point:
            value = float(value)
        else:
            value = int(value)
        # NOTE: repr distinguishes nan (nan != nan would defeat the CSE dict otherwise)
        rounded = _as_dtype(value, dtype) if isinstance(value, float) else value
        key = ("literal", repr(rounded), dtype)
        name = self._emit(key, Literal, value, dtype, dtype=dtype)
        if isinstance(value, float):
            self._literals.setdefault(name, value)  # the value emitted, if CSE'd
        return name

    def index_value(self, index: IndexExpr) -> str:
        return self._emit(("index", index), IndexValue, index, torch.int64, dtype=torch.int64)

    def compute(self, op: str, *args: str, dtype: torch.dtype | None = None) -> str:
        """``op(*args)``; ``dtype`` defaults to bool for comparisons, else the dtype of
        the last argument (the value operand of ``where``).

        Raises:
            ValueError: ``args`` is not the op's arity (``mul`` of three values would
                silently multiply two).
        """
        arity = POINTWISE_OPS.get(op)
        if arity is not None and len(args) != arity:
            raise ValueError(f"loop-IR op {op} takes {arity} operands, got {len(args)}")
        if dtype is None:
            dtype = torch.bool if op in BOOL_RESULT_OPS else self._dtypes[args[-1]]
        key = ("compute", op, tuple(sorted(args)) if op in COMMUTATIVE_OPS else args, dtype)
        name = self._emit(key, Compute, op, tuple(args), dtype, dtype=dtype)
        operands = EXACT_IN_NARROW.get(op)
        if op == "mul" and len(args) == 2 and any(
                self._literals.get(a) in (1.0, -1.0) for a in args):
            operands = (0, 1)  # a sign flip: as exact as neg
        if operands is not None and dtype == torch.float32 and len(args) > max(operands):
            found = {self._exact.get(args[i]) for i in operands
                     if args[i] not in self._literals}
            narrow = found.pop() if len(found) == 1 else None
            if narrow is not None and all(self._exact_literal(args[i], narrow)
                                          for i in operands):
                self._exact[name] = narrow
        return name

    def cast(self, value: str, dtype: torch.dtype, as_stored: bool = False) -> str:
        """``value`` as ``dtype``. A float32 value exactly representable in bfloat16 or
        float16 (:data:`EXACT_IN_NARROW`) rounded to that dtype and back is itself: the
        round trip eager's per-op rounding asks for is left out; so is an op's result's
        (:meth:`op_result`) unless ``as_stored`` (a matmul template's operand: its tiles
        are of the narrow dtype)."""
        source = self._dtypes[value]
        if source == dtype:
            return value
        if dtype == torch.float32 and source in NARROW_FLOATS and not as_stored:
            exact = self._narrowed.get(value)
            if exact is not None:
                return exact
            name = self.compute("cast", value, dtype=dtype)
            self._exact[name] = source
            return name
        name = self.compute("cast", value, dtype=dtype)
        if source == torch.float32 and self._exact.get(value) == dtype:
            self._narrowed[name] = value
        return name

    def op_result(self, value: str, dtype: torch.dtype) -> str:
        """``value``, an op's computed result, as the op's result ``dtype``. A float32
        value of a narrow-float op is rounded to ``dtype`` for stores; unless
        :data:`EMULATE_PRECISION_CASTS`, a fused consumer casting it back reads the
        float32 value (an explicit cast, :meth:`cast`, always rounds)."""
        if (dtype not in NARROW_FLOATS or self._dtypes[value] != torch.float32
                or EMULATE_PRECISION_CASTS.get()):
            return self.cast(value, dtype)
        # NOTE: its own CSE key: an explicit cast of the same value stays a rounding
        name = self._emit(("op_result", value, dtype), Compute, "cast", (value,), dtype,
                          dtype=dtype)
        self._narrowed[name] = value
        return name

    def _exact_literal(self, value: str, narrow: torch.dtype) -> bool:
        """Whether ``value`` is no literal or a literal ``narrow`` holds exactly."""
        literal = self._literals.get(value)
        return literal is None or _holds_exactly(literal, narrow)

    def all_of(self, first: str, *rest: str) -> str:
        """The bool value ``first and rest[0] and ...`` (folded left)."""
        for c in rest:
            first = self.compute("logical_and", first, c)
        return first

    def reduce(self, op: str, value: str, dtype: torch.dtype) -> str:
        key = ("reduce", op, value, dtype, self.across)
        return self._emit(key, Reduce, op, value, dtype, self.across, dtype=dtype)

    def store(self, buffer: str, index: IndexExpr, value: str) -> None:
        self.stmts.append(Store(buffer, index, value))
        self._stored[(buffer, canonical(index))] = value

    def scatter(self, buffer: str, index: IndexExpr, value: str, mask: str | None = None,
                accumulate: bool = False) -> None:
        """``buffer[index] = value`` (``+=`` with ``accumulate``) where ``mask``: a write
        through a computed (indirect) index. Never forwarded to later loads: which
        element it hits is known only at run time."""
        self.stmts.append(Store(buffer, index, value, mask, "add" if accumulate else "store"))

    def stored_value(self, buffer: str, index: IndexExpr) -> str | None:
        return self._stored.get((buffer, canonical(index)))

    def alias_stored(self, buffer: str, index: IndexExpr, same: IndexExpr) -> None:
        """Forward the value stored at ``buffer[index]`` to loads at ``buffer[same]``
        too (``same`` is the same offset in a form the index builder does not simplify
        to ``index``: a reshape's ``(x0 // 20)*720 + (x0 % 20)*36``)."""
        value = self.stored_value(buffer, index)
        if value is not None:
            self._stored[(buffer, canonical(same))] = value

    # -- masks ------------------------------------------------------------------------
    @property
    def current_mask(self) -> str | None:
        """The mask loads are emitted under now (None: unmasked)."""
        return self._masks[-1] if self._masks else None

    @contextlib.contextmanager
    def masked(self, mask: str) -> Iterator[None]:
        """Loads emitted inside happen only where ``mask`` (and any outer mask) holds."""
        if self._masks:
            mask = self.compute("logical_and", self._masks[-1], mask)
        self._masks.append(mask)
        try:
            yield
        finally:
            self._masks.pop()

    # -- finishing --------------------------------------------------------------------
    def finish(self, drop_stores_to: set[str] = frozenset()) -> tuple[Stmt, ...]:  # type: ignore[assignment]
        """The body without stores to ``drop_stores_to`` and without dead values."""
        stmts = [s for s in self.stmts
                 if not (isinstance(s, Store) and s.buffer in drop_stores_to)]
        live: set[str] = set()
        for s in reversed(stmts):
            if isinstance(s, Store) or getattr(s, "name", None) in live:
                live.update(stmt_inputs(s))
        return tuple(s for s in stmts if isinstance(s, Store) or s.name in live)
