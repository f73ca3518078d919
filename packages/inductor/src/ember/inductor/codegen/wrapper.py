"""The wrapper: readable Python that runs one compiled graph.

It checks the inputs' layouts, allocates buffers with ``empty_strided``, launches the
kernels, calls the extern ops, frees each intermediate after its last use, and returns the
outputs. Which buffer takes a dead one's memory (in place, or later) and what is freed
where is :mod:`~ember.inductor.codegen.memory_plan`'s plan (``EMBER_LOGS=memory``). It runs in the
namespace built by ``ember.runtime.compiled.wrapper_support``. Extern calls' arguments and
the outputs are :mod:`~ember.inductor.lowering.extern_args` values, rendered here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sympy
import torch
from ember.inductor.buffers import ExternCall
from ember.inductor.codegen.backend import KernelBackend
from ember.inductor.codegen.memory_plan import (
    Allocation,
    MemoryReport,
    StepPlan,
    plan_memory,
)
from ember.inductor.codegen.registry import backend_for
from ember.inductor.codegen.user_kernels import is_user_kernel, user_kernel_comment
from ember.inductor.codegen.wrapper_header import (
    INPUT_STAMP_IMPORT,
    READ_VIEW_LINES,
    allocator_lines,
)
from ember.inductor.codegen.wrapper_text import (
    py_sizes,
    py_strides,
    py_view,
    render_arg,
)
from ember.inductor.loop_ir import Int, Kernel, Size, Store
from ember.inductor.loop_ir.symbolic_index import from_ir
from ember.inductor.lowering.checks import ERROR_BUFFER
from ember.inductor.lowering.devices import traced_device
from ember.inductor.lowering.externs import VENDOR_EXTERNS
from ember.inductor.lowering.lowered_graph import BufferInfo, LoweredGraph
from ember.inductor.lowering.values import contiguous_strides
from ember.inductor.scheduler import KernelStep, Step
from ember.runtime.custom_ops import is_custom_operator
from ember.runtime.ir import UNBOUNDED_LOWER, TensorMeta, symbolic
from ember.runtime.logs import TOPICS, log

# Extern matmuls (CPU) whose result goes into freed memory of the same layout through
# their out= variant when the wrapper has such a buffer: one allocation and free less per
# call each (ATen allocates a fresh result otherwise; on a tiny Llama, 29 matmuls of up to
# 0.7 MB each per call, and glibc returned the memory to the OS between them).
# The public functions, whose Python bindings dispatch in a few microseconds, several
# times faster than calling the OpOverload (torch.ops.aten.mm.out); a result with no
# memory to reuse (and any device's) is their plain call too: torch.addmm(...) costs
# ~9 us a call on CPU where aten.addmm.default(...) costs ~19 us (same schema, same
# positional and keyword arguments).
OUT_VARIANTS = {
    "aten::mm.default": "torch.mm",
    "aten::addmm.default": "torch.addmm",
    "aten::bmm.default": "torch.bmm",
    "aten::baddbmm.default": "torch.baddbmm",
}


STAMP_MIN_INPUTS = 8
"""From this many static-layout inputs the wrapper checks them through the runtime's
input stamp (``ember.runtime.input_stamp.MIN_TENSORS``: below, the inline
tests cost about what the stamp does)."""


def _op_expr(target: str) -> str:
    ns, _, rest = target.partition("::")
    name, _, overload = rest.partition(".")
    base = "aten" if ns == "aten" else f"ops.{ns}"
    return f"{base}.{name}.{overload or 'default'}"


#: views that need no autograd record (an operand a vendor extern only reads, a buffer in
#: a dead buffer's memory) made by ``_read_view``; off: every view through ``as_strided``,
#: as before session 45 (``tools/ab_cpu.py``'s ``ember_views_as_strided``)
READ_VIEWS = True


#: extern ops whose results depend on grad mode, called with it on: the wrapper runs
#: inside autograd's Function (no grad), and mkldnn's RNN layer returns the workspace
#: its backward needs only with grad mode on (the inputs do not require grad: the
#: results do not either)
GRAD_MODE_EXTERNS = frozenset({
    "aten::mkldnn_rnn_layer.default", "aten::_cudnn_rnn.default", "aten::miopen_rnn.default",
})


def _row_major(sizes: Sequence[object], strides: Sequence[object]) -> bool:
    """Whether a result traced with ``sizes`` and ``strides`` is row-major, all of them
    known now: the layout ``OUT_VARIANTS``' public matmuls return (a fresh tensor of
    their operands' dtype), so their results need no layout test after the call."""
    known = [v for v in (*sizes, *strides) if type(v) is int]
    if len(known) != len(sizes) + len(strides):
        return False
    return tuple(known[len(sizes):]) == contiguous_strides(known[:len(sizes)])


