"""Mutated graph inputs written in place by the kernel that computes their new value.

The aot stage's functional form returns a mutated input's new value as a
``MUTATED_INPUT`` output, and the runtime copies it back into the input
(``ember.runtime.callable``). When a generated kernel (C++ or Triton) computes that value,
it can store it into the input's memory instead: the wrapper binds the new value's buffer
to the input (``buf1 = arg0  # mutated input ...``), the kernel writes there, and the
graph returns the input itself as its ``MUTATED_INPUT`` output, which the runtime does not
copy onto itself: the contract of ``lowering/written_args.py`` (a custom operator or a
user kernel writing an input in place), not a second one.

:func:`plan_input_writes` decides per mutated input (:class:`InputWrite`); it is written in
place only where that is the same program:

- nothing rules it out whatever the schedule (:attr:`MutatedInput.kept`: it aliases
  another input, or requires grad in a program with a backward graph);
- its new value is a whole buffer a pointwise kernel computes, returned once (not also as
  another output), in the input's dtype, sizes and strides;
- no output returns the input itself or a view of it, and no fallback reads it (its
  result may be a view of the input that outlives the write);
- every read of its old value happens in an earlier step, or in that kernel at the very
  offset the kernel stores (unmasked, before the store: a read-modify-write; and in the
  same part of a combo kernel, whose parts run concurrently); no later step reads it;
- no run-time check (``lowering/checks.py``) of that kernel or a later one can raise
  after the write: a failing call leaves the input as it was, as with the copy back.

Everything else keeps the copy back; ``EMBER_LOGS=memory`` lists each decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from ember.inductor.buffers import ExternCall
from ember.inductor.codegen.index_match import same_index
from ember.inductor.codegen.registry import in_one_part
from ember.inductor.loop_ir import Kernel, Load, Store
from ember.inductor.loop_ir.index import free_vars
from ember.inductor.lowering.checks import ERROR_BUFFER
from ember.inductor.lowering.extern_args import TensorArg
from ember.inductor.lowering.lowered_graph import LoweredGraph, MutatedInput
from ember.inductor.scheduler import KernelStep, Step

__all__ = ["InputWrite", "plan_input_writes"]


@dataclass(frozen=True)
class InputWrite:
    """What becomes of mutated input ``input`` (``argN``, placeholder ``placeholder``):
    its new value ``buffer`` is stored in its memory by step ``step`` (``reason`` None),
    or it keeps the runtime's copy back for ``reason``."""

    input: str
    placeholder: str
    buffer: str | None
    step: int | None
    reason: str | None = None

    def describe(self, steps: Sequence[Step]) -> str:
        """One log line: ``input %x (arg0): buf1 written in place by kernel0 (no copy
        back)`` or ``input %x (arg0): copied back (why)``."""
        head = f"input %{self.placeholder} ({self.input})"
        if self.reason is not None:
            return f"{head}: copied back ({self.reason})"
        step = steps[self.step] if self.step is not None else None
        by = (step.kernel.name if isinstance(step, KernelStep)
              else f"extern {step.target}" if step is not None else "an extern call")
        return f"{head}: {self.buffer} written in place by {by} (no copy back)"


def plan_input_writes(lowered: LoweredGraph, steps: Sequence[Step],
                      last_uses: Mapping[str, int], fallback_reads: AbstractSet[str],
                      device: str) -> list[InputWrite]:
    """Each mutated input's :class:`InputWrite` (see the module doc).

    Args:
        lowered: the lowered graph (its ``mutated_inputs``, buffers and outputs).
        steps: the scheduled steps, in order.
        last_uses: the last step that reads or writes each buffer.
        fallback_reads: the buffers a fallback extern call reads.
        device: the graph's device (its backend may run a kernel's parts concurrently).
    """
    first: dict[str, int] = {}
    for i, step in enumerate(steps):
        if isinstance(step, KernelStep):
            for name in step.kernel.stored_buffers():
                first.setdefault(name, i)
    return [_decide(lowered, steps, m, first, last_uses, fallback_reads, device)
            for m in lowered.mutated_inputs]


