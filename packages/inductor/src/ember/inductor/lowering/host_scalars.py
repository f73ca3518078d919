"""CPU scalars in a graph on another device: kernel arguments, not fallbacks.

A compiled optimizer step on CUDA keeps eager's ``state['step']``: a CPU 0-d float32
tensor. torch's capturable Adam computes the bias corrections from it on the CPU
(``pow(0.9, step)``, ``1 - ...``, ``reciprocal``, ``sqrt``, ...) and hands the results
to CUDA ops (``exp_avg_sq.sqrt() / (bias_correction2_sqrt * step_size_neg)``), which
eager allows for a 0-d CPU operand: it reads the value on the host. Run as extern ATen
calls (``lowering/devices.py``'s rule for other devices), those ops cost about twenty
eager calls per parameter, each CPU op turning its Python number into a tensor
(``aten::copy_``), and split every parameter's update into several CUDA kernels and
eager CUDA ops, one of which re-read an input after a kernel had computed its new
value (a copy back into a CUDA tensor; H200, session 20: 11.15 ms a 100M-parameter
AdamW step, 385 ``aten::copy_``).

Instead, a *host scalar* (:func:`is_host_scalar`: a 0-d float32 CPU tensor in a graph
traced on another device) is a buffer the kernels read by value: its
:class:`~.lowered_graph.BufferInfo` and loop-IR ``Buffer`` are marked ``host``, the
generated kernel takes a scalar argument in its place (``fp32`` in Triton's signature),
and the wrapper passes ``argN.item()`` at the launch: a read of host memory, which
neither copies to the device nor synchronizes it. A node whose tensors on the other
device are all host scalars (:func:`host_scalar_node`) is lowered by its rule like any
other. When its result is itself a host scalar (``step + 1``, ``pow(0.9, step)``) it
stays an element function (:class:`HostScalars` records it), inlined into each kernel
that reads it: the CUDA kernel computes the bias corrections from the step it was
given, so a parameter's whole update is one kernel. Only where a CPU tensor is needed
(a graph output such as the new ``step``, or an extern call's argument) is the node
run on the host, as an extern ATen call on the CPU (:meth:`HostScalars.on_host`, once
per node, its host-scalar arguments computed the same way).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from ember.inductor.lowering.registry import NotLowerable
from ember.inductor.lowering.values import Lazy, Stored
from ember.runtime.ir import Graph, Node, TensorMeta

if TYPE_CHECKING:
    from ember.inductor.lowering.graph_lowering import GraphLowering

__all__ = ["HOST_SCALAR_DTYPES", "HostScalars", "host_scalar_node", "is_host_scalar"]

#: dtypes a host scalar may have: what a Python number from ``.item()`` is passed to a
#: Triton kernel as without loss (float: ``fp32``). A float64 or integer 0-d CPU tensor
#: keeps the extern call (Triton would see a float64 as ``fp32``, and specializes an
#: integer equal to 1 into the binary).
HOST_SCALAR_DTYPES = (torch.float32,)


def is_host_scalar(meta: object, traced: torch.device | None) -> bool:
    """Whether ``meta`` is a host scalar in a graph traced on ``traced``: a 0-d CPU
    tensor of :data:`HOST_SCALAR_DTYPES` in a graph whose tensors are on another
    device type."""
    return (isinstance(meta, TensorMeta) and traced is not None and traced.type != "cpu"
            and meta.device.type == "cpu" and len(meta.sizes) == 0
            and meta.dtype in HOST_SCALAR_DTYPES)


def host_scalar_node(graph: Graph, node: Node, traced: torch.device | None) -> bool:
    """Whether every tensor ``node`` makes or reads that is not on ``traced``'s device
    is a host scalar (:func:`is_host_scalar`): its rule may lower it."""
    if traced is None or traced.type == "cpu":
        return False
    metas: list[Any] = list(node.meta) if isinstance(node.meta, tuple) else [node.meta]
    for a in node.inputs():
        meta = graph.node(a.node).meta
        metas.append(meta[a.index] if isinstance(meta, tuple) and a.index is not None
                     else meta)
    return all(is_host_scalar(m, traced) for m in metas
               if isinstance(m, TensorMeta) and m.device.type != traced.type)


class HostScalars:
    """The host-scalar values of one graph's lowering: which lowered values are host
    scalars computed in the kernels that read them, and the CPU buffer each got once a
    CPU tensor of it was needed (:meth:`on_host`)."""

    def __init__(self, low: GraphLowering) -> None:
        self.low = low
        # id(value) -> (value, node): held, so that an id is never reused
        self._values: dict[int, tuple[Lazy, Node]] = {}
        self._on_host: dict[str, Stored] = {}

    def result(self, node: Node, value: Any, emitted: bool) -> Any:
        """``node``'s lowered ``value`` (its rule ``emitted`` loop nodes or extern calls,
        or not), recorded as its host-scalar result: an element function, or a host
        buffer (an input it aliases).

        Raises:
            NotLowerable: the rule made a buffer on the graph's device: the node runs
                on the host instead.
        """
        if isinstance(value, Stored) and not emitted:
            info = self.low.buffers.get(value.buffer)
            if info is not None and info.host:
                return value
        if not isinstance(value, Lazy) or value.sizes != () or emitted:
            raise NotLowerable("a cpu scalar whose rule makes a buffer on the "
                               f"{self.low.device.type} device")
        self._values[id(value)] = (value, node)
        return value

    def is_host(self, value: object) -> bool:
        """Whether ``value`` is a host-scalar element function (never realized into a
        buffer on the graph's device: :meth:`on_host` makes its CPU tensor)."""
        return id(value) in self._values

    def on_host(self, value: Lazy) -> Stored:
        """The CPU tensor of host-scalar ``value``: its node run as an extern ATen call
        on the CPU (a counted fallback), once; its host-scalar arguments likewise."""
        _, node = self._values[id(value)]
        found = self._on_host.get(node.name)
        if found is None:
            found = self.low.extern(node, fallback=True,
                                    reason=f"a cpu scalar a {self.low.device.type} graph "
                                           "returns or passes to an extern call")
            assert isinstance(found, Stored)
            self._on_host[node.name] = found
        return found
