"""Which code objects the interpreter can run at all."""

from __future__ import annotations

import inspect
import types

from ember.frontend.bytecode.interpreter import Interpreter
from ember.frontend.bytecode.opcodes import opnames_of

_GENERATOR_FLAGS = (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
                    | inspect.CO_ITERABLE_COROUTINE)

# Opcodes that only run on exception paths (with-block cleanup, try/except): the
# interpreter never takes those paths, so their presence does not block interpretation.
_EXCEPTION_PATH = {"PUSH_EXC_INFO", "POP_EXCEPT", "RERAISE", "WITH_EXCEPT_START",
                   "CHECK_EXC_MATCH", "CLEANUP_THROW", "END_SEND"}

_cache: dict[types.CodeType, str | None] = {}


def unsupported_reason(code: types.CodeType) -> str | None:
    """Why ``code`` cannot be interpreted (generator, unknown opcodes), or None."""
    if code in _cache:
        return _cache[code]
    reason: str | None = None
    if code.co_flags & _GENERATOR_FLAGS:
        reason = "generators and coroutines are not interpreted"
    else:
        missing = sorted(name for name in opnames_of(code) - _EXCEPTION_PATH
                         if not hasattr(Interpreter, "op_" + name))
        if missing:
            reason = f"unsupported bytecode {', '.join(missing)}"
    _cache[code] = reason
    return reason
