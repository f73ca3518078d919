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
per node, its host-scalar arguments computed the same way). The new value of a mutated
host-scalar input (``step += 1``) is written into the input itself by the op's ``out=``
variant, after every kernel (:meth:`HostScalars.written_output`): the runtime then copies
nothing back (a copy and a grad-mode switch a parameter, ~4 us of host time each). Many
counters that each add one number to themselves (``step += 1``, one per parameter) are
written by one ``aten._foreach_add_.Scalar`` call instead of one ``add.out`` each.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from ember.inductor.buffers import ExternCall
from ember.inductor.lowering.devices import node_metas
from ember.inductor.lowering.extern_args import (
    ConstantArg,
    ExternArg,
    ListArg,
    TensorArg,
    extern_reads,
)
from ember.inductor.lowering.registry import NotLowerable
from ember.inductor.lowering.values import Lazy, Stored
from ember.inductor.lowering.written_args import input_written_in_place
from ember.runtime.ir import (
    IRFormatError,
    Node,
    OutputKind,
    TensorMeta,
    ValueRef,
    operator_schema,
)

if TYPE_CHECKING:
    from ember.inductor.lowering.graph_lowering import GraphLowering

__all__ = ["HOST_SCALAR_DTYPES", "HostScalars", "host_scalar_node", "is_host_scalar",
           "out_variant"]

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


def host_scalar_node(nodes: Mapping[str, Node], node: Node,
                     traced: torch.device | None) -> bool:
    """Whether every tensor ``node`` makes or reads that is not on ``traced``'s device
    is a host scalar (:func:`is_host_scalar`): its rule may lower it."""
    if traced is None or traced.type == "cpu":
        return False
    return all(is_host_scalar(m, traced) for m in node_metas(nodes, node)
               if isinstance(m, TensorMeta) and m.device.type != traced.type)


@functools.cache
def out_variant(target: str) -> str | None:
    """The ``out=`` overload of operator ``target`` (``aten::add.Tensor`` ->
    ``aten::add.out``, ``aten::pow.Scalar`` -> ``aten::pow.Scalar_out``): the one whose
    other arguments are ``target``'s, or None."""
    name, _, overload = target.partition(".")
    try:
        want = [(a.name, str(a.type)) for a in operator_schema(target).arguments]
    except IRFormatError:
        return None
    for candidate in (f"{name}.{overload}_out", f"{name}.out"):
        try:
            schema = operator_schema(candidate)
        except IRFormatError:
            continue
        args = [(a.name, str(a.type)) for a in schema.arguments if not a.is_out]
        if args == want and sum(a.is_out for a in schema.arguments) == 1:
            return candidate
    return None