def _static_layout(info: BufferInfo) -> bool:
    return all(isinstance(s, int) for s in (*info.sizes, *info.strides))


def _device_test(name: str, device: torch.device) -> str:
    """An inline test that tensor ``name`` is on ``device`` (cheap attribute reads)."""
    if device.type in ("cpu", "cuda", "meta"):
        test = f"{name}.is_{device.type}"
    else:
        test = f"{name}.device.type == {device.type!r}"
    if device.index is not None:
        test += f" and {name}.get_device() == {device.index}"
    return test


def _stride_test(name: str, sizes: Sequence[Size], strides: Sequence[Size],
                 differs: bool = False) -> str:
    """An inline test that tensor ``name`` has ``strides`` (``differs``: that it has
    not), those of size-1 dims left out: no kernel reads them (their index is 0), and a
    tensor with another one there (a view's leading 1: the backward of HF BERT's
    attention gets such inputs on every call) would fail the test on every call, taking
    the slow path, which lays it out alike (``wrapper_support.layout``), and keeping the
    input stamp from learning. Symbolic layouts are compared whole."""
    op = "!=" if differs else "=="
    static = all(isinstance(v, int) for v in (*sizes, *strides))
    if not static or 1 not in sizes:
        return f"{name}.stride() {op} {py_strides(tuple(sizes), tuple(strides))}"
    kept = [i for i, n in enumerate(sizes) if n != 1]
    if not kept:
        return "False" if differs else "True"
    if kept == list(range(kept[0], kept[-1] + 1)):  # one run of dims: a slice
        part = f"[{kept[0] or ''}:{'' if kept[-1] == len(sizes) - 1 else kept[-1] + 1}]"
        return f"{name}.stride(){part} {op} {tuple(strides[i] for i in kept)!r}"
    first, *rest = kept
    same = " and ".join([f"(_s := {name}.stride())[{first}] == {strides[first]}"]
                        + [f"_s[{i}] == {strides[i]}" for i in rest])
    return f"not ({same})" if differs else same


