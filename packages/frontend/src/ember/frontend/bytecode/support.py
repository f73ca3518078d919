"""Which code objects the interpreter can run at all."""

from __future__ import annotations

import inspect
import types

from ember.frontend.bytecode.opcodes import opnames_of

_GENERATOR_FLAGS = (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
                    | inspect.CO_ITERABLE_COROUTINE)

# Opcodes of generator exception paths, which never run in a non-generator code object.
_EXCEPTION_PATH = {"CLEANUP_THROW", "END_SEND"}

_DELEGATION = {"YIELD_FROM", "GET_AWAITABLE"}  # `yield from` (SEND): interpreter.op_SEND

_FRAME_INTROSPECTION = frozenset({"currentframe", "_getframe"})

_cache: dict[tuple[types.CodeType, type], str | None] = {}


def unsupported_reason(code: types.CodeType, interpreter: type) -> str | None:
    """Why ``code`` cannot be interpreted by ``interpreter`` (the interpreter class, whose
    ``op_<NAME>`` methods are the opcodes it runs): a coroutine, unknown opcodes; or
    None."""
    key = (code, interpreter)
    if key in _cache:
        return _cache[key]
    reason: str | None = None
    names = opnames_of(code)
    if code.co_flags & (_GENERATOR_FLAGS & ~inspect.CO_GENERATOR):
        reason = "coroutines are not interpreted"
    elif code.co_flags & inspect.CO_GENERATOR and names & _DELEGATION:
        reason = "generators that delegate to a coroutine (await) are not interpreted"
    elif _FRAME_INTROSPECTION & set(code.co_names):
        # interpreted, the code would see the interpreter's frames, not its own
        reason = "frame introspection (inspect.currentframe, sys._getframe)"
    else:
        missing = sorted(name for name in opnames_of(code) - _EXCEPTION_PATH
                         if not hasattr(interpreter, "op_" + name))
        if missing:
            reason = f"unsupported bytecode {', '.join(missing)}"
    _cache[key] = reason
    return reason
