"""The memory plan of one graph's wrapper, and its report (``EMBER_LOGS=memory``).

The wrapper allocates each intermediate buffer where a step first writes it and frees it
after the step that last reads it. This module decides, before the wrapper is written:

- **in place**: a pointwise kernel (or a one-pass reduction: its element-wise stores)
  whose stored buffer has the byte size and dtype of a buffer it reads for the last
  time, only at the very index it stores (``out[i] = f(a[i])``, every load before the
  store, every loop variable in the index), writes into that buffer's memory
  (``buf3 = buf1; del buf1  # written in place of buf1's memory``);
- **reuse**: a new buffer takes the memory of a dead one of the same dtype and byte size
  (any shape: ``as_strided`` gives it its layout); on a GPU only where holding the dead buffer
  until then does not raise the graph's peak (on the CPU always: a fresh allocation costs
  page faults there); an extern matmul on the CPU writes through ``out=`` into dead memory
  of its exact layout;
- **free**: every other dead intermediate is ``del``-ed after its last use, so the
  allocator can hand its memory to any size. So is a graph input the wrapper no longer
  reads (not returned, not written): the wrapper empties the list it is called with,
  and a caller that hands its list over (a backward graph's saved activations,
  ``ember.runtime.autograd``) lets each input's memory go at that point; where the
  caller keeps its own references the ``del`` frees nothing.

Bytes are counted at the size hints (``loop_ir.symbolic_index.hint``); inputs and constants
are the caller's and count as zero. :class:`MemoryReport` is the live-bytes table: per step,
what it allocates, what is freed after it and what is live during it; the peak, and the
*ideal* (every buffer freed after its last use, nothing reused, nothing in place: the
largest set of values that must exist at once).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field

import sympy
import torch
from ember.inductor.buffers import ExternCall
from ember.inductor.codegen.index_match import same_index
from ember.inductor.codegen.input_writes import plan_input_writes
from ember.inductor.codegen.registry import in_one_part
from ember.inductor.loop_ir import Kernel, Load, Size, Store, reduction_phases
from ember.inductor.loop_ir.across import has_across
from ember.inductor.loop_ir.body import stmt_inputs
from ember.inductor.loop_ir.index import free_vars
from ember.inductor.loop_ir.symbolic_index import hint
from ember.inductor.lowering.checks import ERROR_BUFFER
from ember.inductor.lowering.lowered_graph import BufferInfo, LoweredGraph
from ember.inductor.scheduler import KernelStep, Step, read_buffers, written_buffers
from ember.runtime.custom_ops import is_custom_operator

#: extern matmuls the wrapper may run with ``out=`` (CPU: ``codegen/wrapper.OUT_VARIANTS``)
OUT_VARIANT_OPS = frozenset({
    "aten::mm.default", "aten::addmm.default", "aten::bmm.default", "aten::baddbmm.default",
})
#: extern ops whose result is a fresh tensor another buffer may take over once it is dead
#: (a fallback may return a view of its input; a custom op's result is the op's own)
FRESH_RESULTS = OUT_VARIANT_OPS | {"aten::convolution.default"}


@dataclass(frozen=True)
class Allocation:
    """Buffer ``name`` comes into being at a step: fresh (``takes`` is None) or in the
    memory of the dead buffer ``takes`` (``in_place``: one the same step reads)."""

    name: str
    takes: str | None = None
    in_place: bool = False


@dataclass
class StepPlan:
    """What the wrapper does around one step: the allocations before it (a kernel's
    stored buffers, or an extern's result taking dead memory through ``out=``), and
    the buffers it ``del``-s after it."""

    allocations: list[Allocation] = field(default_factory=list)
    frees: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class StepMemory:
    """One row of the report: bytes a step allocates, bytes freed after it, and the
    bytes live while it runs."""

    step: int
    what: str
    allocated: int
    freed: int
    live: int


@dataclass(frozen=True)
class MemoryReport:
    """Live bytes of one graph's wrapper step by step (see the module doc)."""

    graph: str
    device: str
    steps: tuple[StepMemory, ...]
    peak: int
    ideal: int
    #: one line per mutated graph input: written in place, or copied back and why
    #: (``codegen/input_writes.py``)
    inputs: tuple[str, ...] = ()
    inputs_in_place: int = 0
    #: graph inputs the wrapper drops after their last read, and their bytes: memory
    #: freed there when the caller handed its list over (a backward's saved values, the
    #: one case ``format`` prints)
    released: int = 0
    released_bytes: int = 0

    @property
    def peak_step(self) -> int | None:
        """The first step at the peak (None for a graph without steps)."""
        return next((s.step for s in self.steps if s.live == self.peak), None)

    def to_json(self) -> dict[str, int]:
        """``{"peak_bytes": ..., "ideal_bytes": ...}`` (the artifact's metadata), and for
        a graph that mutates inputs ``"inputs_in_place"`` / ``"inputs_copied_back"``:
        how many are written in place (the wrapper returns the input itself) or copied
        back by the runtime."""
        out = {"peak_bytes": self.peak, "ideal_bytes": self.ideal}
        if self.inputs:
            out["inputs_in_place"] = self.inputs_in_place
            out["inputs_copied_back"] = len(self.inputs) - self.inputs_in_place
        return out

    def format(self) -> str:
        """The table ``EMBER_LOGS=memory`` prints."""
        at = self.peak_step
        head = (f"memory of graph {self.graph!r} ({self.device}): peak {format_bytes(self.peak)}"
                + (f" at step {at}" if at is not None else "")
                + f", ideal {format_bytes(self.ideal)} (bytes at the size hints; inputs "
                  "and constants not counted)")
        rows = [("step", "what", "allocated", "freed", "live")]
        rows += [(str(s.step), s.what, format_bytes(s.allocated), format_bytes(s.freed),
                  format_bytes(s.live)) for s in self.steps]
        widths = [max(len(r[c]) for r in rows) for c in range(5)]
        lines = [head, *(f"  {line}" for line in self.inputs)]
        if self.released and self.graph == "backward":  # the runtime hands its list over
            lines.append(f"  {self.released} saved value{'s' if self.released != 1 else ''} "
                         f"({format_bytes(self.released_bytes)}) released after their last read "
                         "(an activation's memory is freed there)")
        for r in rows:
            lines.append("  " + "  ".join(
                r[c].ljust(widths[c]) if c == 1 else r[c].rjust(widths[c]) for c in range(5)
            ).rstrip())
        return "\n".join(lines)


def format_bytes(n: int) -> str:
    """``0``, ``512 B``, ``4.0 KiB``, ``1.50 MiB``, ``2.00 GiB``."""
    if n == 0:
        return "0"
    if n < 1024:
        return f"{n} B"
    if n < 2**20:
        return f"{n / 1024:.1f} KiB"
    if n < 2**30:
        return f"{n / 2**20:.2f} MiB"
    return f"{n / 2**30:.2f} GiB"


@functools.lru_cache(maxsize=4096)
def storage_extent(info: BufferInfo) -> Size:
    """Elements from the first to one past the last addressed by ``info``'s layout."""
    if any(s == 0 for s in info.sizes):
        return 0
    extent: Size = 1
    for size, stride in zip(info.sizes, info.strides):
        extent = extent + (size - 1) * stride
    return sympy.expand(extent) if isinstance(extent, sympy.Expr) else extent


def buffer_bytes(info: BufferInfo | None) -> int:
    """Bytes of a buffer's storage at the size hints (0 for a non-tensor value)."""
    extent = 0 if info is None else storage_extent(info)
    return 0 if info is None or extent == 0 else hint(extent) * info.dtype.itemsize


def _key(info: BufferInfo) -> tuple[torch.dtype, Size]:
    return (info.dtype, storage_extent(info))


def describe_step(step: Step) -> str:
    """``kernel3`` or ``extern aten::addmm.default`` (``fallback ...``)."""
    if isinstance(step, KernelStep):
        return step.kernel.name
    return f"{'fallback' if step.is_fallback else 'extern'} {step.target}"


class MemoryPlanner:
    """Plans one graph's allocations, reuses and frees (see the module doc)."""

    def __init__(self, lowered: LoweredGraph, steps: list[Step], device: str) -> None:
        self.lowered = lowered
        self.steps = steps
        self.device = device
        # NOTE: a fresh CPU allocation of a large buffer costs page faults (glibc hands
        # freed memory back to the OS), one from CUDA's caching allocator next to nothing:
        # on the CPU every reuse is taken, elsewhere only one that does not raise the peak
        self.guard_peak = device != "cpu"
        self.last = self._last_uses()
        self.first = self._first_writes()
        # NOTE: a fallback op may return a view of its input (aten::view, ...), so the
        # memory of a buffer a fallback read is never handed to another buffer.
        self.extern_read = {n for s in steps if isinstance(s, ExternCall) and s.is_fallback
                            for n in s.reads}
        self.fresh_externs = {out for s in steps if isinstance(s, ExternCall)
                              and s.target in FRESH_RESULTS and not s.is_fallback
                              and not is_custom_operator(s.target)
                              for out in s.outputs if out is not None}
        # mutated graph inputs whose new value a kernel stores in their memory
        self.input_writes = plan_input_writes(lowered, steps, self.last, self.extern_read,
                                               device)
        self.into_inputs = {w.buffer: w.input for w in self.input_writes
                            if w.reason is None and w.buffer and w.buffer != w.input}
        self.released_inputs = self._released_inputs()

    def _released_inputs(self) -> dict[str, int]:
        """Graph inputs the wrapper drops after their last read: input -> that step.
        Returned inputs, inputs a step writes and mutated inputs (the runtime copies
        their new value back, or a kernel stores it in their memory) are kept."""
        low = self.lowered
        kept = set(low.output_buffers) | {m.input for m in low.mutated_inputs}
        return {inp.name: self.last[inp.name] for inp in low.inputs
                if inp.name in self.last and inp.name not in kept
                and inp.name not in self.first}

    def _last_uses(self) -> dict[str, int]:
        last: dict[str, int] = {}
        for i, step in enumerate(self.steps):
            for name in written_buffers(step):
                last[name] = i  # a scatter writes again into a buffer stored earlier
            for name in read_buffers(step):
                last[name] = i
        return last

    def _first_writes(self) -> dict[str, int]:
        first: dict[str, int] = {}
        for i, step in enumerate(self.steps):
            for name in written_buffers(step):
                first.setdefault(name, i)
        return first

    def freeable(self, name: str) -> bool:
        """Whether the wrapper may drop its reference once ``name`` is dead."""
        low = self.lowered
        return (name not in low.output_buffers and name != ERROR_BUFFER
                and not name.startswith(("arg", "const")))

    def donor(self, name: str) -> bool:
        """Whether a dead ``name``'s memory may be handed to another buffer."""
        info = self.lowered.buffers.get(name)
        if info is None or name in self.extern_read or not self.freeable(name):
            return False
        if info.host:  # a cpu scalar of a cuda graph: host memory (lowering/host_scalars.py)
            return False
        return info.kind == "computed" or (info.kind == "extern" and name in self.fresh_externs)

    def bytes_of(self, name: str) -> int:
        """Bytes ``name`` allocates (inputs and constants: 0, the caller's)."""
        info = self.lowered.buffers.get(name)
        if info is None or info.kind in ("input", "constant", "errors"):
            return 0
        return buffer_bytes(info)

    def _baseline(self) -> list[int]:
        """Live bytes per step with every buffer freed after its last use, no reuse."""
        live = [0] * len(self.steps)
        for name, start in self.first.items():
            end = self.last[name] if self.freeable(name) else len(self.steps) - 1
            for t in range(start, end + 1):
                live[t] += self.bytes_of(name)
        return live

    def _in_place_source(self, step: KernelStep, i: int, name: str,
                         taken: set[str]) -> str | None:
        """A buffer ``step`` reads for the last time, of ``name``'s dtype and byte size,
        at exactly the (unmasked) index it stores ``name`` at: ``name`` may live in it."""
        k = step.kernel
        if k.template is not None:
            return None
        stores = [s for s in k.body if isinstance(s, Store) and s.buffer == name]
        if (len({s.index for s in stores}) != 1 or any(s.mask or s.mode != "store"
                                                       for s in stores)
                or name in k.loaded_buffers()):
            return None
        index = stores[0].index
        # every element stored by one iteration: the index uses every loop variable
        if not {v.name for v in k.ranges + k.reduction_ranges if v.size != 1} <= {
                v.name for v in free_vars(index)} or (k.is_reduction and not _one_pass(k)):
            return None
        first_store = min(j for j, s in enumerate(k.body) if isinstance(s, Store)
                          and s.buffer == name)
        # what every stored value is computed from (the loads it waits for)
        computed_from = set.intersection(*(_reads(k, st.value) for st in stores))
        target = self.lowered.buffers[name]
        stored = set(k.stored_buffers())
        for src in k.loaded_buffers():
            info = self.lowered.buffers.get(src)
            if (src in taken or info is None or self.last.get(src) != i or not self.donor(src)
                    or src in stored or _key(info) != _key(target)
                    or not in_one_part(k, self.device, src, name)):
                continue
            loads = [(j, s) for j, s in enumerate(k.body)
                     if isinstance(s, Load) and s.buffer == src]
            # read before written: a load after the store would see the new value; and
            # each stored value computed from each load: a store that does not wait for
            # the load may be moved before it (C++ declares every pointer __restrict__:
            # a ConvNeXt loss read its log-sum-exp after a LayerNorm statistic was stored
            # over it, NaN)
            if all(same_index(s.index, index) and s.mask is None and j < first_store
                   and s.name in computed_from for j, s in loads):
                return src
        return None

    def plan(self) -> tuple[list[StepPlan], MemoryReport]:
        """Each step's allocations and frees, and the report of the resulting live bytes:
        first the in-place writes (they only lower the live bytes), then reuses that do not
        raise the peak those leave."""
        n = len(self.steps)
        baseline = self._baseline()
        live = list(baseline)  # updated as buffers share memory or are held longer
        in_place: dict[str, str] = {}  # new buffer -> the buffer whose memory it takes
        taken: set[str] = set()
        for name in self.into_inputs:  # in a graph input's memory: never allocated
            for t in range(self.first[name], n):
                live[t] -= self.bytes_of(name)
        for i, step in enumerate(self.steps):
            if not isinstance(step, KernelStep):
                continue
            for name in step.kernel.stored_buffers():
                if self.first.get(name) != i or name in self.into_inputs:
                    continue
                src = self._in_place_source(step, i, name, taken)
                if src is not None:
                    taken.add(src)
                    in_place[name] = src
                    live[i] -= self.bytes_of(name)  # one memory for both during step i
        peak = max(live, default=0)
        plans = [StepPlan() for _ in range(n)]
        pool: dict[tuple[torch.dtype, Size], list[str]] = {}  # dead donors, last one last
        allocated: set[str] = set()
        if ERROR_BUFFER in self.lowered.buffers:
            allocated.add(ERROR_BUFFER)
        released: dict[int, list[str]] = {}
        for name, at in sorted(self.released_inputs.items()):
            released.setdefault(at, []).append(name)
        for i, step in enumerate(self.steps):
            plan = plans[i]
            if isinstance(step, KernelStep):
                for name in step.kernel.stored_buffers():
                    if name in allocated:
                        continue
                    allocated.add(name)
                    if name in self.into_inputs:
                        plan.allocations.append(Allocation(name, self.into_inputs[name], True))
                        continue
                    if name in in_place:
                        plan.allocations.append(Allocation(name, in_place[name], True))
                        continue
                    old = self._take(pool, name, i, live, peak, exact=False)
                    plan.allocations.append(Allocation(name, old))
            elif self.device == "cpu" and step.target in OUT_VARIANT_OPS and not step.multi:
                out = step.outputs[0]
                if out is not None and out in self.lowered.buffers:
                    old = self._take(pool, out, i, live, peak, exact=True)
                    if old is not None:
                        plan.allocations.append(Allocation(out, old))
            for name in sorted(x for x, at in self.last.items() if at == i):
                if not self.freeable(name):
                    continue
                if self.donor(name) and name not in taken:
                    info = self.lowered.buffers[name]
                    pool.setdefault(_key(info), []).append(name)
                elif name not in taken:
                    plan.frees.append(name)
            plan.frees.extend(released.get(i, ()))
        dead_donors = {x for names in pool.values() for x in names}
        for i in range(n):  # donors nobody took are freed where they died
            plans[i].frees.extend(sorted(x for x in dead_donors if self.last[x] == i))
        return plans, self._report(plans, baseline)

    def _take(self, pool: dict[tuple[torch.dtype, Size], list[str]], name: str, i: int,
              live: list[int], peak: int, exact: bool) -> str | None:
        """A dead donor whose memory ``name`` may take at step ``i`` without raising the
        peak (it stays held from its death to here), the most recently dead first."""
        info = self.lowered.buffers[name]
        candidates = pool.get(_key(info), [])
        for old in reversed(candidates):
            other = self.lowered.buffers[old]
            if exact and (other.sizes, other.strides) != (info.sizes, info.strides):
                continue
            size = self.bytes_of(old)
            held = range(self.last[old] + 1, i)
            if self.guard_peak and any(live[t] + size > peak for t in held):
                continue
            for t in held:
                live[t] += size
            candidates.remove(old)
            return old
        return None

    def _report(self, plans: list[StepPlan], baseline: list[int]) -> MemoryReport:
        rows: list[StepMemory] = []
        current = 0
        peak = 0
        for i, (step, plan) in enumerate(zip(self.steps, plans)):
            reused = {a.name for a in plan.allocations if a.takes is not None}
            fresh = [x for x in written_buffers(step)
                     if self.first.get(x) == i and x not in reused]
            allocated = sum(self.bytes_of(x) for x in fresh)
            current += allocated
            peak = max(peak, current)
            freed = sum(self.bytes_of(x) for x in plan.frees)
            what = describe_step(step)
            inplace = [f"{a.name} in {a.takes}" for a in plan.allocations if a.in_place]
            if inplace:
                what += f" ({', '.join(inplace)})"
            rows.append(StepMemory(i, what, allocated, freed, current))
            current -= freed
        return MemoryReport(self.lowered.graph_name, self.device, tuple(rows), peak,
                            max(baseline, default=0),
                            tuple(w.describe(self.steps) for w in self.input_writes),
                            sum(1 for w in self.input_writes if w.reason is None),
                            len(self.released_inputs),
                            sum(buffer_bytes(self.lowered.buffers.get(x))
                                for x in self.released_inputs))


def plan_memory(lowered: LoweredGraph, steps: Iterable[Step], device: str
                ) -> tuple[list[StepPlan], MemoryReport]:
    """The wrapper's memory plan of a lowered, scheduled graph, and its report."""
    return MemoryPlanner(lowered, list(steps), device).plan()


def _reads(kernel: Kernel, value: str) -> set[str]:
    """The names ``value`` is computed from in ``kernel``'s body, itself included."""
    inputs = {st.name: stmt_inputs(st) for st in kernel.body if not isinstance(st, Store)}
    seen, todo = set(), [value]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(inputs.get(name, ()))
    return seen


def _one_pass(kernel: Kernel) -> bool:
    """Whether a reduction kernel visits each point of its iteration space once, in one
    pass over its reduction ranges, on every backend: a buffer it reads there for the last
    time may then take an inner store at the same index (a GELU's gradient written over
    the incoming gradient while a bias gradient sums it). A later pass (a softmax's store
    after its sums) may load the element again, after the store."""
    return not has_across(kernel) and len(reduction_phases(kernel)[1]) == 1

