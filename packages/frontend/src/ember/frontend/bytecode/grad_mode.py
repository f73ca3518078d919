"""Grad-mode regions inside one captured graph.

Captured code may switch grad mode (``with torch.no_grad():``, ``torch.enable_grad()``,
``torch.set_grad_enabled(b)`` with or without ``with``, ``@torch.no_grad()`` on a
function, ``torch.inference_mode()``, also entered for real: :mod:`.inference_blocks`)
without a graph break. The switch happens for real while capturing, so torch's autograd
treats the fake tensors as eager treats the real ones, and the recorded metadata
(``requires_grad``) says which values have autograd history. Three pieces make the
graph compute eager's gradients:

* :class:`GradModeTracker`, a dispatch mode under the recorder, notes which recorded
  nodes ran with grad mode off, and turns an in-place write, with grad mode off, into
  a tensor that requires grad (``p.mul_(...)`` on a parameter inside ``no_grad``: an
  optimizer-style update) into a graph break when an earlier op ran with grad mode on:
  later reads of the tensor would differentiate through the write (or lose the
  tensor's gradient), where eager keeps it a leaf. A graph that runs without grad
  (the whole call under ``no_grad``) keeps such writes: aot writes them back as eager.
* :func:`detach_no_grad_inputs` makes the regions explicit in the graph: a node that
  ran with grad mode off reads each input that requires grad (and was made outside
  the region) through ``aten::detach``. Any backend then stops gradients where eager
  does: the reference interpreter run under autograd, and aot's joint graph.
* The graph runs (and is compiled) under :func:`graph_grad_mode`: the grad mode at the
  segment's start, or grad mode on when a value made inside ``enable_grad`` under an
  outer ``no_grad`` requires grad. After the graph, the segment sets the grad mode the
  code left (``Segment.grad_at_end``).

Torch's own C++ may turn grad mode on around one op of a call made with grad mode off
(autocast's weight-cast cache makes its casts of parameters with grad mode on, also
under ``no_grad``). :func:`program_call` marks each call the capture runs for real: an
op that ran with grad mode on inside a call entered with grad mode off, which leaves it
off, is part of the call's no-grad region, not a grad-mode change of the program.

Limit: a view made under ``no_grad`` of a tensor that requires grad is, eagerly, a leaf
that requires grad; in the graph it is a view of the detached tensor (no grad).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

import torch
from ember.frontend._torch import TorchDispatchMode
from ember.frontend.bytecode.breaks import GraphBreak
from ember.runtime.ir import Graph, Node, TensorMeta, ValueRef, qualified_name
from ember.runtime.ir.op_queries import operator_schema, writes_arguments
from ember.runtime.tracing import GraphRecorder

__all__ = ["CALL_TURNED_GRAD_ON", "GRAD_MODE_BLOCKS", "GradModeRestore", "GradModeTracker", "ProgramCall",
           "block_modes", "detach_no_grad_inputs", "graph_grad_mode", "program_call"]

DETACH = "aten::detach.default"


class GradModeRestore:
    """Stands for ``cm.__exit__`` of a grad-mode context manager on the stack: calling it
    restores the grad mode seen at ``__enter__``. Immutable, so a graph break inside a
    ``with torch.no_grad():`` block can rebuild it."""

    def __init__(self, previous: bool) -> None:
        self.previous = previous

    def __call__(self, *exc: Any) -> bool:
        torch.set_grad_enabled(self.previous)
        return False


# ---- the context managers a `with` captures ------------------------------------------


def _inference_block(cm: Any) -> tuple[bool, bool] | None:
    # NOTE: a no-grad region that is also entered for real while capturing, so that
    # the fakes made in it are inference tensors (.inference_blocks)
    if not cm.mode:
        return None if torch.is_inference_mode_enabled() else (torch.is_grad_enabled(),
                                                               torch.is_grad_enabled())
    return False, torch.is_grad_enabled()


GRAD_MODE_BLOCKS: dict[type, Callable[[Any], tuple[bool, bool] | None]] = {
    torch.no_grad: lambda cm: (False, torch.is_grad_enabled()),
    torch.enable_grad: lambda cm: (True, torch.is_grad_enabled()),
    # the mode is set when the object is made; __exit__ restores the mode seen then
    torch.set_grad_enabled: lambda cm: (bool(cm.mode), bool(cm.prev)),
    torch.inference_mode: _inference_block,
}
"""Context-manager type -> ``cm`` -> ``(grad mode inside the block, grad mode restored at
its end)``, or None when the block cannot be captured (``inference_mode(False)`` inside
inference mode: the block then runs eagerly)."""


def block_modes(cm: Any) -> tuple[bool, bool] | None:
    """:data:`GRAD_MODE_BLOCKS`' answer for ``cm``; None for other context managers or a
    block that cannot be captured."""
    for cls, rule in GRAD_MODE_BLOCKS.items():
        if isinstance(cm, cls):
            return rule(cm)
    return None


# ---- while capturing ------------------------------------------------------------------


class ProgramCall:
    """One call the capture runs for real (a torch function, a tensor method, an
    operator): the grad mode it was entered with, and how many of its ops ran with grad
    mode on although it was entered with grad mode off."""

    def __init__(self, grad: bool) -> None:
        self.grad = grad
        self.internal_grad_ops = 0

    def turned_grad_on(self) -> bool:
        """Whether the call ran ops with grad mode on and left it on: the program's grad
        mode changed inside it, after ops the tracker counted as run without grad."""
        return self.internal_grad_ops > 0 and torch.is_grad_enabled()


_CALL: ContextVar[ProgramCall | None] = ContextVar("ember_program_call", default=None)


@contextlib.contextmanager
def program_call() -> Iterator[ProgramCall]:
    """Mark a call the capture runs for real (the outermost one counts): ops inside it
    that run with grad mode on while it was entered with grad mode off (torch's own
    switch around one op) count as run without grad. The caller checks
    :meth:`ProgramCall.turned_grad_on` after a call that returned."""
    outer = _CALL.get()
    call = ProgramCall(torch.is_grad_enabled()) if outer is None else outer
    token = _CALL.set(call)
    try:
        yield call
    finally:
        _CALL.reset(token)


CALL_TURNED_GRAD_ON = ("a call turned grad mode on and ran ops with it (counted as run "
                       "without grad, as torch's own switches around one op are)")


class GradSpans(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """A dispatch mode under a recorder that notes where grad mode changed between the
    recorded nodes (:meth:`note`) and says which nodes ran with it off
    (:meth:`no_grad_nodes`): the strict capture's :class:`GradModeTracker` and the
    tracing capture's ``trace_grad.GradRegions``."""

    def __init__(self, recorder: GraphRecorder) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.recorder = recorder
        self._enabled = torch.is_grad_enabled()
        # (number of nodes recorded before the change, grad mode from there on)
        self._changes: list[tuple[int, bool]] = [(0, self._enabled)]

    def note(self, enabled: bool) -> None:
        """The next recorded node runs with grad mode ``enabled``."""
        if enabled != self._enabled:
            self._enabled = enabled
            self._changes.append((self._recorded(), enabled))

    def _recorded(self) -> int:
        # NOTE: the recorder appends each node after its op ran; only placeholders are
        # inserted elsewhere (in front), so recorded nodes keep their order.
        return len(self.recorder.graph.nodes) - len(self.recorder.input_specs)

    def no_grad_nodes(self) -> set[str]:
        """Names of the nodes recorded so far while grad mode was off."""
        recorded = [n.name for n in self.recorder.graph.nodes if n.op != "placeholder"]
        names: set[str] = set()
        bounds = [*self._changes, (len(recorded), self._enabled)]
        for (start, enabled), (end, _) in itertools.pairwise(bounds):
            if not enabled:
                names.update(recorded[start:end])
        return names


