"""GraphBuilder: append nodes to a new graph with fresh names and inferred metadata.

Passes that rewrite a graph build the result with it. Metadata of a new ``call`` node is
computed by running the op on ``meta``-device tensors shaped like its inputs, so sizes,
strides and dtypes are torch's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from ember.aot.symbolic_meta import SymbolicMetaInference
from ember.aot.symbolic_sizes import is_static_meta
from ember.runtime.ir import (
    Argument,
    Graph,
    Meta,
    Node,
    ScalarMeta,
    SourceLocation,
    SymbolRange,
    TensorMeta,
    ValueRef,
    resolve_op,
)
from ember.runtime.ir.graph import SymExpr


class GraphBuilder:
    """Builds a :class:`Graph` node by node. ``symbols``: the size symbols (ranges and
    hints) of a symbolic graph; the metadata of a node over them is inferred with
    torch's shape environment (:mod:`ember.aot.symbolic_meta`)."""

    def __init__(self, symbols: Mapping[str, SymbolRange] | None = None) -> None:
        self.graph = Graph(symbols=dict(symbols or {}))
        self._names: set[str] = set()
        self._meta: dict[str, Meta] = {}
        self._symbolic: SymbolicMetaInference | None = None

    def add(self, node: Node) -> ValueRef:
        """Append ``node`` (renamed if its name is taken) and return a reference to it."""
        node.name = self.fresh(node.name)
        self._names.add(node.name)
        self._meta[node.name] = node.meta
        self.graph.nodes.append(node)
        return ValueRef(node.name)

    def call(
        self,
        target: str,
        args: tuple[Argument, ...],
        kwargs: dict[str, Argument] | None = None,
        name: str | None = None,
        meta: Meta = None,
        source: SourceLocation | None = None,
    ) -> ValueRef:
        """Append a call of ``target``; its metadata is inferred unless given."""
        kwargs = kwargs or {}
        if meta is None:
            meta = self.infer_meta(target, args, kwargs)
        base = name or target.split("::", 1)[1].split(".", 1)[0]
        return self.add(Node(base, "call", target, args, kwargs, meta=meta, source=source))

    def meta_of(self, ref: ValueRef) -> TensorMeta | ScalarMeta | None:
        """The metadata of the value ``ref`` in the graph being built."""
        meta = self._meta[ref.node]
        if ref.index is None:
            return meta if not isinstance(meta, tuple) else None
        return meta[ref.index] if isinstance(meta, tuple) else None

    def fresh(self, base: str) -> str:
        if base not in self._names:
            return base
        i = 1
        while f"{base}_{i}" in self._names:
            i += 1
        return f"{base}_{i}"

    def infer_meta(self, target: str, args: tuple[Argument, ...],
                   kwargs: dict[str, Argument]) -> Meta:
        """Metadata of ``target(*args, **kwargs)``, from a run on meta tensors.

        Raises:
            RuntimeError: if the op cannot run on the meta device.
        """
        if self._is_symbolic(args, kwargs):
            return self._symbolic_inference().infer(target, args, kwargs, self.meta_of)
        devices: list[torch.device] = []
        grads: list[bool] = []

        def load(a: Argument) -> Any:
            if isinstance(a, ValueRef):
                m = self.meta_of(a)
                if isinstance(m, TensorMeta):
                    devices.append(m.device)
                    grads.append(m.requires_grad)
                    return meta_tensor(m)
                raise RuntimeError(f"cannot infer metadata: {a} has no tensor metadata")
            if isinstance(a, tuple):
                return [load(x) for x in a]
            if isinstance(a, torch.device):
                devices.append(a)
                return torch.device("meta")
            return a

        op = resolve_op(target)
        margs = [load(a) for a in args]
        mkwargs = {k: load(v) for k, v in kwargs.items()}
        result = op(*margs, **mkwargs)
        device = devices[0] if devices else torch.device("cpu")
        requires_grad = any(grads)
        if isinstance(result, (tuple, list)):
            return tuple(_meta_of_result(r, device, requires_grad) for r in result)
        return _meta_of_result(result, device, requires_grad)


    def _is_symbolic(self, args: tuple[Argument, ...], kwargs: dict[str, Argument]) -> bool:
        def symbolic(a: Argument) -> bool:
            if isinstance(a, SymExpr):
                return True
            if isinstance(a, tuple):
                return any(symbolic(x) for x in a)
            if isinstance(a, ValueRef):
                m = self.meta_of(a)
                return isinstance(m, TensorMeta) and not is_static_meta(m)
            return False

        return any(symbolic(a) for a in (*args, *kwargs.values()))

    def _symbolic_inference(self) -> SymbolicMetaInference:
        if self._symbolic is None:
            self._symbolic = SymbolicMetaInference(self.graph.symbols)
            # NOTE: the placeholders bind every input symbol, also those a SymExpr
            # argument names without any argument tensor having it as a size.
            for p in self.graph.placeholders:
                if isinstance(p.meta, TensorMeta):
                    self._symbolic.fake(p.meta)
        return self._symbolic


def meta_tensor(meta: TensorMeta) -> torch.Tensor:
    """A ``meta``-device tensor with ``meta``'s dtype, sizes, strides and offset."""
    sizes = [int(s) for s in meta.sizes]
    strides = [int(s) for s in meta.strides]
    offset = int(meta.storage_offset)
    extent = 1 + sum((s - 1) * st for s, st in zip(sizes, strides)) if all(sizes) else 0
    flat = torch.empty(offset + extent, dtype=meta.dtype, device="meta")
    return flat.as_strided(sizes, strides, offset)


def _meta_of_result(value: Any, device: torch.device,
                    requires_grad: bool) -> TensorMeta | ScalarMeta | None:
    if isinstance(value, torch.Tensor):
        return TensorMeta(
            dtype=value.dtype,
            sizes=tuple(int(s) for s in value.shape),
            strides=tuple(int(s) for s in value.stride()),
            device=device,
            storage_offset=int(value.storage_offset()),
            requires_grad=requires_grad and (value.is_floating_point() or value.is_complex()),
        )
    if isinstance(value, bool):
        return ScalarMeta("bool")
    if isinstance(value, int):
        return ScalarMeta("int")
    if isinstance(value, float):
        return ScalarMeta("float")
    return None