class HostScalars:
    """The host-scalar values of one graph's lowering: which lowered values are host
    scalars computed in the kernels that read them, and the CPU buffer each got once a
    CPU tensor of it was needed (:meth:`on_host`)."""

    def __init__(self, low: GraphLowering) -> None:
        self.low = low
        # id(value) -> (value, node): held, so that an id is never reused
        self._values: dict[int, tuple[Lazy, Node]] = {}
        self._on_host: dict[str, Stored] = {}
        self._writes: list[tuple[Node, str, str]] = []  # (node, input buffer, out op)

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

    def written_output(self, index: int, ref: ValueRef) -> ExternArg | None:
        """Graph output ``index`` (``ref``) as the host-scalar input it is the new value
        of, to be written in place by :meth:`write_outputs`; None when it is not such an
        output, or the input cannot be written (another input views it, a run-time check
        may fail, the op has no ``out=`` variant, ...)."""
        low = self.low
        value = low.values.get(ref.node)
        if ref.index is not None or not self.is_host(value) or low.checks:
            return None
        _, node = self._values[id(value)]
        specs = low.program.signature.outputs.get(low.graph_name) or []
        names = [p.name for p in low.graph.placeholders]
        spec = specs[index] if 0 <= index < len(specs) else None
        if spec is None or spec.kind != OutputKind.MUTATED_INPUT or spec.target not in names:
            return None
        buffer = low.inputs[names.index(str(spec.target))]
        output = next(n for n in low.graph.nodes if n.op == "output")
        if any(r.node == spec.target for r in output.inputs()):  # the old value returned
            return None
        info = low.buffers.get(buffer)
        target = out_variant(node.target)
        if (info is None or not info.host or target is None or node.kwargs
                or any(b == buffer for _, b, _ in self._writes)
                or not input_written_in_place(low, buffer)):
            return None
        self._writes.append((node, buffer, target))
        low.in_place_inputs.add(buffer)
        return TensorArg(buffer)

    def write_outputs(self) -> None:
        """The in-place writes :meth:`written_output` promised: ``op.out(*args,
        out=argN)`` on the CPU, after every kernel and every other call (the graph's
        last nodes: all its reads of the old values come first). Counters that each add
        one number to themselves (an optimizer's ``state['step'] += 1``, one per
        parameter) are written by one ``aten._foreach_add_.Scalar`` call per number
        instead: each ``aten`` call costs several microseconds of host time, and a
        100M-parameter step has 48 counters."""
        low = self.low
        writes = list(self._writes)
        # NOTE: once: Graph.placeholders scans every node
        inputs = {p.name: low.inputs[i] for i, p in enumerate(low.graph.placeholders)}
        counters: dict[tuple[type, float], list[tuple[Node, str]]] = {}
        for node, buffer, _ in writes:
            step = _counter_step(node, buffer, inputs)
            if step is not None:
                counters.setdefault((type(step), step), []).append((node, buffer))
        grouped = {buffer for group in counters.values() if len(group) > 1
                   for _, buffer in group}
        for node, buffer, target in writes:
            if buffer in grouped:
                continue
            args = [low.extern_arg(low.read_arg(a)) for a in node.args]
            kwargs: dict[str, ExternArg] = {"out": TensorArg(buffer)}
            name = low.fresh()
            info = low.buffers[buffer]
            low.buffers[name] = dataclasses.replace(info, name=name, kind="extern")
            low.fallbacks[node.target] += 1
            note = f"the cpu scalar input {buffer}'s new value, written in place"
            low.log_fallback(node.name, target, note)
            low.nodes.append(ExternCall(
                target, args, kwargs, [name], [(info.dtype, (), ())],
                extern_reads(args, kwargs), True, False, (node.name,), note, mutates=(buffer,)))
        # NOTE: after the other writes, whose arguments may read a counter's old value
        for (_, step), group in counters.items():
            if len(group) > 1:
                self._write_counters(group, step)

    def _write_counters(self, group: list[tuple[Node, str]], step: int | float) -> None:
        """``aten._foreach_add_.Scalar([argN, ...], step)``: every counter of ``group``
        (``(node, input buffer)``) written in place in one call."""
        low = self.low
        buffers = [buffer for _, buffer in group]
        args: list[ExternArg] = [ListArg(tuple(TensorArg(b) for b in buffers)),
                                 ConstantArg(step)]
        for node, _ in group:
            low.fallbacks[node.target] += 1
        note = f"the {len(buffers)} cpu scalar counters' new values, written in place"
        low.log_fallback(",".join(node.name for node, _ in group),
                         "aten::_foreach_add_.Scalar", note)
        low.nodes.append(ExternCall(
            "aten::_foreach_add_.Scalar", args, {}, [low.fresh()], [None],
            extern_reads(args, {}), True, False, tuple(node.name for node, _ in group),
            note, mutates=tuple(buffers)))


def _counter_step(node: Node, buffer: str, inputs: dict[str, str]) -> int | float | None:
    """``c`` when ``node`` is ``aten::add.Tensor(x, c)`` of the placeholder whose buffer is
    ``buffer`` (``inputs``: placeholder name -> input buffer) and a Python number ``c``
    (its new value, written into it), else None."""
    if node.target != "aten::add.Tensor" or len(node.args) != 2 or node.kwargs:
        return None
    x, step = node.args
    if (not isinstance(x, ValueRef) or x.index is not None or type(step) not in (int, float)
            or inputs.get(x.node) != buffer):
        return None
    assert isinstance(step, (int, float))
    return step
