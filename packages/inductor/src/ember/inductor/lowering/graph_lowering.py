"""GraphLowering: one core-functional graph -> loop nodes and extern calls.

Walks the graph's nodes in order with one method per opcode (``placeholder``,
``get_attr``, ``constant``, ``call``, ``output``). A ``call`` goes to its rule in the
lowering table; ops without a rule, and rules that raise :class:`NotLowerable`, become
:class:`~ember.inductor.buffers.ExternCall` s to the eager op (a *fallback*: logged under
``EMBER_LOGS=fallbacks`` and counted). A rule failing with any other exception is a bug:
:class:`LoweringError` with ``strict``, else a fallback with an
``InductorFallbackWarning``.

The result (:attr:`nodes`, :attr:`buffers`, :attr:`outputs`) is what the scheduler
fuses into kernels and what the wrapper codegen turns into Python.
"""

from __future__ import annotations

import collections
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from ember.inductor.buffers import (
    ExternCall,
    PointwiseBuffer,
    ReductionBuffer,
    ScatterBuffer,
    ScheduledNode,
)
from ember.inductor.loop_ir import IndexExpr
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.checks import RuntimeCheck
from ember.inductor.lowering.inlining import SHARED_STORE_LOADS, Uses, too_large
from ember.inductor.lowering.layout import (
    channels_last_convolution,
    channels_last_strides,
    is_channels_last,
    is_dense,
    matmul_operand,
    same_layout,
    storage_order,
)
from ember.inductor.lowering.registry import EXTERN_OPS, LOWERINGS, NotLowerable
from ember.inductor.lowering.values import (
    ElementFn,
    Lazy,
    ScalarValue,
    Stored,
    Value,
    contiguous_strides,
    numel,
    probe,
)
from ember.runtime.ir import Argument, Node, Program, TensorMeta, ValueRef
from ember.runtime.logs import log


@dataclass(frozen=True)
class BufferInfo:
    """A wrapper variable holding a tensor: its layout and where it comes from
    (``input``, ``constant``, ``computed`` by a kernel, ``extern`` result)."""

    name: str
    dtype: torch.dtype
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    kind: str
    storage_offset: int = 0


class LoweringError(Exception):
    """A lowering rule failed with an error other than :class:`NotLowerable` (a bug in
    the rule; raised in strict mode, see :class:`GraphLowering`)."""


def _static(meta: object) -> bool:
    return isinstance(meta, TensorMeta) and all(
        isinstance(s, int) for s in tuple(meta.sizes) + tuple(meta.strides))