class WrapperWriter:
    """Writes the wrapper of one lowered, scheduled graph."""

    def __init__(self, lowered: LoweredGraph, steps: list[Step], device: str,
                 runs: dict[str, str] | None = None) -> None:
        self.lowered = lowered
        self.steps = steps
        self.device = device
        # kernel name -> the identical kernel whose code it calls (codegen/dedupe.py)
        self.runs = dict(runs or {})
        self.lines: list[str] = []
        self.memory: MemoryReport | None = None  # set by write()
        self.bound: set[str] = set()  # size symbols bound so far
        self._backend: KernelBackend | None = None  # the kernels' (their launch needs)
        # computed buffers living in a graph input's memory (written in place of it, or
        # reusing such a buffer): only they and inputs, constants and extern results may
        # start at an address the wrapper did not allocate
        self._in_input_memory: set[str] = set()
        self._allocates = False  # whether the wrapper calls _empty (its preamble defines it)

    def emit(self, text: str = "") -> None:
        self.lines.append(("    " + text) if text else "")

    def write(self) -> str:
        low = self.lowered
        header = [
            f"# Ember compiled wrapper for graph {low.graph_name!r} (device {self.device}).",
            "# Generated by ember-inductor: allocates buffers, launches kernels, calls",
            "# extern ATen ops, frees intermediates after their last use.",
            "",
            "",
        ]
        if low.inputs:
            names = ", ".join(i.name for i in low.inputs)
            self.emit(f"({names},) = args")
            self.emit("args.clear()  # the wrapper owns the references from here on")
        if self._check_inputs():
            header += INPUT_STAMP_IMPORT
        for var in low.constants:
            info = low.buffers.get(var)
            if info is None:
                self.emit(f"{var} = constants[{var!r}]")
            else:  # a stored tensor may come back from a file in another layout
                self.emit(f"{var} = _layout(constants[{var!r}], {info.sizes!r}, "
                          f"{info.strides!r})")
        plans, self.memory = plan_memory(low, self.steps, self.device)
        if "memory" in TOPICS:  # NOTE: runtimes before the topic have no such channel
            log("memory", self.memory.format)
        allocated: set[str] = set()
        self._error_buffer(allocated)
        for step, plan in zip(self.steps, plans):
            self.emit()
            if isinstance(step, KernelStep):
                self._kernel(step, plan)
            else:
                self._extern(step, plan)
            for name in plan.frees:
                self.emit(f"del {name}")
        if self.device != "cpu":
            self._assert_checks_passed()
        self.emit()
        self.emit(f"return [{', '.join(render_arg(o) for o in low.outputs)}]")
        if self._allocates:
            header += allocator_lines(self.device)
        if any("_read_view(" in line for line in self.lines):
            header += READ_VIEW_LINES
        header.append("def call(args):")
        return "\n".join(header + self.lines) + "\n"

    def _check_inputs(self) -> bool:
        """Test each tensor input's type, device, dtype and shape (and strides, where
        kernels read it) before any kernel sees its pointer. The inline test is the fast
        path (metadata only); ``_check_input`` raises naming the input, or copies an input
        of another layout into the traced one.

        With :data:`STAMP_MIN_INPUTS` or more inputs of a static layout (an optimizer
        step's hundreds), their tests run only when the runtime's input stamp does not
        hold (one C++ check of every such input's metadata against a call that passed
        the tests: ``ember.runtime.input_stamp``); returns whether it is used
        (the wrapper then imports it, or, from a runtime without it, tests every call)."""
        low = self.lowered
        traced = traced_device([inp.meta for inp in low.inputs])
        kernel_reads = {r for n in low.nodes if not isinstance(n, ExternCall) for r in n.reads}
        checks: list[tuple[str, list[str], str, bool]] = []
        for inp in low.inputs:
            name, meta = inp.name, inp.meta
            if not isinstance(meta, TensorMeta):
                continue  # a SymInt or Python scalar input
            info = low.buffers.get(name)
            # kernels read a buffered input's pointer: it must be where they run (an
            # input traced on another device than the graph's is read by extern calls
            # only: lowering/devices.py)
            device = (torch.device(self.device) if info is not None
                      and (traced is None or meta.device.type == traced.type) else meta.device)
            tests = [f"isinstance({name}, torch.Tensor)", f"{name}.dtype is {meta.dtype}"]
            where: str | None = str(device)
            if not meta.sizes and name not in kernel_reads:
                # a 0-dim tensor that only extern calls read may be on either device: aten
                # takes it as a scalar (SDPA's philox seed and offset are CPU tensors, or
                # device tensors while a CUDA graph is captured)
                where = None
            else:
                tests.append(_device_test(name, device))
            if info is not None and _static_layout(info):
                tests += [f"{name}.shape == {info.sizes!r}",
                          _stride_test(name, info.sizes, info.strides)]
                call = (f"{name} = _check_input({name}, {name!r}, {info.dtype}, "
                        f"{info.sizes!r}, {info.strides!r}, {where!r})")
            else:  # symbolic sizes: checked once the symbols are bound (below)
                sizes = tuple(s if isinstance(s, int) else None for s in meta.sizes)
                call = (f"_check_input({name}, {name!r}, {meta.dtype}, {sizes!r}, None, "
                        f"{where!r})")
            checks.append((name, tests, call, info is not None and _static_layout(info)))
        stamped = [name for name, _, _, static in checks if static]
        use_stamp = len(stamped) >= STAMP_MIN_INPUTS
        if use_stamp:  # the other inputs (symbolic sizes, extern-only) first, inline
            for _, tests, call, static in checks:
                if not static:
                    self.emit(f"if not ({' and '.join(tests)}):")
                    self.emit(f"    {call}")
            checks = [c for c in checks if c[3]]
            # NOTE: stamped only when every test passed as is (an input copied into the
            # traced layout is no layout to expect next call)
            listed = ", ".join(stamped)
            passed = " and ".join(f"({' and '.join(tests)})"
                                  for _, tests, _, static in checks if static)
            self.emit("# the inputs' metadata as on a call that passed the tests below: "
                      "one C++ check")
            self.emit(f"if _inputs is None or not _inputs.holds({listed}):")
            self.emit(f"    if _inputs is not None and {passed}:")
            self.emit(f"        _inputs.learn({listed})")
            self.emit("    else:")
        for name, tests, call, static in checks:
            indent = "        " if use_stamp and static else ""
            self.emit(f"{indent}if not ({' and '.join(tests)}):")
            self.emit(f"{indent}    {call}")
        self._bind_symbols()
        return use_stamp

    def _bind_symbols(self) -> None:
        """A symbolic graph: bind each backed symbol from the first input dim that has
        it as its size (``s0 = arg0.size(0)``), then test every input's sizes, every
        symbol's range and every guard at once (``_shape_error`` raises naming the input,
        dim, symbol, range or guard; a symbolic input's rank is tested first, before its
        sizes are read), then copy an input whose strides differ from the
        traced ones that kernels index it with."""
        low = self.lowered
        if not low.symbols:
            return
        tensors = [(inp.name, inp.meta) for inp in low.inputs
                   if isinstance(inp.meta, TensorMeta)]
        self.emit("# size symbols, from the inputs")
        ranks = [f"{name}.dim() == {len(meta.sizes)}" for name, meta in tensors
                 if not all(isinstance(s, int) for s in meta.sizes)]
        if ranks:  # before a size is read: a wrong rank is a ShapeError naming the input
            self.emit(f"if not ({' and '.join(ranks)}):")
            self.emit(f"    _shape_error([{', '.join(i.name for i in low.inputs)}])")
        for name, meta in tensors:
            for d, size in enumerate(meta.sizes):
                if isinstance(size, str) and size.isidentifier() and size not in self.bound:
                    self.bound.add(size)
                    self.emit(f"{size} = {name}.size({d})")
        tests = [f"{name}.shape == {py_sizes(tuple(from_ir(s) for s in meta.sizes))}"
                 for name, meta in tensors if not all(isinstance(s, int) for s in meta.sizes)]
        for sym in sorted(self.bound):
            r = low.symbols.get(sym)
            if r is not None:
                tests.append(f"{sym} >= {r.lower}")
                if r.upper is not None:
                    tests.append(f"{sym} <= {r.upper}")
        for guard in low.guards:
            if symbolic.relation_symbols(guard.expr) <= self.bound:
                tests.append(f"({guard.expr})")
        if tests:
            self.emit(f"if not ({' and '.join(tests)}):")
            self.emit(f"    _shape_error([{', '.join(i.name for i in low.inputs)}])")
        for name, _ in tensors:
            info = low.buffers.get(name)
            if info is None or _static_layout(info):
                continue
            strides = py_strides(info.sizes, info.strides)
            self.emit(f"if {name}.stride() != {strides}:  # kernels index the traced layout")
            self.emit(f"    {name} = _layout({name}, {py_sizes(info.sizes)}, {strides})")

    def _bind_unbacked(self, out: str, sizes: tuple[Size, ...]) -> None:
        """Bind the unbacked symbols an extern result defines (``u0 = buf3.size(0)``), and
        check them (:meth:`_check_unbacked`)."""
        new: list[str] = []
        for d, size in enumerate(sizes):
            if isinstance(size, sympy.Symbol) and size.name not in self.bound:
                self.bound.add(size.name)
                new.append(size.name)
                self.emit(f"{size.name} = {out}.size({d})")
        self._check_unbacked(new, sizes=True)

    def _check_unbacked(self, new: Sequence[str], sizes: bool = False) -> None:
        """Test the unbacked symbols ``new``, just bound from one result, where they are
        bound, as the interpreter does: their ranges, then every guard they complete, in
        one inline test (a lower bound of 0 is not tested on ``sizes``); when it fails,
        ``_check_unbacked`` raises the interpreter's ``ShapeError`` (naming the result,
        the symbol and the range or guard)."""
        low = self.lowered
        tests: list[str] = []
        for sym in new:
            r = low.symbols.get(sym)
            if r is not None:
                # NOTE: no test of an int64 against the least int64 (a k.item(), [-inf, ...])
                if (r.lower > 0 or not sizes) and r.lower > UNBOUNDED_LOWER:
                    tests.append(f"{sym} >= {r.lower}")
                if r.upper is not None:
                    tests.append(f"{sym} <= {r.upper}")
        for guard in low.guards:
            used = symbolic.relation_symbols(guard.expr)
            if used <= self.bound and used & set(new):
                tests.append(f"({guard.expr})")
        if not tests:
            return
        env = ", ".join(f"{s!r}: {s}" for s in sorted(self.bound))
        self.emit(f"if not ({' and '.join(tests)}):  # {', '.join(new)}: range, guards")
        self.emit(f"    _check_unbacked({{{env}}}, {', '.join(repr(s) for s in new)})")

    def _kernel(self, step: KernelStep, plan: StepPlan) -> None:
        k = step.kernel
        callee = self.runs.get(k.name, k.name)
        shared = f" (runs {callee}: identical code)" if callee != k.name else ""
        self.emit(f"# {k.name}: fused from {', '.join(k.origins) or '(generated)'}{shared}")
        grouped = self._allocate_scalars(plan.allocations)
        for alloc in plan.allocations:
            if alloc.name not in grouped:
                self._allocate(alloc)
        # a buffer written in place of one it reads: both arguments are the new name
        renamed = {a.takes: a.name for a in plan.allocations if a.in_place and a.takes}
        # a host scalar (a cpu step counter in a cuda graph): its value, read on the host
        # here (no copy to the device, no synchronization; lowering/host_scalars.py)
        args = [f"{b.name}.item()" if b.host else renamed.get(b.name, b.name)
                for b in k.buffers] + list(k.size_args)
        # a fresh allocation is aligned (the caching allocator's blocks): not tested
        aligned = [b for b in self._kernel_backend().aligned_buffers(k)
                   if self.lowered.buffers[b].kind != "computed" or b in self._in_input_memory]
        if aligned:  # TMA descriptors: an unaligned base is copied for this call
            self.emit(f"# {', '.join(aligned)}: read through TMA descriptors (16-byte aligned "
                      "base; else copied for this call)")
            args = [f"{a} if {a}.data_ptr() % 16 == 0 else _aligned({a}, {a!r}, {k.name!r})"
                    if b.name in aligned else a for a, b in zip(args, k.buffers)] \
                + args[len(k.buffers):]
        self.emit(f"{callee}({', '.join(args)})")
        if self.device == "cpu":
            self._raise_failed_checks(k)

    def _kernel_backend(self) -> KernelBackend:
        if self._backend is None:
            self._backend = backend_for(torch.device(self.device).type)
        return self._backend

    def _allocate_scalars(self, allocations: Sequence[Allocation]) -> set[str]:
        """Fresh 0-d buffers of one dtype (an optimizer step's per-parameter bias
        corrections: 96 for AdamW over 48 tensors), two or more, taken from one
        allocation: one ``empty_strided`` and ``unbind`` instead of one call each (about
        half the host time). Each slot is 16 bytes from the next, so a kernel sees an
        aligned pointer as from its own allocation. Graph outputs keep their own memory.
        Returns the names allocated."""
        groups: dict[torch.dtype, list[str]] = {}
        for alloc in allocations:
            info = self.lowered.buffers[alloc.name]
            if (alloc.takes is None and info.sizes == () and info.kind == "computed"
                    and alloc.name not in self.lowered.output_buffers):
                groups.setdefault(info.dtype, []).append(alloc.name)
        done: set[str] = set()
        for dtype, names in groups.items():
            if len(names) < 2:
                continue
            step = max(1, 16 // dtype.itemsize)
            self._allocates = True
            self.emit(f"{', '.join(names)} = _empty(({len(names)},), ({step},), {dtype})"
                      f".unbind()  # {len(names)} 0-d buffers, one allocation")
            done.update(names)
        return done

    def _allocate(self, alloc: Allocation) -> None:
        """A new buffer: fresh memory, or a dead buffer's (its layout through ``as_strided``
        when it differs; codegen/memory_plan.py)."""
        info = self.lowered.buffers[alloc.name]
        old = alloc.takes
        if old is None:
            self._allocates = True
            self.emit(f"{alloc.name} = _empty({py_sizes(info.sizes)}, "
                      f"{py_strides(info.sizes, info.strides)}, {info.dtype})")
            return
        other = self.lowered.buffers[old]
        if other.kind == "input" or old in self._in_input_memory:
            self._in_input_memory.add(alloc.name)
        if other.kind == "input":  # codegen/input_writes.py: same dtype and layout
            self.emit(f"{alloc.name} = {old}  # mutated input {old} written in place "
                      "(returned as itself: no copy back)")
            return
        why = "written in place of" if alloc.in_place else "reuse"
        if (other.sizes, other.strides) == (info.sizes, info.strides):
            self.emit(f"{alloc.name} = {old}; del {old}  # {why} {old}'s memory")
        else:  # memory only this buffer sees from here, unless it is an input's
            read = READ_VIEWS and alloc.name not in self._in_input_memory
            self.emit(f"{alloc.name} = {py_view(old, info.sizes, info.strides, 0, read)}; "
                      f"del {old}  # {why} {old}'s memory")

    def _extern(self, call: ExternCall, plan: StepPlan) -> None:
        kind = "fallback" if call.is_fallback else "extern"
        note = f" ({call.note})" if call.note else ""
        self.emit(f"# {kind}: {call.target}{note}")
        if is_user_kernel(call):  # its source above the call; the op registers on import
            for line in user_kernel_comment(call):
                self.emit(f"# {line}")
            self.emit("import ember.runtime.user_kernels  # noqa: F401  (ops.ember)")
        read = (READ_VIEWS and call.target in VENDOR_EXTERNS and not call.is_fallback
                and not call.mutates)
        args = [render_arg(a, read) for a in call.args] + [
            f"{k}={render_arg(v, read)}" for k, v in call.kwargs.items()]
        public = OUT_VARIANTS.get(call.target)
        expr = f"{public or _op_expr(call.target)}({', '.join(args)})"
        if public and plan.allocations:
            # into freed memory of the same layout: no allocation (see OUT_VARIANTS)
            self._allocate(plan.allocations[0])
            self.emit(f"{public}({', '.join(args + [f'out={plan.allocations[0].name}'])})")
            return
        assign = f"{'_result' if call.multi else call.outputs[0]} = {expr}"
        if call.target in GRAD_MODE_EXTERNS:  # the wrapper runs without grad
            self.emit("with torch.enable_grad():  # its results depend on grad mode")
            assign = "    " + assign
        self.emit(assign)
        if call.multi:
            for j, out in enumerate(call.outputs):
                if out is not None:
                    self.emit(f"{out} = _result[{j}]")
            self.emit("del _result")
        for out, meta in zip(call.outputs, call.result_meta):
            if out is not None and meta is not None:
                _, sizes, strides = meta
                self._bind_unbacked(out, sizes)
                shape, layout = py_sizes(sizes), py_strides(sizes, strides)
                if is_custom_operator(call.target):
                    # a custom op's fake kernel promised this dtype and layout: check it
                    index = call.outputs.index(out) if call.multi else None
                    self.emit(f"if isinstance({out}, torch.Tensor) and ({out}.dtype is not "
                              f"{meta[0]} or {out}.shape != {shape} or "
                              f"{_stride_test(out, sizes, strides, differs=True)}):")
                    self.emit(f"    {out} = _custom_result({out}, {call.target!r}, {index}, "
                              f"{meta[0]}, {shape}, {layout})")
                    continue
                if call.target in OUT_VARIANTS and _row_major(sizes, strides):
                    continue  # a new row-major tensor of its operands' dtype: no test
                # NOTE: an optional result may come back None (CUDA attention's extras).
                # The dtype too: torch's meta of an op can differ from its kernel
                # (native_group_norm of bf16 with f32 weight: bf16 mean/rstd, eager's are
                # f32), and the kernels read the buffer as the traced dtype
                self.emit(f"if isinstance({out}, torch.Tensor) and ({out}.dtype is not "
                          f"{meta[0]} or {out}.shape != {shape} or "
                          f"{_stride_test(out, sizes, strides, differs=True)}):")
                self.emit(f"    {out} = _layout({out}.to({meta[0]}), {shape}, {layout})")
        for index, sym in call.binds:  # int(u0): .item() used as a size
            self.bound.add(sym)
            self.emit(f"{sym} = int({call.outputs[index]})")
            self._check_unbacked([sym])

    # -- run-time checks (lowering/checks.py) -------------------------------------------
    def _error_buffer(self, allocated: set[str]) -> None:
        """Zero the error buffer the kernels' run-time checks record failures into."""
        info = self.lowered.buffers.get(ERROR_BUFFER)
        if info is None:
            return
        allocated.add(ERROR_BUFFER)
        self.emit("# run-time checks: slot 2k is 1 where check k failed, 2k+1 the bad value")
        self.emit(f"{ERROR_BUFFER} = torch.zeros({info.sizes!r}, dtype={info.dtype}, "
                  f"device={self.device!r})")
        if self.device == "cpu":
            # NOTE: the flags read through a NumPy view of the same memory: indexing it
            # costs ~0.1 us where a tensor's .any() cost ~50 us per checking kernel
            self.emit(f"{ERROR_BUFFER}_flags = {ERROR_BUFFER}.numpy()")

    def _assert_checks_passed(self) -> None:
        """CUDA: one device-side assert over every check's flag at the end of the graph,
        as eager's own CUDA index checks: no host synchronization; a failure surfaces at
        the next synchronization as a "device-side assert triggered" error."""
        if ERROR_BUFFER not in self.lowered.buffers or not any(
                ERROR_BUFFER in step.kernel.stored_buffers() for step in self.steps
                if isinstance(step, KernelStep)):
            return
        what = "; ".join(sorted({c.message.partition(":")[0] for c in self.lowered.checks}))
        self.emit(f"_assert_checks_passed({ERROR_BUFFER}, "
                  f"{('run-time check failed (index out of bounds) in ' + what)!r})")

    def _raise_failed_checks(self, kernel: Kernel) -> None:
        """CPU: raise eager's exception when a check that ``kernel`` records failed (its
        flags read after the kernel, where eager raises)."""
        slots = sorted({s.index.value // 2 for s in kernel.body if isinstance(s, Store)
                        and s.buffer == ERROR_BUFFER and isinstance(s.index, Int)})
        checks = [self.lowered.checks[k] for k in slots]
        if not checks:
            return
        failed = " or ".join(f"{ERROR_BUFFER}_flags[{2 * c.slot}]" for c in checks)
        self.emit(f"if {failed}:  # a run-time check failed")
        self.emit(f"    _failed = {ERROR_BUFFER}.tolist()")
        for c in checks:
            message = c.message.replace("{value}", f"{{_failed[{2 * c.slot + 1}]}}")
            self.emit(f"    if _failed[{2 * c.slot}]:")
            self.emit(f"        raise {c.exception}(f{message!r})")