class GradModeTracker(GradSpans):
    """Sees every op the recorder runs (entered before the recorder, so it sits under
    it): notes where grad mode changed, and refuses in-place writes to tensors that
    require grad while grad mode is off (see the module docstring)."""

    def __init__(self, recorder: GraphRecorder) -> None:
        super().__init__(recorder)
        # an op ran with grad mode on (not just the mode at the start: a call that turns
        # grad off before its first op, as optimizer.step does, has no autograd to keep)
        self._grad_seen = False
        self._wrote_grad_tensor = False  # a write the rule allowed: no grad seen yet

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        enabled = torch.is_grad_enabled()
        call = _CALL.get()
        if enabled and call is not None and not call.grad:
            # torch's own switch inside a call made with grad mode off (autocast's cast
            # cache): the op belongs to the call's no-grad region
            call.internal_grad_ops += 1
            enabled = False
        self.note(enabled)
        if not enabled and _writes_grad_tensor(func, args, kwargs):
            if self._grad_seen:
                raise GraphBreak(
                    f"in-place {qualified_name(func)} with grad mode off "
                    "(torch.no_grad()) writes a tensor that requires grad, in a graph "
                    "that runs with grad mode on: an optimizer-style update of a "
                    "parameter or of a value with autograd history", _WRITE_HINT)
            self._wrote_grad_tensor = True
        result = func(*args, **kwargs)
        # NOTE: never raised from a metadata query (prim::device, sym_size: no tensor
        # result), which C++ may ask where an exception cannot pass
        if enabled and _has_tensor(result) and not self.recorder.converting:
            # NOTE: metadata queries (prim::device while a tensor is made fake) do not
            # count: they compute nothing autograd could record; nor do the ops that
            # give the fake of an input with autograd history (a loss kept across
            # backward()) its grad_fn
            if self._wrote_grad_tensor:
                raise GraphBreak(
                    "grad mode turned on after an in-place write, with grad mode off, "
                    "into a tensor that requires grad", _WRITE_HINT)
            self._grad_seen = True
        return result

    def __enter__(self) -> GradModeTracker:
        # a capture started inside a call another capture runs for real has its own calls
        self._call_token = _CALL.set(None)
        return super().__enter__()  # type: ignore[no-untyped-call,no-any-return]

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)  # type: ignore[no-untyped-call]
        finally:
            _CALL.reset(self._call_token)

    @property
    def grad_seen(self) -> bool:
        """Whether some op of the capture ran with grad mode on."""
        return self._grad_seen

