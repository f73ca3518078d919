"""A custom ``torch.autograd.Function`` applied with gradients flowing, captured as one
operator whose backward is the Function's own (strict capture).

Ember records ATen ops below autograd, so the Function's forward ops alone would be
differentiated by the aot stage instead of running the user's ``backward``. Instead
``MyFunction.apply(*args)`` becomes a call of an operator Ember registers with
``torch.library`` (namespace :data:`NAMESPACE`) for that Function and call structure:

- its kernel runs ``MyFunction.forward`` (under ``no_grad``, as ``apply`` runs it) and
  returns the outputs, then the tensors the forward saved for backward that are neither
  inputs nor outputs (extra outputs, so that nothing is computed twice);
- its fake kernel does the same on fake tensors (the capture's shapes);
- its autograd formula (``torch.library.register_autograd``) calls
  ``MyFunction.backward`` with a context holding the same saved tensors, the
  attributes the forward set, and ``needs_input_grad``, and hands the gradients of the
  tensor arguments back. The aot stage traces that backward into the joint graph; the
  interpreter runs it under autograd.

What the capture probes first (the forward run once on the fake arguments, outside the
graph), and when it keeps the graph break instead (``FunctionNotCaptured``, the reason
in the break): arguments that are not tensors or plain constants, outputs that are not
a tensor or a tuple of tensors, an output that is an argument or a view of one,
``mark_dirty``/``mark_non_differentiable``/``set_materialize_grads(False)``, an input
written in place, context attributes other than plain constants or tensors, symbolic
sizes among them. Operator names carry a digest of the Function's code and the call's
structure, so one name always means one Function; a program that calls one is not
stored in the capture cache (the operator exists only once a capture registered it).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["NAMESPACE", "FunctionNotCaptured", "FunctionOp", "function_op"]

NAMESPACE = "ember_function"
_CONSTANTS = (type(None), bool, int, float, str, torch.dtype, torch.device)
_LIBRARY: torch.library.Library | None = None
_OPS: dict[str, FunctionOp] = {}
_DEFAULT_SETUP = torch.autograd.Function.setup_context


class FunctionNotCaptured(Exception):
    """Why a ``Function.apply`` call stays a graph break."""


class _ForwardContext:
    """The ``ctx`` a forward sees while probed or run by the kernel: what it saves and
    sets is recorded."""

    def __init__(self, needs_input_grad: tuple[bool, ...]) -> None:
        object.__setattr__(self, "needs_input_grad", needs_input_grad)
        object.__setattr__(self, "_saved", ())
        object.__setattr__(self, "_attributes", {})
        object.__setattr__(self, "_refused", None)

    def save_for_backward(self, *tensors: Any) -> None:
        object.__setattr__(self, "_saved", tensors)

    def save_for_forward(self, *tensors: Any) -> None:
        self._refuse("save_for_forward")

    def mark_dirty(self, *tensors: Any) -> None:
        self._refuse("mark_dirty")

    def mark_non_differentiable(self, *tensors: Any) -> None:
        self._refuse("mark_non_differentiable")

    def set_materialize_grads(self, value: bool) -> None:
        if not value:
            self._refuse("set_materialize_grads(False)")

    def __getattr__(self, name: str) -> Any:
        attributes = object.__getattribute__(self, "_attributes")
        if name in attributes:
            return attributes[name]
        raise AttributeError(f"'ctx' has no attribute '{name}'")

    def _refuse(self, what: str) -> None:
        if self._refused is None:
            object.__setattr__(self, "_refused", what)

    def __setattr__(self, name: str, value: Any) -> None:
        self._attributes[name] = value


class _BackwardContext:
    """The ``ctx`` the backward sees: the saved tensors, the forward's attributes."""

    def __init__(self, saved: tuple[Any, ...], attributes: dict[str, Any],
                 needs_input_grad: tuple[bool, ...]) -> None:
        self.saved_tensors = saved
        self.needs_input_grad = needs_input_grad
        self.__dict__.update(attributes)


@dataclass(frozen=True)
class _Plan:
    """How one call's values map to the operator: ``args`` (per argument: ``("t", i)``,
    the operator's tensor ``i``, or ``("c", value)``), the forward's output count and
    whether it returned a tuple, and where each saved tensor / tensor attribute comes
    from (``("in", i)``, ``("out", i)``, ``("extra", i)``)."""

    args: tuple[tuple[str, Any], ...]
    outputs: int
    as_tuple: bool
    saved: tuple[tuple[str, int], ...]
    attributes: tuple[tuple[str, Any], ...]  # (name, constant) or (name, ("tensor", where))
    extras: int
    needs_input_grad: tuple[bool, ...]


