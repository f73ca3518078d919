"""Metadata of a new node whose inputs have symbolic sizes.

:class:`~ember.aot.builder.GraphBuilder` infers a static node's metadata by running the
op on ``meta``-device tensors. Sizes over symbols need torch's shape environment instead:
each input becomes a fake tensor whose sizes are its IR expressions
(:meth:`GraphRecorder.add_meta_input`, same symbol names), ``SymExpr`` arguments are
computed from the symbols those fakes bind, and the op runs under a scratch recorder
whose recorded node gives the result's metadata in the same symbols. The recorder is a
scratch pad: its graph is never finished, and guards torch adds here are added again
when the aot stage re-traces the functional program (where they are kept).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import torch
from ember.aot.retrace_inputs import recorded_meta
from ember.aot.symbolic_sizes import bind_plain_sizes, evaluate_symbolic
from ember.runtime.ir import (
    Argument,
    InputSpec,
    Meta,
    ScalarMeta,
    SymbolRange,
    TensorMeta,
    ValueRef,
    resolve_op,
)
from ember.runtime.ir.graph import SymExpr
from ember.runtime.tracing import GraphRecorder


class SymbolicMetaInference:
    """Infers node metadata over the symbols ``symbols`` (ranges and hints)."""

    def __init__(self, symbols: Mapping[str, SymbolRange]) -> None:
        self.symbols = dict(symbols)
        self.recorder = GraphRecorder(dynamic=True)
        self.values: dict[str, Any] = {}  # IR symbol -> torch SymInt
        self._fakes: dict[TensorMeta, torch.Tensor] = {}

    def fake(self, meta: TensorMeta) -> torch.Tensor:
        """A fake tensor of ``meta``'s layout (one per distinct layout)."""
        key = dataclasses.replace(meta, requires_grad=False)
        fake = self._fakes.get(key)
        if fake is None:
            spec = InputSpec(f"input{len(self._fakes)}")
            fake = self.recorder.add_meta_input(key, spec, self.symbols)
            bind_plain_sizes(key, fake, self.values)
            self._fakes[key] = fake
        return fake

    def infer(self, target: str, args: tuple[Argument, ...], kwargs: dict[str, Argument],
              meta_of: Callable[[ValueRef], object]) -> Meta:
        """The metadata of ``target(*args, **kwargs)``; ``meta_of`` gives the metadata
        of a value argument.

        Raises:
            TypeError: an argument has no tensor metadata.
            RuntimeError: the op fails on fakes.
            UnboundSizeSymbolError: a ``SymExpr`` uses a symbol no known value binds.
        """
        grads: list[bool] = []

        def load(a: Argument) -> Any:
            if isinstance(a, ValueRef):
                m = meta_of(a)
                if not isinstance(m, TensorMeta):
                    raise TypeError(f"cannot infer metadata: {a} has no tensor metadata")
                grads.append(m.requires_grad)
                return self.fake(m)
            if isinstance(a, SymExpr):
                return evaluate_symbolic(a.expr, self.values)
            if isinstance(a, tuple):
                return [load(x) for x in a]
            return a

        op = resolve_op(target)
        margs = [load(a) for a in args]
        mkwargs = {k: load(v) for k, v in kwargs.items()}
        with torch.no_grad(), self.recorder:
            result = op(*margs, **mkwargs)
        requires_grad = any(grads)
        if isinstance(result, (tuple, list)):
            return tuple(self._meta(r, requires_grad) for r in result)
        return self._meta(result, requires_grad)

    def _meta(self, value: Any, requires_grad: bool) -> TensorMeta | ScalarMeta | None:
        if isinstance(value, torch.Tensor):
            meta = recorded_meta(self.recorder, value)
            return dataclasses.replace(
                meta, requires_grad=requires_grad and (value.is_floating_point()
                                                       or value.is_complex()))
        if isinstance(value, bool):
            return ScalarMeta("bool")
        if isinstance(value, (int, torch.SymInt)):
            return ScalarMeta("int")
        if isinstance(value, float):
            return ScalarMeta("float")
        return None
