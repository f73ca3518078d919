"""Strict capture: symbolic interpretation of CPython 3.11/3.12 bytecode (Dynamo's job).

``ember.frontend.compile(fn, options={"capture": "strict"})`` interprets ``fn``'s
bytecode on fake tensors, inlining user functions and ``nn.Module.forward``, records the
tensor ops at the ATen level, guards what the graph depends on, and splits the function
at code it cannot capture (graph breaks). Modules, by concept:

``opcodes``        decoded instructions and the 3.11/3.12 opcode differences
``frame``          the interpreter's frame and frame state
``interpreter``    driving frames; control-flow, call and generator opcodes
``exception_ops``  exceptions and ``with`` blocks: routing to inlined handlers, context managers
``grad_mode``      grad-mode regions inside a graph: no-grad nodes read detached inputs
``inference_blocks`` ``with torch.inference_mode()`` blocks entered for real while capturing
``inference_tensors`` ``t.is_inference()`` of an input: the real tensor's flag, guarded
``data_ops``       loads, stores, operators, subscripts, containers (symbolic and concrete)
``attributes``     attribute reads, writes and deletes (inlined ``__setattr__``, replays)
``match_ops``      ``match`` statements: pattern opcodes as the Python they stand for
``class_ops``      ``class`` statements: the body interpreted in its namespace
``exceptions``     exception tables; which exceptions the program may handle while capturing
``calls``          what a call does: inline, record, evaluate, or break
``recorded_calls`` calls run on fake tensors and recorded (refusing what needs real data)
``code_origin``    whether a callable is standard-library or torch code
``binding``        binding call arguments to parameters, exactly as CPython does
``builtin_rules``  one rule per builtin (len, range, enumerate, getattr, print, ...)
``library_rules``  itertools (materialised or lazy iterators), functools.reduce
``copy_rules``     copy.copy / copy.deepcopy (a tensor of the graph: a recorded clone)
``attention_rules`` ``F.scaled_dot_product_attention``: a strided mask made dense for fused kernels
``env_rules``      os.environ / os.getenv reads as guarded constants
``optimizer_rules`` ``compile(optimizer.step)``: torch.optim inlined, its few rules
``scan_rules``     ``associative_scan``: a log-step scan of the combine function, inlined
``fresh``          objects constructed by the captured code (no guards, rebuilt if escaping)
``iteration``      iteration over values of known length
``generators``     inlined generators, resumed lazily; lazy enumerate/zip/map/filter
``support``        which code objects can be interpreted at all
``capture``        the capture context: wrapping outside values, guards, side effects
``sources``        where a value came from; ``guards``: the strict mode's guards (the one
                   guard model of ``ember.frontend.guard_model``)
``side_effects``   attribute, global and cell writes recorded during capture
``state``          deriving the recipes of the frame state after a graph, and the replays
``recipes``        recipes (how a value is rebuilt at run time) and ``Replay`` entries
``segment``        capturing from a resume point to a return or break
``inlined_breaks`` root calls run for real for a break inside them; the check that
                   captures them again once the break may be gone
``strict``         the compiled function: cache, recompiles, breaks at run time
``strict_cache``   the compiled function's use of the capture cache
``explain``        ``explain(fn)(*args)``: graphs, breaks, guards
``escape``         ``disable``, ``nonstrict``, ``allow_break``

Design of graph breaks (an "equivalent design" to Dynamo's resume functions): a call
runs as a chain of *segments*. A segment is captured from a resume point (the start,
or the instruction after a break) to a return or the next unsupported instruction; at
run time its graph runs, the frame state (stack, locals, cells) is rebuilt from the
graph's outputs, the breaking instruction runs for real in the concrete interpreter,
and the next segment (cached per resume point, behind its own guards) continues. A
break inside an inlined call instead runs the whole call for real, through the
callee's own compiled wrapper.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ember.frontend.bytecode.escape import allow_break, disable, nonstrict
from ember.frontend.bytecode.explain import ExplainOutput, explain
from ember.frontend.bytecode.strict import StrictFunction
from ember.frontend.capture_modes import register_capture_mode

if TYPE_CHECKING:
    from ember.frontend.bytecode.breaks import BreakInfo, FullGraphError

__all__ = ["BreakInfo", "ExplainOutput", "FullGraphError", "StrictFunction", "allow_break",
           "disable", "explain", "nonstrict"]

register_capture_mode("strict", StrictFunction)

# NOTE: imported on first use (PEP 562): a warm start (a call answered by the capture
# cache) never breaks a graph
_LAZY = {"BreakInfo": ".breaks", "FullGraphError": ".breaks"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