@dataclass
class FunctionOp:
    """A registered operator standing for one Function and plan."""

    function: type
    plan: _Plan
    op: Any

    def outputs_of(self, result: Any) -> Any:
        """What ``apply`` returns, from the operator's result."""
        values = (result,) if isinstance(result, torch.Tensor) else tuple(result)
        outs = values[:self.plan.outputs]
        return outs if self.plan.as_tuple else outs[0]


def _run_forward(function: type, plan: _Plan, tensors: tuple[Any, ...]
                 ) -> tuple[list[Any], _ForwardContext, bool]:
    """The forward's outputs (as a list), its context, whether it returned a tuple."""
    args = [tensors[v] if kind == "t" else v for kind, v in plan.args]
    ctx = _ForwardContext(plan.needs_input_grad)
    with torch.no_grad():
        if _separate_setup(function):  # forward(*args), then setup_context(ctx, ...)
            out = function.forward(*args)  # type: ignore[attr-defined]
            function.setup_context(ctx, tuple(args), out)  # type: ignore[attr-defined]
        else:
            out = function.forward(ctx, *args)  # type: ignore[attr-defined]
    outs = list(out) if isinstance(out, tuple) else [out]
    return outs, ctx, isinstance(out, tuple)


def _separate_setup(function: type) -> bool:
    """Whether ``function`` defines ``setup_context`` (its forward takes no ctx)."""
    return getattr(function, "setup_context", None) is not _DEFAULT_SETUP


def _extras(plan: _Plan, ctx: _ForwardContext) -> list[Any]:
    found: dict[int, Any] = {}
    for (kind, i), t in zip(plan.saved, ctx._saved):
        if kind == "extra":
            found[i] = t
    for (name, value) in plan.attributes:
        if isinstance(value, tuple) and value and value[0] == "tensor" and value[1][0] == "extra":
            found[value[1][1]] = ctx._attributes[name]
    return [found[i] for i in range(plan.extras)]


def _kernel(function: type, plan: _Plan) -> Callable[..., Any]:
    def run(*tensors: Any) -> Any:
        outs, ctx, _ = _run_forward(function, plan, tensors)
        values = outs + _extras(plan, ctx)
        # NOTE: an operator's outputs are new tensors that alias nothing: the probe
        # refused outputs aliasing arguments; a saved view or a repeated one is copied
        values = [v.clone() if i >= plan.outputs and v._base is not None
                  or any(v is w for w in values[:i]) else v for i, v in enumerate(values)]
        return values[0] if len(values) == 1 else tuple(values)
    return run


def _locate(t: Any, tensors: tuple[Any, ...], outs: list[Any],
            extras: list[Any]) -> tuple[str, int]:
    for kind, pool in (("in", tensors), ("out", outs), ("extra", extras)):
        for i, u in enumerate(pool):
            if t is u:
                return kind, i
    extras.append(t)
    return "extra", len(extras) - 1