class GraphLowering:
    """Lowers graph ``graph_name`` of ``program`` (see module doc)."""

    def __init__(self, program: Program, graph_name: str = "forward",
                 device: torch.device | None = None, eager: bool = False,
                 eager_random: bool = False, strict: bool = False) -> None:
        self.program = program
        # strict: a rule failing other than by NotLowerable raises (see call)
        self.strict = strict
        self.graph = program.graphs[graph_name]
        self.graph_name = graph_name
        self.nodes: list[ScheduledNode] = []
        self.buffers: dict[str, BufferInfo] = {}
        self.values: dict[str, Any] = {}
        self.inputs: list[str] = []
        self.constants: dict[str, str] = {}  # wrapper variable -> Program.tensors key
        self.outputs: list[str] = []
        self.output_buffers: set[str] = set()
        self.fallbacks: collections.Counter[str] = collections.Counter()
        self.checks: list[RuntimeCheck] = []  # run-time checks the kernels record (checks.py)
        self.device = device or self._guess_device()
        # eager: run every op as an extern call (symbolic sizes, or a graph whose
        # generated code failed; see compile.compile_graph)
        self.all_extern = eager or not all(
            _static(m) for n in self.graph.nodes
            for m in (n.meta if isinstance(n.meta, tuple) else (n.meta,))
            if isinstance(m, TensorMeta)
        )
        self.eager_reason = "graph runs eagerly" if eager else "symbolic sizes"
        self._count = 0
        self._realized: dict[int, tuple[Lazy, Stored]] = {}
        self._uses = Uses(self.graph)  # see inlining.py: costly values read broadcast
        self.channels_last_copies: dict[tuple[Any, ...], Stored] = {}
        self._channels_last_buffers: set[str] = set()  # stored channels-last
        self._loads_of: dict[int, tuple[Lazy, list[tuple[str, IndexExpr]], set[str]]] = {}
        # random ops (see rng_seed): run them eagerly on torch's generator instead
        self.eager_random = eager_random
        self._seed: tuple[ExternCall, Stored] | None = None
        self._random_streams = 0

    def _guess_device(self) -> torch.device:
        for n in self.graph.nodes:
            if isinstance(n.meta, TensorMeta):
                return n.meta.device
        return torch.device("cpu")

    def fresh(self, prefix: str = "buf") -> str:
        name = f"{prefix}{self._count}"
        self._count += 1
        return name

    # -- driving ------------------------------------------------------------------------
    def run(self) -> GraphLowering:
        """Lower every node; returns self."""
        for node in self.graph.nodes:
            getattr(self, node.op)(node)
        return self

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
        if self.all_extern or not _static(meta):
            self.values[node.name] = ScalarValue(name)
            return
        assert isinstance(meta, TensorMeta)
        sizes = tuple(int(s) for s in meta.sizes)
        strides = tuple(int(s) for s in meta.strides)
        self.buffers[name] = BufferInfo(name, meta.dtype, sizes, strides, kind,
                                        int(meta.storage_offset))
        self.values[node.name] = Stored(name, meta.dtype, sizes, strides)

    def call(self, node: Node) -> None:
        rule = LOWERINGS.get(node.target)
        if self.all_extern:
            self.values[node.name] = self.extern(node, fallback=True, reason=self.eager_reason)
            return
        if node.target in EXTERN_OPS:
            padded = self._aligned_matmul(node)
            self.values[node.name] = padded if padded is not None else self.extern(
                node, fallback=False)
            return
        if rule is None:
            self.values[node.name] = self.extern(node, fallback=True, reason="no lowering")
            return
        mark = len(self.nodes)
        self._current = node.name
        try:
            args = tuple(self._arg(a) for a in node.args)
            kwargs = {k: self._arg(v) for k, v in node.kwargs.items()}
            value = self._bounded(rule(self, node, *args, **kwargs))
            if isinstance(value, Lazy) and (self._uses.broadcast_costly(node.name, value)
                                            or self._shared_and_wide(node.name, value)):
                value = self.realize(value)
            self.values[node.name] = value
        except NotLowerable as e:
            del self.nodes[mark:]
            self.values[node.name] = self.extern(node, fallback=True, reason=str(e))
        except Exception as e:  # a bug in the rule: raise, or warn and fall back
            del self.nodes[mark:]
            message = f"the lowering rule of {node.target} failed on %{node.name} ({e!r})"
            if self.strict:
                raise LoweringError(message) from e
            from ember.inductor.compile import InductorFallbackWarning

            warnings.warn(f"{message}; it runs eagerly", InductorFallbackWarning, stacklevel=2)
            self.values[node.name] = self.extern(node, fallback=True, reason=message)

    def output(self, node: Node) -> None:
        for a in node.args[0] if isinstance(node.args[0], tuple) else (node.args[0],):
            self.outputs.append(self._output_expr(a))

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
        return a

    def _external_loads(self, value: Lazy) -> tuple[list[tuple[str, IndexExpr]], set[str]]:
        """What computing ``value`` loads at :func:`probe_index`: the (buffer, index)
        pairs and the set of buffers (memoized per Lazy)."""
        found = self._loads_of.get(id(value))
        if found is None:
            loads = probe(value).external_loads
            found = (value, loads, {buf for buf, _ in loads})
            self._loads_of[id(value)] = found  # holds value: its id stays unique
        return found[1], found[2]

    def _loaded_buffers(self, value: Lazy) -> set[str]:
        """The buffers computing ``value`` loads."""
        return self._external_loads(value)[1]

    def _reads_full_size(self, value: Lazy) -> bool:
        """Whether computing ``value`` loads a buffer at least as large as it (not only
        broadcasts of smaller ones, which are cheaper to recompute than to re-read)."""
        n = numel(value.sizes)
        return any(buf in self.buffers and numel(self.buffers[buf].sizes) >= n
                   for buf in self._loaded_buffers(value))

    def _shared_and_wide(self, name: str, value: Lazy) -> bool:
        """Whether node ``name``'s ``value`` has several consumers and loads at least
        ``SHARED_STORE_LOADS`` buffers of its size: stored once, not recomputed by each
        (a residual stream read by a norm and the next residual add; see inlining.py)."""
        if self._uses.count(name) < 2:
            return False
        n = numel(value.sizes)
        wide = [b for b in self._loaded_buffers(value)
                if b in self.buffers and numel(self.buffers[b].sizes) >= n]
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

        ``strides`` picks the layout (default: :meth:`_default_strides`). A dense permuted layout is
        computed in storage order (see :mod:`.layout`). ``reuse``: later plain
        ``realize(value)`` calls return this buffer (default: only for row-major).
        """
        if isinstance(value, Stored):
            return value
        if isinstance(value, ScalarValue):
            raise NotLowerable("a run-time value where a tensor buffer is needed")
        cached = self._realized.get(id(value))
        if cached is not None and strides is None:
            return cached[1]
        if numel(value.sizes) == 0:  # nothing to compute: an allocation, not a kernel
            return Stored(self._extern_step(
                "aten::empty.memory_format", [repr(list(value.sizes))],
                {"dtype": str(value.dtype), "device": self.render(self.device)}, value.dtype,
                value.sizes, origin or getattr(self, "_current", ""), "an empty tensor"),
                value.dtype, value.sizes, contiguous_strides(value.sizes))
        name = self.fresh()
        origin = origin or getattr(self, "_current", "")
        origins = (origin,) if origin else ()
        sizes = value.sizes
        if strides is None:
            strides = self._default_strides(value)
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
        if is_channels_last(sizes, st):
            self._channels_last_buffers.add(name)
        if reuse:
            self._realized[id(value)] = (value, stored)  # holds value: its id stays unique
        return stored

    def _default_strides(self, value: Lazy) -> tuple[int, ...]:
        """Row-major, except a 4-d value computed from a channels-last buffer (a
        convolution's result, or the input stored for one): it is stored channels-last
        too, so the kernels between convolutions never transpose. 4-d tensors that do
        not come from convolutions (attention heads) stay row-major."""
        sizes = value.sizes
        if (len(sizes) == 4 and self._channels_last_buffers
                and self._loaded_buffers(value) & self._channels_last_buffers):
            return channels_last_strides(sizes)
        return contiguous_strides(sizes)

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
        strides = tuple(int(s) for s in meta.strides)
        if not is_dense(init.sizes, strides) or tuple(meta.sizes) != init.sizes:
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
    def render(self, a: Any) -> str:
        """Python source for an extern-call argument."""
        if isinstance(a, Lazy):
            a = self.realize(a)
        if isinstance(a, Stored):
            info = self.buffers[a.buffer]
            if (a.sizes, a.strides, a.offset) == (info.sizes, info.strides, 0):
                return a.buffer
            return f"_view({a.buffer}, {a.sizes!r}, {a.strides!r}, {a.offset})"
        if isinstance(a, ScalarValue):
            return a.name
        if isinstance(a, tuple):
            inner = ", ".join(self.render(x) for x in a)
            return f"[{inner}]"
        if isinstance(a, torch.dtype):
            return str(a)
        if isinstance(a, torch.device):
            return f"torch.device({str(a)!r})"
        if isinstance(a, torch.memory_format):
            return str(a)
        if isinstance(a, torch.layout):
            return str(a)
        if isinstance(a, float) and not math.isfinite(a):
            return f"float({str(a)!r})"
        return repr(a)

    def extern(self, node: Node, fallback: bool, reason: str = "") -> Any:
        """Emit an extern call to ``node.target`` and return its result value(s)."""
        if fallback:
            self.fallbacks[node.target] += 1
            log("fallbacks", f"{self.graph_name}:{node.name} {node.target} runs eagerly"
                             f"{': ' + reason if reason else ''}")
        arg_values = [self._arg(a) for a in node.args]
        metas = node.meta if isinstance(node.meta, tuple) else (node.meta,)
        if node.target == "aten::convolution.default" and not fallback:
            metas = channels_last_convolution(self, arg_values, metas)
        if node.target in _MATMULS and not fallback:
            arg_values = [matmul_operand(self, a) for a in arg_values]
        args = [self.render(a) for a in arg_values]
        kwargs = {k: self.render(self._arg(v)) for k, v in node.kwargs.items()}
        multi = isinstance(node.meta, tuple)
        base = self.fresh()
        outs: list[str | None] = []
        values: list[Any] = []
        result_meta: list[Any] = []
        for i, m in enumerate(metas):
            name = f"{base}_{i}" if multi else base
            outs.append(name)
            if isinstance(m, TensorMeta) and _static(m) and not self.all_extern:
                sizes = tuple(int(s) for s in m.sizes)
                strides = tuple(int(s) for s in m.strides)
                self.buffers[name] = BufferInfo(name, m.dtype, sizes, strides, "extern")
                if is_channels_last(sizes, strides):
                    self._channels_last_buffers.add(name)
                values.append(Stored(name, m.dtype, sizes, strides))
                result_meta.append((m.dtype, sizes, strides))
            elif m is None and multi:
                values.append(None)
                result_meta.append(None)
            else:
                values.append(ScalarValue(name))
                result_meta.append(None)
        self.nodes.append(ExternCall(node.target, args, kwargs, outs, result_meta,
                                     _buffer_reads(args, kwargs, self.buffers), fallback,
                                     multi, (node.name,), reason))
        return tuple(values) if multi else values[0]

    def _aligned_matmul(self, node: Node) -> Stored | None:
        """A matmul whose result rows are not a multiple of 16 bytes (GPT-2's LM head:
        50257 columns) makes cuBLAS fall back to unaligned kernels, 7x slower on the
        H200. Such a matmul runs on a right operand (and bias) zero-padded to an aligned
        width, and the result is a view of the first ``N`` columns. None when the
        matmul is aligned, small, or not on a device in ``PAD_MATMUL_DEVICES``."""
        meta = node.meta
        if (node.target not in _PADDABLE_MATMULS or self.device.type not in PAD_MATMUL_DEVICES
                or not isinstance(meta, TensorMeta) or not _static(meta)
                or not meta.dtype.is_floating_point):
            return None
        sizes = tuple(int(s) for s in meta.sizes)
        align = max(1, 16 // meta.dtype.itemsize)
        n = sizes[-1]
        if n % align == 0 or numel(sizes) < PAD_MATMUL_MIN_NUMEL:
            return None
        padded_n = -(-n // align) * align
        args = [self._arg(a) for a in node.args]
        count = 3 if node.target == "aten::addmm.default" else 2  # (bias,) a, b
        *bias, a, b = args[:count]
        if not all(isinstance(v, (Stored, Lazy)) for v in (a, b, *bias)):
            return None

        def pad(v: Stored | Lazy) -> str:
            return self._extern_step(
                "aten::constant_pad_nd.default",
                [self.render(v), f"[0, {padded_n - v.sizes[-1]}]", "0.0"], {}, meta.dtype,
                (*v.sizes[:-1], padded_n), node.name,
                f"pads {v.sizes[-1]} columns to {padded_n} for an aligned matmul")

        operands = [pad(b_) if b_.sizes and b_.sizes[-1] == n else self.render(b_)
                    for b_ in bias] + [self.render(a), pad(b)]
        rest = [self.render(x) for x in args[count:]]
        kwargs = {k: self.render(self._arg(v)) for k, v in node.kwargs.items()}
        padded_sizes = (*sizes[:-1], padded_n)
        out = self._extern_step(node.target, operands + rest, kwargs, meta.dtype, padded_sizes,
                                node.name,
                                f"on {padded_n} columns; the result is a view of the first {n}")
        return Stored(out, meta.dtype, sizes, contiguous_strides(padded_sizes))

    def _extern_step(self, target: str, args: list[str], kwargs: dict[str, str],
                     dtype: torch.dtype, sizes: tuple[int, ...], origin: str, note: str) -> str:
        """Append a (non-fallback) extern call of ``target`` on rendered ``args`` whose
        one result is a row-major ``sizes`` tensor; returns the result's variable."""
        name = self.fresh()
        strides = contiguous_strides(sizes)
        self.buffers[name] = BufferInfo(name, dtype, sizes, strides, "extern")
        self.nodes.append(ExternCall(target, args, kwargs, [name], [(dtype, sizes, strides)],
                                     _buffer_reads(args, kwargs, self.buffers), False, False,
                                     (origin,), note))
        return name

    # -- random numbers -------------------------------------------------------------------
    def rng_seed(self) -> Stored:
        """The 0-d int64 seed of this graph's random ops (see ``lowering/random.py``).

        The first call appends an extern step that draws it from torch's default
        generator of the graph's device, ``randint(0, RNG_SEED_BOUND, [])``, so that
        ``torch.manual_seed`` makes a call reproducible and consecutive calls differ;
        later calls return the same value (one draw per graph and call).
        """
        if self._seed is not None and any(n is self._seed[0] for n in self.nodes):
            return self._seed[1]
        # NOTE: a rule that raised after drawing the seed had its nodes removed, the
        # seed step with them (see ``call``): then it is drawn again here.
        name = self._extern_step(
            "aten::randint.low", ["0", str(RNG_SEED_BOUND), "[]"],
            {"dtype": "torch.int64", "device": self.render(self.device)}, torch.int64, (),
            getattr(self, "_current", ""), "the seed of the graph's random ops")
        step = self.nodes[-1]
        assert isinstance(step, ExternCall)
        self._seed = (step, Stored(name, torch.int64, (), ()))
        return self._seed[1]

    def random_stream(self) -> int:
        """A new ordinal ``k`` for one random op: it draws with key ``seed + k``, so two
        random ops of a graph never share values."""
        k = self._random_streams
        self._random_streams += 1
        return k

    # -- outputs ------------------------------------------------------------------------
    def _output_expr(self, a: Argument) -> str:
        if not isinstance(a, ValueRef):
            return self.render(a)
        v = self._arg(a)
        producer = self.graph.node(a.node)
        if isinstance(v, ScalarValue):
            self.output_buffers.add(v.name)
            return self.render(v)
        if v is None:
            return self.render(v)
        if isinstance(v, tuple):
            raise NotLowerable("tuple output")
        meta = producer.meta
        if isinstance(meta, tuple) and a.index is not None:
            meta = meta[a.index]
        if isinstance(v, Stored) and producer.op != "placeholder":
            kind = self.buffers[v.buffer].kind
            if kind in ("input", "constant"):
                v = Lazy(v.element, v.dtype, v.sizes)  # outputs never alias inputs by accident
            elif (isinstance(meta, TensorMeta) and _static(meta)
                  and tuple(meta.sizes) == v.sizes
                  and is_dense(v.sizes, tuple(int(s) for s in meta.strides))
                  and not same_layout(v.sizes, v.strides, tuple(int(s) for s in meta.strides))):
                # a layout the lowering chose (channels-last): the caller gets eager's
                v = Lazy(v.element, v.dtype, v.sizes)
        if isinstance(v, Lazy):
            strides = None
            if isinstance(meta, TensorMeta) and _static(meta) and tuple(meta.sizes) == v.sizes:
                st = tuple(int(s) for s in meta.strides)
                if is_dense(v.sizes, st):
                    strides = st
            v = self.realize(v, strides=strides, origin=producer.name)
        self.output_buffers.add(v.buffer)
        return self.render(v)


# A scatter's element function: index -> (result position per dim, value, mask or None).
PositionFn = Callable[[BodyBuilder, tuple[IndexExpr, ...]],
                      tuple[tuple[IndexExpr, ...], str, "str | None"]]

# Seeds of random ops are drawn from [0, RNG_SEED_BOUND): 62 bits, so that the seeds of
# different calls practically never collide, and seed + k (one per random op) stays
# below 2**63.
RNG_SEED_BOUND = 2**62

_MATMULS = ("aten::mm.default", "aten::addmm.default", "aten::bmm.default",
             "aten::baddbmm.default")

# Matmuls padded to aligned result rows (see GraphLowering._aligned_matmul): devices, and
# the least number of result elements worth a padded copy of the right operand.
PAD_MATMUL_DEVICES = {"cuda"}
PAD_MATMUL_MIN_NUMEL = 1 << 20
_PADDABLE_MATMULS = ("aten::mm.default", "aten::addmm.default", "aten::bmm.default")

def _buffer_reads(args: list[str], kwargs: dict[str, str],
                  buffers: dict[str, BufferInfo]) -> list[str]:
    import re

    text = " ".join(args) + " " + " ".join(kwargs.values())
    names = re.findall(r"\b(?:arg|const|buf)\d+(?:_\d+)?\b", text)
    return sorted(set(names))
