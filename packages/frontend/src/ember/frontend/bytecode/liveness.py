"""Which locals are live (may be read before being written) at each instruction.

A segment starts from a frame state; locals that are dead there are dropped instead of
becoming graph inputs with guards (a loop counter that is never read again must not
cause recompiles). Classic backward dataflow over the instructions, with jumps, loop
exits and exception handlers as successors.
"""

from __future__ import annotations

import types

from ember.frontend.bytecode.exceptions import exception_table
from ember.frontend.bytecode.opcodes import PY312, decode, index_of_offset

_USES = {"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "DELETE_FAST", "MAKE_CELL",
         "LOAD_FAST_LOAD_FAST"}
_DEFS = {"STORE_FAST", "DELETE_FAST"}
_NO_FALLTHROUGH = {"JUMP", "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT",
                   "JUMP_ABSOLUTE", "RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS",
                   "RERAISE"}

_CACHE: dict[types.CodeType, list[frozenset[str]]] = {}
_FRAME_READERS = frozenset({"locals", "vars", "dir"})


def live_locals(code: types.CodeType) -> list[frozenset[str]]:
    """``result[i]``: the local names live on entry to instruction ``i``."""
    known = _CACHE.get(code)
    if known is not None:
        return known
    instrs = decode(code)
    n = len(instrs)
    succs: list[list[int]] = [[] for _ in range(n)]
    for i, ins in enumerate(instrs):
        if ins.opname not in _NO_FALLTHROUGH and i + 1 < n:
            succs[i].append(i + 1)
        if ins.target is not None:
            succs[i].append(ins.target)
            if ins.opname == "FOR_ITER" and PY312 and ins.target + 1 < n:
                succs[i].append(ins.target + 1)
    for entry in exception_table(code):
        handler = index_of_offset(code, entry.target)
        for i, ins in enumerate(instrs):
            if entry.start <= ins.offset < entry.end:
                succs[i].append(handler)
    always = set()
    if "__class__" in code.co_freevars and code.co_varnames:
        always.add(code.co_varnames[0])  # zero-argument super() reads the first argument
    if any(ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and ins.argval in _FRAME_READERS
           for ins in instrs):
        always.update(code.co_varnames)  # locals() / vars() / dir() read every local
    live: list[set[str]] = [set(always) for _ in range(n)]
    changed = True
    while changed:
        changed = False
        for i in range(n - 1, -1, -1):
            ins = instrs[i]
            out: set[str] = set()
            for j in succs[i]:
                out |= live[j]
            name = ins.argval if isinstance(ins.argval, str) else None
            if ins.opname in _DEFS and name is not None:
                out.discard(name)
            if ins.opname in _USES and name is not None:
                out.add(name)
            out |= always
            if out != live[i]:
                live[i] = out
                changed = True
    result = [frozenset(s) for s in live]
    _CACHE[code] = result
    return result
