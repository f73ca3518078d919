"""Decoded instructions and the per-version opcode facts the interpreter relies on.

Python 3.11 and 3.12 differ in a handful of encodings (both are supported, docs/architecture.md):

==========================  ===============================  ===============================
what                        3.11                             3.12
==========================  ===============================  ===============================
method loads                ``LOAD_METHOD``                  ``LOAD_ATTR`` with ``arg & 1``
calls                       ``PRECALL`` + ``CALL``           ``CALL``
conditional jumps           ``POP_JUMP_FORWARD_IF_*`` /      ``POP_JUMP_IF_*``
                            ``POP_JUMP_BACKWARD_IF_*``
``FOR_ITER`` exhausted      pops the iterator, jumps         pops the iterator, jumps past
                            to the target                    the ``END_FOR`` at the target
slices                      ``BUILD_SLICE`` + subscript      also ``BINARY_SLICE`` /
                                                             ``STORE_SLICE``
comprehensions              a nested code object             inlined, ``LOAD_FAST_AND_CLEAR``
returning a constant        ``LOAD_CONST`` + ``RETURN_VALUE`` ``RETURN_CONST``
unary plus, list->tuple     ``UNARY_POSITIVE``,              ``CALL_INTRINSIC_1``
                            ``LIST_TO_TUPLE``
==========================  ===============================  ===============================

Both versions are decoded through :mod:`dis`, so jump targets and names come resolved in
``argval``; the interpreter normalises opcode names with :func:`normalized_opname`.
"""

from __future__ import annotations

import dis
import operator
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

PY312 = sys.version_info >= (3, 12)


@dataclass(frozen=True)
class Instruction:
    """One decoded instruction: ``opname`` is normalised (see :func:`normalized_opname`),
    ``target`` the index of the jump target instruction (or None)."""

    opname: str
    arg: int | None
    argval: Any
    offset: int
    line: int | None
    target: int | None = None

    @property
    def oparg(self) -> int:
        """``arg`` of an opcode that always has one (``CALL``, ``BUILD_LIST``, ...).

        Raises:
            ValueError: the instruction has no argument (a decoding bug).
        """
        if self.arg is None:
            raise ValueError(f"{self.opname} at offset {self.offset} has no argument")
        return self.arg

    @property
    def jump_target(self) -> int:
        """The index of the instruction a jump goes to.

        Raises:
            ValueError: the instruction is not a jump (a decoding bug).
        """
        if self.target is None:
            raise ValueError(f"{self.opname} at offset {self.offset} has no jump target")
        return self.target


def normalized_opname(name: str) -> str:
    """Fold the 3.11 forward/backward jump variants into the 3.12 names."""
    return name.replace("_FORWARD", "").replace("_BACKWARD_IF", "_IF")


_JUMP_OPS = set(dis.hasjrel) | set(dis.hasjabs)
_DECODED: dict[types.CodeType, list[Instruction]] = {}


def decode(code: types.CodeType) -> list[Instruction]:
    """The instructions of ``code`` (no CACHE entries), memoised per code object."""
    known = _DECODED.get(code)
    if known is not None:
        return known
    raw = list(dis.get_instructions(code))
    index_of = {ins.offset: i for i, ins in enumerate(raw)}
    out: list[Instruction] = []
    line: int | None = code.co_firstlineno
    for ins in raw:
        pos = ins.positions
        if pos is not None and pos.lineno is not None:
            line = pos.lineno
        target = index_of.get(ins.argval) if ins.opcode in _JUMP_OPS else None
        out.append(Instruction(normalized_opname(ins.opname), ins.arg, ins.argval,
                               ins.offset, line, target))
    _DECODED[code] = out
    return out


def index_of_offset(code: types.CodeType, offset: int) -> int:
    """The index in :func:`decode` of the instruction at byte ``offset``."""
    for i, ins in enumerate(decode(code)):
        if ins.offset == offset:
            return i
    raise ValueError(f"no instruction at offset {offset} of {code.co_name}")


def opnames_of(code: types.CodeType) -> set[str]:
    """Normalised opcode names used in ``code``."""
    return {ins.opname for ins in decode(code)}


# BINARY_OP's argument indexes this table (the order of CPython's NB_* constants, the
# same in 3.11 and 3.12); 13.. are the in-place forms of 0..12.
BINARY_OPS: tuple[Callable[[Any, Any], Any], ...] = (
    operator.add, operator.and_, operator.floordiv, operator.lshift, operator.matmul,
    operator.mul, operator.mod, operator.or_, operator.pow, operator.rshift,
    operator.sub, operator.truediv, operator.xor,
    operator.iadd, operator.iand, operator.ifloordiv, operator.ilshift, operator.imatmul,
    operator.imul, operator.imod, operator.ior, operator.ipow, operator.irshift,
    operator.isub, operator.itruediv, operator.ixor,
)

COMPARE_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "<": operator.lt, "<=": operator.le, "==": operator.eq,
    "!=": operator.ne, ">": operator.gt, ">=": operator.ge,
}


def compare_op_name(ins: Instruction) -> str:
    """The comparison (``"<"``) of a COMPARE_OP, in either version's encoding."""
    if isinstance(ins.argval, str):
        return ins.argval
    assert ins.arg is not None
    return dis.cmp_op[ins.arg >> 4 if PY312 else ins.arg]


# CALL_INTRINSIC_1 (3.12) argument values.
INTRINSIC_STOPITERATION_ERROR = 3  # PEP 479, in the handler around a generator's body
INTRINSIC_UNARY_POSITIVE = 5
INTRINSIC_LIST_TO_TUPLE = 6
