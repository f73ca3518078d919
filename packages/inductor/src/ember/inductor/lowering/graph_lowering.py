"""GraphLowering: one core-functional graph -> a :class:`~.lowered_graph.LoweredGraph`.

Walks the graph's nodes in order with one method per opcode (``placeholder``,
``get_attr``, ``constant``, ``call``, ``output``). A ``call`` goes to its rule in the
lowering table; ops without a rule, and rules that raise :class:`NotLowerable`, become
:class:`~ember.inductor.buffers.ExternCall` s to the eager op (a *fallback*: logged under
``EMBER_LOGS=fallbacks`` and counted). A rule failing with any other exception is a bug:
:class:`LoweringError`. Ops lowered to extern calls on purpose (``externs.py``) go
through the lowering passes of :mod:`.extern_passes` first (layout, matmul padding).
Custom operators (``torch.library`` ops outside ``aten``) are extern calls by design, not
fallbacks; one that writes its arguments gets buffers only it holds
(:mod:`.custom_ops`).

:meth:`GraphLowering.run` returns the :class:`~.lowered_graph.LoweredGraph` the scheduler
fuses into kernels and the wrapper codegen turns into Python.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
from ember.inductor.buffers import (ExternCall, PointwiseBuffer, ReductionBuffer, ScatterBuffer,
                                    ScheduledNode)
from ember.inductor.loop_ir import IndexExpr
from ember.inductor.loop_ir.symbolic_index import from_ir, hint
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.checks import RuntimeCheck
from ember.inductor.lowering.context import ExternRequest
from ember.inductor.lowering.custom_ops import is_custom_operator, lower_custom_call
from ember.inductor.lowering.devices import copy_on_own_device, other_device, traced_device
from ember.inductor.lowering.extern_args import (ExternArg, ListArg, SizeArg, TensorArg,
                                                VariableArg, constant_arg, extern_reads)
from ember.inductor.lowering.extern_passes import EXTERN_PASSES, in_traced_layouts
from ember.inductor.lowering.host_scalars import HostScalars, host_scalar_node, is_host_scalar
from ember.inductor.lowering.inlining import SHARED_STORE_LOADS, Uses, too_large
from ember.inductor.lowering.layout import (LayoutState, is_dense, meta_layout, same_layout,
                                            storage_order)
from ember.inductor.lowering.output_views import eager_view
from ember.inductor.lowering.lowered_graph import BufferInfo, GraphInput, LoweredGraph
from ember.inductor.lowering.registry import EXTERN_OPS, LOWERINGS, NotLowerable
from ember.inductor.lowering.rng_seed import GraphSeed
from ember.inductor.lowering.saved_padding import padded_saved_output, zero_padded_inputs
from ember.inductor.lowering.values import (ElementFn, Lazy, ScalarValue, Stored, Value,
                                           contiguous_strides, numel, probe)
from ember.inductor.lowering.views import reshaped_bases
from ember.inductor.lowering.written_args import mutated_inputs, returns_input_in_place
from ember.runtime.ir import (
    Argument,
    Node,
    Program,
    ScalarMeta,
    SymExpr,
    TensorMeta,
    ValueRef,
    symbolic,
)
from ember.runtime.logs import log


class LoweringError(Exception):
    """A lowering rule failed with an error other than :class:`NotLowerable`: a bug in
    the rule (the original exception is its ``__cause__``)."""


def _static(meta: object) -> bool:
    return isinstance(meta, TensorMeta) and all(
        isinstance(s, int) for s in tuple(meta.sizes) + tuple(meta.strides))


def _symbolic_failure(e: Exception) -> bool:
    """Whether ``e`` is sympy refusing to decide a comparison of symbolic sizes (a rule
    written for static sizes branching on one): the op then runs eagerly."""
    return isinstance(e, TypeError) and any(
        word in str(e) for word in ("Relational", "symbolic", "Symbol", "sympy", "expression"))


class GraphLowering:
    """Lowers graph ``graph_name`` of ``program`` (see module doc); the lowering context
    rules and passes see (:class:`~.context.LoweringContext`).

    ``eager``: run every op as an extern call; ``eager_random``: run random ops as extern
    calls on torch's generator; ``extern_matmuls``: matmul nodes not offered as templates.
    """

    def __init__(self, program: Program, graph_name: str = "forward",
                 device: torch.device | None = None, eager: bool = False,
                 eager_random: bool = False, extern_matmuls: frozenset[str] = frozenset(),
                 pad_saved: bool = False) -> None:
        self.program = program
        # saved tensors as their matmul's zero-padded buffer (saved_padding.py): the
        # row-major pads made, the outputs saved padded, the inputs with zero columns
        self.pad_saved = pad_saved
        self.row_pads: list[tuple[Lazy, Stored]] = []
        self.padded_outputs: dict[int, int] = {}
        self.zero_padded = zero_padded_inputs(program, graph_name)
        self.extern_matmuls = extern_matmuls
        self.graph = program.graphs[graph_name]
        self.graph_name = graph_name
        self.nodes: list[ScheduledNode] = []
        self.buffers: dict[str, BufferInfo] = {}
        self.values: dict[str, Any] = {}
        self.inputs: list[str] = []
        self.constants: dict[str, str] = {}  # wrapper variable -> Program.tensors key
        self.outputs: list[ExternArg] = []
        self.output_buffers: set[str] = set()
        self.in_place_inputs: set[str] = set()  # inputs a call writes itself (written_args)
        self.fallbacks: collections.Counter[str] = collections.Counter()
        self.checks: list[RuntimeCheck] = []  # run-time checks the kernels record (checks.py)
        self._by_name = {n.name: n for n in self.graph.nodes}
        self._traced = traced_device([n.meta for n in self.graph.nodes])  # devices.py
        self.device = device or self._traced or torch.device("cpu")
        self.all_extern = eager  # every op an extern call (see compile.compile_graph)
        self.symbolic = not all(
            _static(m) for n in self.graph.nodes
            for m in (n.meta if isinstance(n.meta, tuple) else (n.meta,))
            if isinstance(m, TensorMeta)
        )
        self.eager_reason = "graph runs eagerly"
        self._count = 0
        self._realized: dict[int, tuple[Lazy, Stored]] = {}
        self.uses = Uses(self.graph, self.device.type)  # inlining.py: values read broadcast
        self._current = ""  # the node being lowered
        self._sized = _plain_symbols(*(n.meta for n in self.graph.placeholders))
        self.layout = LayoutState()
        self._loads_of: dict[int, tuple[Lazy, list[tuple[str, IndexExpr]], set[str]]] = {}
        # random ops (lowering/random.py): run them eagerly on torch's generator instead
        self.eager_random = eager_random
        self.rng = GraphSeed(self)
        self.host_scalars = HostScalars(self)  # cpu scalars of a cuda graph: host_scalars.py

    def fresh(self, prefix: str = "buf") -> str:
        name = f"{prefix}{self._count}"
        self._count += 1
        return name

    # -- driving ------------------------------------------------------------------------
    def run(self) -> LoweredGraph:
        """Lower every node; returns the lowered graph.

        Raises:
            LoweringError: a lowering rule failed other than by :class:`NotLowerable`.
        """
        for node in self.graph.nodes:
            getattr(self, node.op)(node)
        placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        return LoweredGraph(
            self.graph_name, self.device,
            tuple(GraphInput(name, n.meta) for name, n in zip(self.inputs, placeholders)),
            self.constants, self.buffers, tuple(self.nodes), tuple(self.outputs),
            frozenset(self.output_buffers), self.fallbacks, tuple(self.checks),
            dict(self.graph.symbols), tuple(self.graph.guards), mutated_inputs(self),
            dict(self.padded_outputs))

    def placeholder(self, node: Node) -> None:
        name = f"arg{len(self.inputs)}"
        self.inputs.append(name)
        self._bind_tensor(node, name, "input")

    def get_attr(self, node: Node) -> None:
        name = f"const{len(self.constants)}"
        self.constants[name] = node.target
        self._bind_tensor(node, name, "constant")

    constant = get_attr

    def _bind_tensor(self, node: Node, name: str, kind: str) -> None:
        meta = node.meta
        if self.all_extern or not isinstance(meta, TensorMeta):
            self.values[node.name] = ScalarValue(name)
            return
        assert isinstance(meta, TensorMeta)
        sizes, strides, offset = meta_layout(meta)
        self.buffers[name] = BufferInfo(name, meta.dtype, sizes, strides, kind, offset,
                                        is_host_scalar(meta, self._traced))
        self.layout.note_buffer(name, sizes, strides)  # a saved channels-last tensor
        self.values[node.name] = Stored(name, meta.dtype, sizes, strides)

    def call(self, node: Node) -> None:
        rule = LOWERINGS.get(node.target)
        new = _plain_symbols(node.meta) - self._sized  # unbacked symbols it defines
        self._sized |= new
        if self.all_extern:
            self.values[node.name] = self.extern(node, fallback=True, reason=self.eager_reason)
            return
        if node.target in EXTERN_OPS:
            self.values[node.name] = self._extern_op(node)
            return
        if rule is None and is_custom_operator(node.target):
            self.values[node.name] = lower_custom_call(self, node)
            return
        if rule is None:
            self.values[node.name] = self.extern(node, fallback=True, reason="no lowering")
            return
        if new:  # e.g. x[:u0], a size u1 <= u0: the wrapper reads it off the result
            reason = f"its result defines the data-dependent size {', '.join(sorted(new))}"
            self.values[node.name] = self.extern(node, fallback=True, reason=reason)
            return
        other = other_device(self._by_name, node, self._traced)
        if other is not None and not host_scalar_node(self._by_name, node, self._traced):
            # torch.zeros(k) in a cuda program: a cpu tensor
            self.values[node.name] = self.extern(
                node, fallback=True, reason=f"a {other} tensor in a {self.device.type} graph")
            return
        host = other is not None and is_host_scalar(node.meta, self._traced)
        mark = len(self.nodes)
        realized = set(self._realized)
        self._current = node.name
        try:
            args = tuple(self._arg(a) for a in node.args)
            kwargs = {k: self._arg(v) for k, v in node.kwargs.items()}
            value = rule(self, node, *args, **kwargs)
            if host:  # a cpu scalar: no buffer of the graph's device (host_scalars.py)
                value = self.host_scalars.result(node, value, len(self.nodes) > mark)
            elif isinstance(value := self._bounded(value), Lazy) and (
                    self.uses.broadcast_costly(node.name, value)
                    or self._shared_and_wide(node.name, value)):
                value = self.realize(value)
            self.values[node.name] = value
        except NotLowerable as e:
            self._roll_back(mark, realized)
            self.values[node.name] = self.extern(node, fallback=True, reason=str(e))
        except LoweringError:
            raise
        except Exception as e:  # NOTE: a bug in the rule, never a fallback
            if self.symbolic and _symbolic_failure(e):
                self._roll_back(mark, realized)
                self.values[node.name] = self.extern(
                    node, fallback=True, reason=f"symbolic sizes: {e}")
                return
            raise LoweringError(f"the lowering rule of {node.target} failed on "
                                f"%{node.name} ({e!r})") from e

    def _roll_back(self, mark: int, realized: set[int]) -> None:
        """Forget the nodes a rule emitted before it gave up, and the values it realized
        (later consumers must not read a buffer no node computes)."""
        del self.nodes[mark:]
        for key in set(self._realized) - realized:
            del self._realized[key]

    def output(self, node: Node) -> None:
        outs = node.args[0] if isinstance(node.args[0], tuple) else (node.args[0],)
        for i, a in enumerate(outs):
            self.outputs.append(self._output_expr(a, i))
        self.host_scalars.write_outputs()  # a cpu step counter's new value, in place

    # -- values -------------------------------------------------------------------------
    def _arg(self, a: Argument) -> Any:
        if isinstance(a, ValueRef):
            v = self.values[a.node]
            v = v[a.index] if a.index is not None else v
            if isinstance(v, Lazy) and id(v) in self._realized and self._reads_full_size(v):
                # already in a buffer: later consumers read it instead of recomputing it
                # (same memory traffic, and the buffers it reads may then go unstored)
                return self._realized[id(v)][1]
            return v
        if isinstance(a, tuple):
            return tuple(self._arg(x) for x in a)
        if isinstance(a, SymExpr):
            return from_ir(a.expr)  # a symbolic int: a sympy expression over the sizes
        return a

    read_arg = _arg  # a node argument's lowered value, for helpers (host_scalars.py)

    def traced_meta(self, arg: Any) -> TensorMeta | None:
        """The meta the program traced for ``arg`` (a node argument), if a tensor's."""
        if not isinstance(arg, ValueRef):
            return None
        meta = self.graph.node(arg.node).meta
        if isinstance(meta, tuple):
            meta = meta[arg.index] if arg.index is not None else None
        return meta if isinstance(meta, TensorMeta) else None

    def _loads(self, value: Lazy) -> tuple[list[tuple[str, IndexExpr]], set[str]]:
        """What computing ``value`` loads at :func:`probe_index`: the (buffer, index)
        pairs and the set of buffers (memoized per Lazy)."""
        found = self._loads_of.get(id(value))
        if found is None:
            loads = probe(value).external_loads
            found = (value, loads, {buf for buf, _ in loads})
            self._loads_of[id(value)] = found  # holds value: its id stays unique
        return found[1], found[2]

    def external_loads(self, value: Lazy) -> list[tuple[str, IndexExpr]]:
        """The (buffer, index) pairs computing ``value`` loads (at :func:`probe_index`)."""
        return self._loads(value)[0]

    def loaded_buffers(self, value: Lazy) -> set[str]:
        """The buffers computing ``value`` loads."""
        return self._loads(value)[1]

    def is_realized(self, value: Lazy) -> bool:
        """Whether ``value`` was computed into a buffer later ``realize`` calls reuse."""
        return id(value) in self._realized

    def _reads_full_size(self, value: Lazy) -> bool:
        """Whether computing ``value`` loads a buffer at least as large as it (not only
        broadcasts of smaller ones, which are cheaper to recompute than to re-read)."""
        n = hint(numel(value.sizes))  # symbolic sizes: compared at their hints
        return any(buf in self.buffers and hint(numel(self.buffers[buf].sizes)) >= n
                   for buf in self.loaded_buffers(value))

    def _shared_and_wide(self, name: str, value: Lazy) -> bool:
        """Whether node ``name``'s ``value`` is stored once for its consumers (inlining.py):
        stored anyway, or it has several and loads ``SHARED_STORE_LOADS`` of its size."""
        anyway = self.uses.stored_anyway(name)
        if anyway or self.uses.count(name) < 2:
            return anyway
        n = hint(numel(value.sizes))
        wide = [b for b in self.loaded_buffers(value)
                if b in self.buffers and hint(numel(self.buffers[b].sizes)) >= n]
        return len(wide) >= SHARED_STORE_LOADS

    def _bounded(self, value: Any) -> Any:
        """``value`` with every Lazy result whose element function has grown too large
        realized into a buffer (see :func:`too_large`)."""
        if isinstance(value, tuple):
            return tuple(self._bounded(v) for v in value)
        if isinstance(value, Lazy) and too_large(value):
            return self.realize(value)
        return value

    def realize(self, value: Value, strides: tuple[int, ...] | None = None,
                origin: str = "", reuse: bool | None = None) -> Stored:
        """``value`` in a buffer (a kernel computes a Lazy; a Stored is returned as is).

        ``strides`` picks the layout (default: :meth:`.LayoutState.default_strides`). A
        dense permuted layout is computed in storage order (see :mod:`.layout`). ``reuse``: later plain
        ``realize(value)`` calls return this buffer (default: only for row-major), and so do
        later calls asking for its layout unless they pass ``reuse=False`` (a buffer the
        caller will write).
        """
        if isinstance(value, Stored):
            return value
        if isinstance(value, ScalarValue):
            raise NotLowerable("a run-time value where a tensor buffer is needed")
        if self.host_scalars.is_host(value):  # a cpu tensor: computed on the host
            return self.host_scalars.on_host(value)
        cached = self._realized.get(id(value))
        if cached is not None and (strides is None or (
                reuse is not False and same_layout(value.sizes, cached[1].strides, strides))):
            # NOTE: also for explicit strides that are the stored layout: a value both an
            # extern op and the graph's outputs read (a KV cache's torch.cat) is computed
            # once, not once per reader; reuse=False asks for a buffer of one's own
            return cached[1]
        if numel(value.sizes) == 0:  # nothing to compute: an allocation, not a kernel
            sizes_arg = ListArg(tuple(self.extern_arg(s) for s in value.sizes))
            return Stored(self.extern_step(
                "aten::empty.memory_format", [sizes_arg],
                {"dtype": constant_arg(value.dtype), "device": constant_arg(self.device)},
                value.dtype, value.sizes, origin or self._current, "an empty tensor"),
                value.dtype, value.sizes, contiguous_strides(value.sizes))
        name = self.fresh()
        # NOTE: an extern op's pass realizing a value takes the last rule's node as origin
        origin = origin or self._current
        origins = (origin,) if origin else ()
        sizes = value.sizes
        if strides is None:
            strides = self.layout.default_strides(sizes, lambda: self.loaded_buffers(value))
            reuse = True if reuse is None else reuse
        st = strides
        order = storage_order(sizes, st)
        if order is not None and not same_layout(sizes, st, contiguous_strides(sizes)):
            # loops in storage order: the buffer is row-major over the permuted sizes
            stored_sizes = tuple(sizes[d] for d in order)
            inverse = tuple(order.index(d) for d in range(len(sizes)))
            fn = value.fn

            def permuted(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
                return fn(b, tuple(index[p] for p in inverse))

            flat = contiguous_strides(stored_sizes)
            st = tuple(flat[inverse[d]] for d in range(len(sizes)))
            self.nodes.append(PointwiseBuffer(name, value.dtype, stored_sizes, permuted,
                                              origins))
            self.buffers[name] = BufferInfo(name, value.dtype, stored_sizes, flat, "computed")
        else:
            self.nodes.append(PointwiseBuffer(name, value.dtype, sizes, value.fn, origins, st))
            self.buffers[name] = BufferInfo(name, value.dtype, sizes, st, "computed")
        stored = Stored(name, value.dtype, sizes, st)
        self.layout.note_buffer(name, sizes, st)
        if reuse:
            self._realized[id(value)] = (value, stored)  # holds value: its id stays unique
            for base, view in reshaped_bases(self, value, stored):  # views of this buffer
                self._realized[id(base)] = (base, view)
        return stored

    def reduction(self, node: Node, op: str, fn: ElementFn, full_sizes: Sequence[int],
                  dims: Sequence[int], keepdim: bool, dtype: torch.dtype) -> Stored:
        """A buffer holding ``op`` over ``dims`` of ``fn`` (see ReductionBuffer)."""
        name = self.fresh()
        r = ReductionBuffer(name, dtype, op, tuple(full_sizes), tuple(dims), keepdim, fn,
                            (node.name,))
        self.nodes.append(r)
        self.buffers[name] = BufferInfo(name, dtype, r.sizes, r.strides, "computed")
        return Stored(name, dtype, r.sizes, r.strides)

    def scatter(self, node: Node, init: Stored | Lazy, sizes: Sequence[int],
                fn: PositionFn, accumulate: bool) -> Stored:
        """``node``'s result: a copy of ``init`` in a new buffer (laid out like eager's
        result), then, for every index ``i`` over ``sizes`` with ``(position, value,
        mask) = fn(builder, i)``, ``result[position] = value`` (``+=`` with
        ``accumulate``) where ``mask`` holds (see :class:`ScatterBuffer`)."""
        meta = node.meta
        assert isinstance(meta, TensorMeta)
        dtype = meta.dtype
        meta_sizes, strides, _ = meta_layout(meta)
        if not is_dense(init.sizes, strides) or meta_sizes != init.sizes:
            strides = contiguous_strides(init.sizes)

        def copy(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
            return b.cast(init.element(b, index), dtype)

        # NOTE: always a fresh buffer: the scatter writes into it, so it must not be a
        # realized value some other consumer reads
        out = self.realize(Lazy(copy, dtype, init.sizes), strides=strides, reuse=False)
        if numel(sizes) == 0:
            return out

        def target(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> tuple[IndexExpr, str,
                                                                           str | None]:
            position, value, mask = fn(b, index)
            return out.flat_index(position), value, mask

        self.nodes.append(ScatterBuffer(out.buffer, dtype, tuple(sizes), target, accumulate,
                                        (node.name,)))
        return out

    def storage_offset_of(self, x: Stored) -> int:
        return self.buffers[x.buffer].storage_offset

    # -- extern calls -------------------------------------------------------------------
    def extern_arg(self, a: Any) -> ExternArg:
        """A lowered value as an extern-call argument (a Lazy is realized first)."""
        if isinstance(a, Lazy):
            a = self.realize(a)
        if isinstance(a, Stored):
            info = self.buffers[a.buffer]
            if (a.sizes, a.strides, a.offset) == (info.sizes, info.strides, 0):
                return TensorArg(a.buffer)
            return TensorArg(a.buffer, (a.sizes, a.strides, a.offset))
        if isinstance(a, ScalarValue):
            return VariableArg(a.name)
        if isinstance(a, tuple):
            return ListArg(tuple(self.extern_arg(x) for x in a))
        if isinstance(a, sympy.Basic):
            return SizeArg(a) if not a.is_Integer else constant_arg(int(a))
        return constant_arg(a)

    def _extern_op(self, node: Node) -> Any:
        """An op lowered to an extern call on purpose: through the lowering passes
        (:data:`~.extern_passes.EXTERN_PASSES`), then emitted."""
        metas = node.meta if isinstance(node.meta, tuple) else (node.meta,)
        call = ExternRequest(node, tuple(self._arg(a) for a in node.args),
                             {k: self._arg(v) for k, v in node.kwargs.items()}, metas)
        mark = len(self.nodes)
        try:
            for _, rewrite in EXTERN_PASSES:
                result = rewrite(self, call)
                if not isinstance(result, ExternRequest):  # the pass emitted the call
                    return result
                call = result
        except TypeError as e:
            if not (self.symbolic and _symbolic_failure(e)):
                raise
            # a pass written for static sizes: the op as traced, without the rewrites
            del self.nodes[mark:]
            return self.extern(node, fallback=False, reason=f"symbolic sizes: {e}")
        return self._emit_extern(call, fallback=False, reason="")

    def extern(self, node: Node, fallback: bool, reason: str = "") -> Any:
        """Emit an extern call to ``node.target``; return its result value(s)."""
        metas = node.meta if isinstance(node.meta, tuple) else (node.meta,)
        call = ExternRequest(node, tuple(self._arg(a) for a in node.args),
                             {k: self._arg(v) for k, v in node.kwargs.items()}, metas)
        call = in_traced_layouts(self, call) if fallback and not self.all_extern else call
        return self._emit_extern(call, fallback, reason)

    def log_fallback(self, origin: str, op: str, reason: str = "") -> None:
        """Log eager op ``op`` run for node(s) ``origin`` (the caller counts it)."""
        tail = f": {reason}" if reason else ""
        log("fallbacks", f"{self.graph_name}:{origin} {op} runs eagerly{tail}")

    def _emit_extern(self, call: ExternRequest, fallback: bool, reason: str) -> Any:
        node = call.node
        if fallback:
            self.fallbacks[node.target] += 1
            self.log_fallback(node.name, str(node.target), reason)
        args = [self.extern_arg(a) for a in call.args]
        kwargs = {k: self.extern_arg(v) for k, v in call.kwargs.items()}
        multi = isinstance(node.meta, tuple)
        base = self.fresh()
        outs: list[str | None] = []
        values: list[Any] = []
        result_meta: list[Any] = []
        binds = tuple((i, m.symbol) for i, m in enumerate(call.metas)
                      if isinstance(m, ScalarMeta) and m.symbol is not None)
        for i, m in enumerate(call.metas):
            name = f"{base}_{i}" if multi else base
            outs.append(name)
            if isinstance(m, TensorMeta) and not self.all_extern:
                sizes, strides, _ = meta_layout(m)
                self.buffers[name] = BufferInfo(name, m.dtype, sizes, strides, "extern",
                                                host=is_host_scalar(m, self._traced))
                self.layout.note_buffer(name, sizes, strides)
                values.append(Stored(name, m.dtype, sizes, strides))
                result_meta.append((m.dtype, sizes, strides))
            elif m is None and multi:
                values.append(None)
                result_meta.append(None)
            else:
                values.append(ScalarValue(name))
                result_meta.append(None)
        self.nodes.append(ExternCall(node.target, args, kwargs, outs, result_meta,
                                     extern_reads(args, kwargs), fallback, multi,
                                     (node.name,), reason, binds))
        return tuple(values) if multi else values[0]

    def extern_step(self, target: str, args: list[ExternArg], kwargs: dict[str, ExternArg],
                    dtype: torch.dtype, sizes: tuple[int, ...], origin: str, note: str) -> str:
        """Append a (non-fallback) extern call of ``target`` on ``args`` whose one result
        is a row-major ``sizes`` tensor; returns the result's variable."""
        name = self.fresh()
        strides = contiguous_strides(sizes)
        self.buffers[name] = BufferInfo(name, dtype, sizes, strides, "extern")
        self.nodes.append(ExternCall(target, args, kwargs, [name], [(dtype, sizes, strides)],
                                     extern_reads(args, kwargs), False, False, (origin,),
                                     note))
        return name

    # -- outputs ------------------------------------------------------------------------
    def _output_expr(self, a: Argument, index: int = -1) -> ExternArg:
        if not isinstance(a, ValueRef):
            return self.extern_arg(a)
        if (written := self.host_scalars.written_output(index, a)) is not None:
            return written
        v = self._arg(a)
        producer = self.graph.node(a.node)
        if isinstance(v, ScalarValue):
            self.output_buffers.add(v.name)
            return self.extern_arg(v)
        if v is None:
            return self.extern_arg(v)
        if isinstance(v, tuple):
            raise NotLowerable("tuple output")
        meta = producer.meta
        if isinstance(meta, tuple) and a.index is not None:
            meta = meta[a.index]
        if isinstance(v, Stored) and producer.op != "placeholder":
            kind = self.buffers[v.buffer].kind
            copy = self.layout.copy_in(v, meta)
            if copy is not None:  # an input saved in the layout its convolution took
                v = copy
            elif kind in ("input", "constant") and not returns_input_in_place(self, index,
                                                                           v.buffer):
                # outputs never alias inputs by accident: a copy, on the value's device
                v = copy_on_own_device(self, a, meta) or Lazy(v.element, v.dtype, v.sizes)
            elif (isinstance(meta, TensorMeta) and meta_layout(meta)[0] == v.sizes
                  and is_dense(v.sizes, meta_layout(meta)[1])
                  and not same_layout(v.sizes, v.strides, meta_layout(meta)[1])):
                # a layout the lowering chose (channels-last): the caller gets eager's
                v = Lazy(v.element, v.dtype, v.sizes)
        if isinstance(v, Lazy) and isinstance(meta, TensorMeta):
            v = eager_view(self, index, a, meta) or v  # (x * 2)[:, ::2]: eager's strides
        if isinstance(v, Lazy) and self.pad_saved and (
                padded := padded_saved_output(self, index, v)) is not None:
            self.padded_outputs[index] = padded.sizes[-1]
            v = padded
        if isinstance(v, Lazy):
            strides = None
            if isinstance(meta, TensorMeta) and meta_layout(meta)[0] == v.sizes:
                st = meta_layout(meta)[1]
                if is_dense(v.sizes, st):
                    strides = st
            v = self.realize(v, strides=strides, origin=producer.name)
        self.output_buffers.add(v.buffer)
        return self.extern_arg(v)


# A scatter's element function: index -> (result position per dim, value, mask or None).
PositionFn = Callable[[BodyBuilder, tuple[IndexExpr, ...]],
                      tuple[tuple[IndexExpr, ...], str, "str | None"]]


def _plain_symbols(*metas: object) -> set[str]:
    """The symbols that tensor results in ``metas`` have as a plain size, and those
    int results bind (``int(u0)``)."""
    found: set[str] = set()
    for meta in metas:
        for m in meta if isinstance(meta, tuple) else (meta,):
            if isinstance(m, ScalarMeta) and m.symbol is not None:
                found.add(m.symbol.strip())
            if isinstance(m, TensorMeta):
                found.update(str(s).strip() for s in m.sizes if symbolic.is_symbol(s))
    return found