def _decide(lowered: LoweredGraph, steps: Sequence[Step], m: MutatedInput,
            first: Mapping[str, int], last_uses: Mapping[str, int],
            fallback_reads: AbstractSet[str], device: str) -> InputWrite:
    def kept(reason: str, buffer: str | None = None) -> InputWrite:
        return InputWrite(m.input, m.placeholder, buffer, None, reason)

    if m.kept is not None:
        return kept(m.kept)
    out = lowered.outputs[m.output]
    if not isinstance(out, TensorArg) or out.view is not None:
        return kept("its new value is not a whole buffer")
    buffer = out.buffer
    if buffer == m.input:  # an extern call wrote it (lowering/written_args.py)
        writer = next((i for i, s in enumerate(steps) if isinstance(s, ExternCall)
                       and m.input in s.mutates), None)
        return InputWrite(m.input, m.placeholder, buffer, writer)
    info, target = lowered.buffers.get(buffer), lowered.buffers[m.input]
    if info is None or info.kind != "computed" or buffer not in first:
        return kept(f"its new value {buffer} is not computed by a kernel", buffer)
    others = [j for j, o in enumerate(lowered.outputs) if j != m.output
              and isinstance(o, TensorArg) and o.buffer in (buffer, m.input)]
    if others:
        return kept(f"output {others[0]} is also {buffer} or the input", buffer)
    if (info.dtype, info.sizes, info.strides) != (target.dtype, target.sizes, target.strides):
        return kept(f"layout: {buffer} is {_layout(info.sizes, info.strides)}, the input "
                    f"{_layout(target.sizes, target.strides)}", buffer)
    if m.input in fallback_reads:
        return kept("a fallback reads it (its result may view the input)", buffer)
    i = first[buffer]
    step = steps[i]
    assert isinstance(step, KernelStep)
    if last_uses.get(m.input, -1) > i:
        later = steps[last_uses[m.input]]
        what = later.kernel.name if isinstance(later, KernelStep) else f"extern {later.target}"
        return kept(f"{what} reads its old value after {step.kernel.name}", buffer)
    why = _read_modify_write(step.kernel, buffer, m.input)
    if (why is None and m.input in step.kernel.loaded_buffers()
            and not in_one_part(step.kernel, device, buffer, m.input)):
        why = f"{step.kernel.name} reads it in another part than the one writing {buffer}"
    if why is not None:
        return kept(why, buffer)
    checking = next((s.kernel.name for s in steps[i:] if isinstance(s, KernelStep)
                     and ERROR_BUFFER in s.kernel.stored_buffers()), None)
    if checking is not None:  # eager raises before the write, or the copy back never runs
        return kept(f"a run-time check of {checking} may fail after the write", buffer)
    return InputWrite(m.input, m.placeholder, buffer, i)


def _read_modify_write(k: Kernel, buffer: str, source: str) -> str | None:
    """None when kernel ``k`` stores ``buffer`` once per element at one unmasked index and
    reads ``source`` only at that index before the store; else why not."""
    if k.is_reduction or k.template is not None:
        return f"{k.name} is a reduction" if k.template is None else f"{k.name} is a matmul"
    stores = [(j, s) for j, s in enumerate(k.body) if isinstance(s, Store) and s.buffer == buffer]
    if (len({s.index for _, s in stores}) != 1 or any(s.mask or s.mode != "store"
                                                      for _, s in stores)
            or buffer in k.loaded_buffers()):
        return f"{k.name} does not store {buffer} once per element"
    index = stores[0][1].index
    if not {v.name for v in k.ranges if v.size != 1} <= {v.name for v in free_vars(index)}:
        return f"{k.name} does not store {buffer} once per element"
    first_store = stores[0][0]
    for j, s in enumerate(k.body):
        if not isinstance(s, Load) or s.buffer != source:
            continue
        if s.mask is not None or not same_index(s.index, index):
            return f"{k.name} reads its old value at another index"
        if j > first_store:
            return f"{k.name} reads its old value after storing {buffer}"
    return None


def _layout(sizes: tuple[object, ...], strides: tuple[object, ...]) -> str:
    return f"{list(sizes)} strides {list(strides)}"
