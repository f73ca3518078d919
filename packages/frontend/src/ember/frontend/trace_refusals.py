"""Calls the trace capture refuses while it runs the user's function on fake tensors.

The trace capture (``capture="trace"``) runs the function once on fake tensors and
records its tensor ops as one forward graph. A backward pass started inside it
(``loss.backward()``, ``torch.autograd.backward`` / ``grad``) would run once, at capture
time, on the fake tensors: it left a fake tensor as each parameter's ``.grad`` after the
first call and no gradient at all on later ones, silently. :class:`RefuseAutograd`, a
torch function mode active during the trace, stops such a call before it runs, with an
error the trace names the user's line in (``trace.CaptureError``). So does it stop a
``tensor.data = ...`` assignment and a change of a tensor's ``requires_grad``: neither is
a tensor op the trace records, so the compiled program would ignore both.

:func:`constant_write` finds, in a recorded program, an in-place write into a tensor
the trace read from a global, a closure or a plain (non-buffer) module attribute: such a
tensor is a constant of the graph, and the write would go to the graph's copy (the aot
stage refused it with an IR error asking for a buffer). The trace refuses it with the
user's line and the tensor's name; strict capture makes such a tensor a graph input and
writes back.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import torch
from ember.frontend._torch import has_unbacked_symbols
from ember.runtime.ir import IRFormatError, Node, Program, ValueRef
from ember.runtime.ir.op_queries import argument_at, is_view, mutated_arguments
from torch.overrides import TorchFunctionMode


class AutogradInTrace(RuntimeError):
    """A backward pass was started inside the traced function."""


def _refused() -> dict[Any, str]:
    return {
        torch.Tensor.backward: "Tensor.backward()",
        torch.autograd.backward: "torch.autograd.backward()",
        torch.autograd.grad: "torch.autograd.grad()",
    }


_SET_DATA = torch.Tensor.data.__set__  # type: ignore[attr-defined]
_SET_REQUIRES_GRAD = (torch.Tensor.requires_grad_,
                      torch.Tensor.requires_grad.__set__)  # type: ignore[attr-defined]


def _changes_flag(args: Any, kwargs: Any) -> bool:
    """Whether a ``requires_grad_(...)`` call or a ``requires_grad`` assignment sets the
    flag to another value than the tensor's (``x.requires_grad_(False)`` of a tensor that
    does not require grad changes nothing and passes)."""
    value = args[1] if len(args) > 1 else (kwargs or {}).get("requires_grad", True)
    return isinstance(args[0], torch.Tensor) and bool(value) != args[0].requires_grad


class RefuseAutograd(TorchFunctionMode):
    """Raise :class:`AutogradInTrace` at a backward pass started under it; every other
    call runs as it would."""

    def __init__(self) -> None:
        super().__init__()
        self._refused = _refused()

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        if func == _SET_DATA:
            raise AutogradInTrace(
                "`tensor.data = ...` inside the traced function: the trace records tensor "
                "ops, and the new data would not reach the compiled program\n  hint: use "
                "the strict capture (the default), or `with torch.no_grad(): x.copy_(y)`")
        if func in _SET_REQUIRES_GRAD and args and _changes_flag(args, kwargs):
            raise AutogradInTrace(
                "a tensor's requires_grad changed inside the traced function: the trace "
                "records tensor ops, and the compiled program would not change it\n  hint: "
                "set it outside the compiled function, or use the strict capture (the "
                "default)")
        name = self._refused.get(func)
        if name is not None:
            raise AutogradInTrace(
                f"{name} inside the traced function: the trace capture records the "
                "forward only (the backward would run once, at capture time, on fake "
                "tensors)\n  hint: call it outside the compiled function, or use the "
                "strict capture (the default), which runs it at a graph break")
        return func(*args, **(kwargs or {}))


def constant_write(program: Program, fn: Callable[..., Any],
                   module: torch.nn.Module | None) -> tuple[Node, str] | None:
    """The first call of ``program``'s forward that writes in place into one of its
    constants (or a view of one), with a name for the tensor (``global G``, ``self.cache``,
    ...); None when there is none."""
    roots: dict[str, str] = {}  # value -> the constant it is, or is a view of
    for node in program.forward.nodes:
        if node.op == "constant":
            roots[node.name] = node.name
            continue
        if node.op != "call":
            continue
        try:
            written = mutated_arguments(node)
            view = is_view(node.target)
        except IRFormatError:
            continue
        for i in written:
            for ref in _refs(argument_at(node, i)):
                if ref.node in roots:
                    target = program.forward.node(roots[ref.node]).target
                    return node, _tensor_name(program.tensors.get(target), fn, module)
        if view:
            base = next((r for r in node.inputs() if r.node in roots), None)
            if base is not None:
                roots[node.name] = roots[base.node]
    return None


def _refs(value: Any) -> Iterator[ValueRef]:
    if isinstance(value, ValueRef):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _refs(v)


def _tensor_name(constant: Any, fn: Callable[..., Any], module: torch.nn.Module | None
                 ) -> str:
    """Where the traced code read the tensor ``constant`` shares memory with: a global
    or closure variable of the traced function, or an attribute of a module."""
    if not isinstance(constant, torch.Tensor):
        return "a tensor read from Python"

    def same(value: Any) -> bool:
        return (isinstance(value, torch.Tensor) and value.device == constant.device
                and value.data_ptr() == constant.data_ptr()
                and value.shape == constant.shape)

    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    function = getattr(target, "__func__", target)
    code = getattr(function, "__code__", None)
    for name, cell in zip(getattr(code, "co_freevars", ()),
                          getattr(function, "__closure__", None) or ()):
        try:
            if same(cell.cell_contents):
                return f"the closure variable {name!r}"
        except ValueError:  # an empty cell
            continue
    for name, value in (getattr(function, "__globals__", None) or {}).items():
        if same(value):
            return f"the global {name!r}"
    if module is not None:
        for prefix, sub in module.named_modules():
            for name, value in vars(sub).items():
                if same(value):
                    return f"the attribute self.{prefix + '.' if prefix else ''}{name}"
    return f"a tensor of shape {list(constant.shape)} read from Python"


class SymbolicText(RuntimeError):
    """The traced function's result holds text made of a symbolic size."""


