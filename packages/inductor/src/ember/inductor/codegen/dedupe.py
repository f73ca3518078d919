"""Kernel dedupe: kernels that differ only in names are generated and built once.

A model of N identical layers schedules N copies of each layer's kernels; they differ in
the kernel's name and in the names of the buffers they are passed, which the generated
code uses only as identifiers (C++ parameters, Triton arguments: both are passed by
position). :func:`share_identical_kernels` keys each kernel by its
:func:`canonical_form` (the kernel renamed ``kernel``, its buffers ``b0, b1, ...`` in
argument order, no origins) and keeps the first kernel of each key: the others run its
code, called by the wrapper with their own buffers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ember.inductor.loop_ir import Kernel, Literal, Load, Stmt, Store

CANONICAL_NAME = "kernel"
"""The kernel name in a :func:`canonical_form`."""


def canonical_form(kernel: Kernel) -> Kernel:
    """``kernel`` with every name that is only an identifier in generated code replaced
    by a positional one: two kernels with equal canonical forms generate the same code
    up to those names."""
    names = {b.name: f"b{i}" for i, b in enumerate(kernel.buffers)}

    def rename(s: Stmt) -> Stmt:
        if isinstance(s, (Load, Store)):
            return dataclasses.replace(s, buffer=names[s.buffer])
        return s

    return dataclasses.replace(
        kernel, name=CANONICAL_NAME, origins=(),
        buffers=tuple(dataclasses.replace(b, name=names[b.name]) for b in kernel.buffers),
        body=tuple(rename(s) for s in kernel.body))


@dataclass(frozen=True)
class SharedKernels:
    """The result of :func:`share_identical_kernels`: ``unique`` the kernels to generate
    (first of each kind, in schedule order); ``runs`` maps the name of each kernel that
    is not generated to the name of the kernel whose code it runs."""

    unique: tuple[Kernel, ...]
    runs: dict[str, str]

    @property
    def deduped(self) -> int:
        """How many kernels run another kernel's code."""
        return len(self.runs)


def _scalars(kernel: Kernel) -> tuple[str, ...]:
    """The kernel's constants as typed text: equality of dataclasses compares ``0.0``
    equal to ``-0.0`` and ``1`` to ``1.0``, which generate different code."""
    return tuple(f"{type(v).__name__}:{v!r}" for s in kernel.body
                 for v in ((s.value,) if isinstance(s, Literal) else
                           (s.other,) if isinstance(s, Load) else ()))


def share_identical_kernels(kernels: list[Kernel]) -> SharedKernels:
    """Group ``kernels`` by :func:`canonical_form`; see :class:`SharedKernels`."""
    first: dict[tuple[Kernel, tuple[str, ...]], Kernel] = {}
    runs: dict[str, str] = {}
    for kernel in kernels:
        found = first.setdefault((canonical_form(kernel), _scalars(kernel)), kernel)
        if found is not kernel:
            runs[kernel.name] = found.name
    return SharedKernels(tuple(first.values()), runs)
