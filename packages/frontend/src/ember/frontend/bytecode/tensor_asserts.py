"""``assert`` statements whose condition is a tensor's value, or a data-dependent
(unbacked) symbolic bool, become checks inside the graph instead of graph breaks.

CPython 3.11/3.12 compile ``assert cond, msg`` to a conditional jump on ``cond`` whose
failing side starts with ``LOAD_ASSERTION_ERROR`` (then the message, a call, and
``RAISE_VARARGS``); ``assert a and b`` jumps there from both conditions. Branching on a
tensor's value is otherwise a graph break ("data-dependent branch"). When the jump's
failing side is such an assert failure, :func:`record_assert` records the check and the
interpreter goes on along the passing side:

* a one-element tensor: an ``aten::_assert_async.msg`` node on it (the runtime treats it
  as a side effect: no DCE or CSE removes it; aot keeps it in the forward graph, inductor
  runs it as a fallback kernel). A false condition raises ``RuntimeError`` with the
  message when the graph runs (CPU: at once; CUDA: a device-side assert, reported at the
  next synchronisation and fatal to the CUDA context, as ``torch._assert_async`` is);
* an unbacked ``SymBool`` (an ``.item()`` compared in a symbolic capture; a ``SymInt``/
  ``SymFloat`` is tested ``!= 0``): ``torch._check``, a runtime assertion of the shape
  environment that the runtime checks when the graph runs (``ShapeError`` naming the
  relation or range and the values, to which the segment adds the assert's message and
  line: :mod:`.assert_messages`) and that later code may rely on.

The message is the assert's own when it is a constant string, otherwise (no message, or
one computed at run time, which is never evaluated) "assertion failed at file:line:
source". An ``except AssertionError`` around such an assert no longer sees a failure
(the graph raises ``RuntimeError``), as under ``torch.compile``. Anything else (a tensor
of several elements, a symbolic number of elements, a backed symbolic bool, which is
guarded as usual) keeps today's handling.
"""

from __future__ import annotations

from typing import Any

import torch
from ember.frontend._torch import (
    assert_async,
    check_symbolic,
    has_unbacked_symbols,
    is_fake,
    quiet_fake_tensor_errors,
)
from ember.frontend.bytecode.assert_messages import note_symbolic_assert
from ember.frontend.bytecode.frame import Frame, location_of
from ember.frontend.bytecode.grad_mode import program_call
from ember.frontend.bytecode.opcodes import Instruction

__all__ = ["assert_message", "record_assert"]

_CALLS = frozenset({"PRECALL", "CALL"})


def assert_message(f: Frame, failing: int, line: int | None) -> str | None:
    """The message of the assert whose failure path starts at instruction ``failing``
    of ``f``, or None when that is no assert failure path (``LOAD_ASSERTION_ERROR``)."""
    code = f.instructions
    if failing >= len(code) or code[failing].opname != "LOAD_ASSERTION_ERROR":
        return None
    message = _constant_message(f, failing)
    if message is not None:
        return message
    where = location_of(f, line)
    return f"assertion failed at {where.file}:{where.line}: {where.text}"


def _constant_message(f: Frame, failing: int) -> str | None:
    """The assert's own message when it is a constant string (else None)."""
    code = f.instructions
    rest = [ins.opname for ins in code[failing + 1:failing + 5]]
    message = code[failing + 1].argval if failing + 1 < len(code) else None
    if (rest and rest[0] == "LOAD_CONST" and isinstance(message, str)
            and _raises_after_call(rest[1:])):
        return message
    return None


def _raises_after_call(names: list[str]) -> bool:
    i = 0
    while i < len(names) and names[i] in _CALLS:
        i += 1
    return 0 < i < len(names) and names[i] == "RAISE_VARARGS"


def record_assert(interp: Any, f: Frame, ins: Instruction, jump_if: bool) -> bool:
    """At ``POP_JUMP_IF_TRUE`` (``jump_if``) or ``POP_JUMP_IF_FALSE`` on the stack's top:
    when that value is a tensor or an unbacked symbolic value and the failing side is an
    assert's failure path, record the check, pop the value, take the passing side and
    return True. Otherwise change nothing and return False (the caller branches as
    usual, which breaks on a tensor)."""
    cond = f.stack[-1]
    tensor = is_fake(cond)
    if not tensor and not (isinstance(cond, (torch.SymBool, torch.SymInt, torch.SymFloat))
                           and has_unbacked_symbols(cond)):
        return False
    failing = f.ip if jump_if else ins.jump_target  # (ip is past the jump already)
    message = assert_message(f, failing, ins.line)
    if message is None:
        return False
    try:
        with program_call(), quiet_fake_tensor_errors():
            if tensor:
                numel = cond.numel()
                if cond.dim() != 0 and not (isinstance(numel, int) and numel == 1):
                    return False  # bool() of it fails eagerly, or depends on the sizes
                assert_async(cond, message)
            else:
                relation = cond if isinstance(cond, torch.SymBool) else cond != 0
                check_symbolic(relation, message)
                # (its failure is a ShapeError of the runtime: .assert_messages)
                note_symbolic_assert(interp, relation, _constant_message(f, failing),
                                     location_of(f, ins.line))
    except Exception:  # noqa: BLE001 - not recordable: the caller's branch breaks
        return False
    f.pop()
    if jump_if:
        f.ip = ins.jump_target
    return True