class DataDependentResult(RuntimeError):
    """The traced function's result holds a Python number read from a tensor's data."""


def constant_result_leaf(leaf: Any, symbols: dict[str, str]) -> Any:
    """A non-tensor leaf of the traced function's result, as the constant later calls
    return: a symbolic number (``x.shape[0]`` with a symbolic size) is specialised, a
    guard making its sizes static (it was returned as the ``SymInt`` itself, ``s0``).

    Raises:
        SymbolicText: a string naming one of ``symbols`` (symbol -> the input dimension
            it stands for): text made of a symbolic size (``f"{x.shape}"``) would be
            ``'torch.Size([s0, 3])'`` at every call.
        DataDependentResult: a number read from a tensor's data (``.tolist()``,
            ``.item()`` in a trace with symbolic sizes): it has no value to keep.
    """
    if isinstance(leaf, (torch.SymInt, torch.SymFloat, torch.SymBool)) and (
            has_unbacked_symbols(leaf)):
        raise DataDependentResult(
            "the result holds a Python number read from a tensor's data (.item(), "
            ".tolist()); the trace runs on tensors without values, so it has none to "
            "return at later calls")
    if isinstance(leaf, torch.SymInt):
        return int(leaf)
    if isinstance(leaf, torch.SymFloat):
        return float(leaf)
    if isinstance(leaf, torch.SymBool):
        return bool(leaf)
    if isinstance(leaf, str) and symbols:
        named = [s for s in symbols if re.search(rf"\b{s}\b", leaf)]
        if named:
            raise SymbolicText(
                f"the result holds text made of the symbolic size "
                f"{', '.join(f'{symbols[s]} ({s})' for s in named)}: {leaf!r}; the trace "
                "runs the Python once, so later calls would return it as is\n  hint: use "
                "the strict capture (the default), which specialises such sizes, or "
                "make the dimension static (mark_static, dynamic=False)")
    return leaf


def symbol_names(fakes: dict[str, Any]) -> dict[str, str]:
    """The symbols of the fake tensors' sizes, by name: ``{"s0": "x.size(0)"}``."""
    out: dict[str, str] = {}
    for name, fake in fakes.items():
        if isinstance(fake, torch.Tensor):
            for d, size in enumerate(fake.shape):
                if isinstance(size, torch.SymInt) and str(size).isidentifier():
                    out.setdefault(str(size), f"{name}.size({d})")
    return out


__all__ = ["AutogradInTrace", "RefuseAutograd", "SymbolicText", "constant_result_leaf",
           "constant_write", "symbol_names"]