_WRITTEN: dict[Any, tuple[tuple[int, str], ...]] = {}


def _written_positions(func: Any) -> tuple[tuple[int, str], ...]:
    """``(position, name)`` of each argument ``func`` writes (schema ``Tensor(a!)``)."""
    known = _WRITTEN.get(func)
    if known is None:
        target = qualified_name(func)
        known = ()
        if writes_arguments(target):
            known = tuple((i, a.name) for i, a in enumerate(operator_schema(target).arguments)
                          if a.alias_info is not None and a.alias_info.is_write)
        _WRITTEN[func] = known
    return known


_WRITE_HINT = ("the write runs eagerly between two graphs; grad-mode regions without "
               "such writes stay in one graph")


def _has_tensor(result: Any) -> bool:
    if isinstance(result, (tuple, list)):
        return any(isinstance(r, torch.Tensor) for r in result)
    return isinstance(result, torch.Tensor)


def _writes_grad_tensor(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    for position, name in _written_positions(func):
        value = kwargs.get(name, args[position] if position < len(args) else None)
        if isinstance(value, torch.Tensor) and value.requires_grad:
            return True
    return False


# ---- after capturing ------------------------------------------------------------------


def _meta_at(node: Node, index: int | None) -> Any:
    meta = node.meta
    if isinstance(meta, tuple):
        return meta[index or 0]
    return meta


def graph_grad_mode(graph: Graph, grad_at_start: bool, no_grad: set[str],
                    grad_seen: bool = True) -> bool:
    """The grad mode to compile and run ``graph`` under: the mode at the segment's
    start, or on when a node run with grad mode on (in an ``enable_grad`` block entered
    under ``no_grad``; the others are in ``no_grad``) made a value that requires grad.
    (A view made with grad mode off of a tensor that requires grad requires grad too.)
    A segment that starts with grad mode on but ran no op with it on (``grad_seen``
    false: ``optimizer.step`` turns grad off first) runs without grad, so its in-place
    updates of parameters are written back as eager's."""
    if grad_at_start and grad_seen:
        return True
    for node in graph.calls():
        if node.name in no_grad:
            continue
        metas = node.meta if isinstance(node.meta, tuple) else (node.meta,)
        if any(isinstance(m, TensorMeta) and m.requires_grad for m in metas):
            return True
    return False


def _custom_op_with_grad(node: Node) -> bool:
    """A custom operator whose result requires grad ran with grad mode on where the user
    called it: its autograd wrapper (``register_autograd``) turns grad mode off only
    around the op itself."""
    if node.target.partition("::")[0] in ("aten", "prims"):
        return False
    metas = node.meta if isinstance(node.meta, tuple) else (node.meta,)
    return any(isinstance(m, TensorMeta) and m.requires_grad for m in metas)


def detach_no_grad_inputs(graph: Graph, no_grad: set[str]) -> int:
    """Make each node of ``no_grad`` read its inputs that require grad, made outside the
    region (placeholders, nodes run with grad mode on), through a new ``aten::detach``
    node placed before its first such reader; return how many were added.

    Values made inside the region have no autograd history once its inputs have none,
    so they are not detached again.
    """
    producers = {n.name: n for n in graph.nodes}
    detached: dict[ValueRef, ValueRef] = {}
    taken = set(producers)
    nodes: list[Node] = []
    for node in graph.nodes:
        if node.op == "call" and node.name in no_grad and not _custom_op_with_grad(node):
            mapping: dict[ValueRef, Any] = {}
            for ref in node.inputs():
                if ref in detached:
                    mapping[ref] = detached[ref]
                    continue
                producer = producers.get(ref.node)
                if producer is None or producer.op == "constant" or producer.name in no_grad:
                    continue
                meta = _meta_at(producer, ref.index)
                if not (isinstance(meta, TensorMeta) and meta.requires_grad):
                    continue
                name = _fresh(f"{ref.node}_detached", taken)
                nodes.append(Node(name, "call", DETACH, args=(ref,),
                                  meta=dataclasses.replace(meta, requires_grad=False),
                                  source=node.source))
                detached[ref] = mapping[ref] = ValueRef(name)
            if mapping:
                node.replace_refs(mapping)
        nodes.append(node)
    graph.nodes = nodes
    return len(detached)


def _fresh(base: str, taken: set[str]) -> str:
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name