def _probe(function: type, args: list[Any], kwargs: dict[str, Any]) -> _Plan:
    """Run the forward once on the capture's (fake) arguments; the plan, or
    FunctionNotCaptured naming what the operator cannot stand for."""
    if kwargs:
        raise FunctionNotCaptured("keyword arguments to apply")
    tensors: list[Any] = []
    plan_args: list[tuple[str, Any]] = []
    for a in args:
        if isinstance(a, torch.Tensor):
            plan_args.append(("t", len(tensors)))
            # NOTE: a fresh tensor of the same metadata: the probe never touches the
            # capture's own values (an in-place forward is refused after it ran)
            tensors.append(a.new_empty_strided(a.size(), a.stride()))
        elif isinstance(a, _CONSTANTS) and not isinstance(a, (torch.SymInt, torch.SymFloat)):
            plan_args.append(("c", a))
        else:
            raise FunctionNotCaptured(f"an argument of type {type(a).__name__}")
    needs = tuple(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
    draft = _Plan(tuple(plan_args), 0, False, (), (), 0, needs)
    versions = [t._version for t in tensors]
    outs, ctx, as_tuple = _run_forward(function, draft, tuple(tensors))
    if ctx._refused is not None:
        raise FunctionNotCaptured(f"its forward calls ctx.{ctx._refused}")
    if [t._version for t in tensors] != versions:
        raise FunctionNotCaptured("its forward writes an argument in place")
    if not outs or not all(isinstance(o, torch.Tensor) for o in outs):
        raise FunctionNotCaptured("its forward returns something other than tensors")
    for o in outs:
        if any(o is t or _base(o) is _base(t) for t in tensors):
            raise FunctionNotCaptured("its forward returns an argument or a view of one")
    extras: list[Any] = []
    if not all(t is None or isinstance(t, torch.Tensor) for t in ctx._saved):
        raise FunctionNotCaptured("it saves something other than tensors for backward")
    saved = tuple(("none", 0) if t is None else _locate(t, tuple(tensors), outs, extras)
                  for t in ctx._saved)
    attributes: list[tuple[str, Any]] = []
    for name, value in ctx._attributes.items():
        if isinstance(value, torch.Tensor):
            attributes.append((name, ("tensor", _locate(value, tuple(tensors), outs, extras))))
        elif _plain_constant(value):
            attributes.append((name, value))
        else:
            raise FunctionNotCaptured(f"ctx.{name} holds a {type(value).__name__}")
    return _Plan(tuple(plan_args), len(outs), as_tuple, saved, tuple(attributes),
                 len(extras), needs)


def _base(t: torch.Tensor) -> torch.Tensor:
    """The tensor whose memory ``t`` views (``t`` itself when it is no view)."""
    return t._base if t._base is not None else t


def _plain_constant(value: Any) -> bool:
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return False
    if isinstance(value, _CONSTANTS):
        return True
    if isinstance(value, (tuple, torch.Size)):
        return all(_plain_constant(v) for v in value)
    return False


def _digest(function: type, plan: _Plan) -> str:
    h = hashlib.sha256()
    for part in (function.__module__, function.__qualname__, repr(plan)):
        h.update(part.encode() + b"\0")
    for method in ("forward", "backward"):
        code = getattr(getattr(function, method, None), "__code__", None)
        if code is not None:
            h.update(code.co_code + repr(code.co_consts).encode())
    return h.hexdigest()[:16]


def function_op(function: type, args: list[Any], kwargs: dict[str, Any],
                fake_args: list[Any]) -> FunctionOp:
    """The operator standing for ``function.apply(*args)``, registered on first use.

    Raises:
        FunctionNotCaptured: the call stays a graph break (the message says why).
    """
    plan = _probe(function, fake_args, kwargs)
    base = re.sub(r"\W", "_", function.__qualname__)
    name = f"{base}_{_digest(function, plan)}"
    known = _OPS.get(name)
    if known is not None:
        return known
    global _LIBRARY
    if _LIBRARY is None:
        _LIBRARY = torch.library.Library(NAMESPACE, "FRAGMENT")  # type: ignore[no-untyped-call]
    count = sum(1 for kind, _ in plan.args if kind == "t")
    params = ", ".join(f"Tensor a{i}" for i in range(count))
    results = plan.outputs + plan.extras
    returns = "Tensor" if results == 1 else "(" + ", ".join(["Tensor"] * results) + ")"
    _LIBRARY.define(f"{name}({params}) -> {returns}")  # type: ignore[no-untyped-call]
    qualified = f"{NAMESPACE}::{name}"
    kernel = _kernel(function, plan)
    _LIBRARY.impl(name, kernel, "CompositeExplicitAutograd")  # type: ignore[no-untyped-call]
    torch.library.register_fake(qualified, kernel, lib=_LIBRARY)
    torch.library.register_autograd(qualified, _backward(function, plan),
                                    setup_context=_setup_context, lib=_LIBRARY)
    op = FunctionOp(function, plan, getattr(getattr(torch.ops, NAMESPACE), name).default)
    _OPS[name] = op
    return op


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    outs = (output,) if isinstance(output, torch.Tensor) else tuple(output)
    ctx.save_for_backward(*inputs, *outs)
    ctx.counts = (len(inputs), len(outs))


def _backward(function: type, plan: _Plan) -> Callable[..., Any]:
    def backward(ctx: Any, *grads: Any) -> Any:
        saved_all = ctx.saved_tensors
        n_in, _ = ctx.counts
        pools = {"in": saved_all[:n_in], "out": saved_all[n_in:n_in + plan.outputs],
                 "extra": saved_all[n_in + plan.outputs:], "none": (None,)}
        saved = tuple(pools[kind][i] for kind, i in plan.saved)
        attributes = {name: (pools[v[1][0]][v[1][1]] if isinstance(v, tuple) and v
                             and v[0] == "tensor" else v) for name, v in plan.attributes}
        user_ctx = _BackwardContext(saved, attributes, plan.needs_input_grad)
        result = function.backward(user_ctx, *grads[:plan.outputs])  # type: ignore[attr-defined]
        result = result if isinstance(result, tuple) else (result,)
        per_tensor = [result[i] if i < len(result) else None
                      for i, (kind, _) in enumerate(plan.args) if kind == "t"]
        return per_tensor[0] if n_in == 1 else tuple(per_tensor)
    return backward
