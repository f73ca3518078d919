"""Strict capture: symbolic interpretation of CPython 3.11/3.12 bytecode (Dynamo's job).

``ember.frontend.compile(fn, options={"capture": "strict"})`` interprets ``fn``'s
bytecode on fake tensors, inlining user functions and ``nn.Module.forward``, records the
tensor ops at the ATen level, guards what the graph depends on, and splits the function
at code it cannot capture (graph breaks). Modules, by concept:

``opcodes``      decoded instructions and the 3.11/3.12 opcode differences
``frame``        the interpreter's frame and frame state
``interpreter``  one method per opcode (symbolic and concrete modes)
``calls``        what a call does: inline, record, evaluate, or break
``iteration``    iteration over values of known length
``capture``      the capture context: wrapping outside values, guards, side effects
``sources``      where a value came from; ``guards``: checks compiled to one function
``state``        rebuilding Python state after a graph; side-effect replays
``segment``      capturing from a resume point to a return or break
``strict``       the compiled function: cache, recompiles, breaks at run time
``explain``      ``explain(fn)(*args)``: graphs, breaks, guards
``escape``       ``disable``, ``nonstrict``, ``allow_break``
"""

from ember.frontend.bytecode.breaks import BreakInfo, FullGraphError
from ember.frontend.bytecode.escape import allow_break, disable, nonstrict
from ember.frontend.bytecode.explain import ExplainOutput, explain
from ember.frontend.bytecode.strict import StrictFunction

__all__ = ["BreakInfo", "ExplainOutput", "FullGraphError", "StrictFunction", "allow_break",
           "disable", "explain", "nonstrict"]

from ember.frontend.capture_modes import register_capture_mode

register_capture_mode("strict", StrictFunction)
