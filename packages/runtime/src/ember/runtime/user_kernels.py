"""The operator ``ember::triton_kernel``: a user's Triton kernel launch as a graph op.

The frontend captures ``kernel[grid](...)`` (see ``ember.frontend.bytecode.triton_launch``)
as one call of this operator; its arguments are described in
:mod:`ember.runtime.user_kernel_spec`. The operator is functional: it copies each tensor
the kernel writes (same sizes and strides, so the strides the user passes stay right),
launches the user's kernel object itself on the copies, and returns them in the order
of ``writes``. The caller's tensors are updated by ``aten::copy_`` nodes after it, which
the aot stage turns into input mutations like any other in-place op.

Its twin ``ember::triton_kernel_`` launches on the tensors as given and writes them: the
inductor emits it (never in an IR graph) when the buffers it passes are the call's own, a
mutated graph input among them (no copy in, none back).

Registered with ``torch.library`` when ``ember.runtime`` is imported, so every executor
runs it: the reference interpreter (``eager``, ``aot_eager``) calls it like any ATen op,
and the inductor's wrapper calls it as an extern (never fused into). Its fake kernel
returns empty tensors of the written arguments' layouts. ``@triton.autotune`` runs as
the user wrote it (configs, key, cache): the grid of each configuration was evaluated at
capture, and :func:`launch_grid` picks the one for the configuration Triton chose.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from typing import Any

import torch
from ember.runtime.ir.errors import IRFormatError
from ember.runtime.user_kernel_spec import UserKernelCall, resolve_kernel

__all__ = ["IN_PLACE_TARGET", "TARGET", "launch", "launch_grid", "parse_call",
           "triton_kernel", "triton_kernel_"]

TARGET = "ember::triton_kernel.default"
"""The qualified name of the operator, as IR nodes name it."""

IN_PLACE_TARGET = "ember::triton_kernel_.default"
"""Its in-place twin, which launches on the tensors as given (writes them): compiled
wrappers only, on buffers the inductor made the call's own (never in an IR graph)."""


@functools.lru_cache(maxsize=512)
def parse_call(spec: str) -> UserKernelCall:
    """The :class:`UserKernelCall` of a node's ``spec`` text (parsed once per text).

    Raises:
        IRFormatError: the text is malformed.
    """
    return UserKernelCall.from_text(spec)


def _fresh_copy(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` with its sizes and strides (a kernel indexes it with the strides
    the user passed); ``clone`` would make a non-dense view contiguous."""
    out = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device)
    return out.copy_(t)


def launch_grid(call: UserKernelCall, ints: Sequence[int]) -> Any:
    """The grid to launch ``call`` with: a tuple, or for an autotuned kernel a function
    of the meta-parameters that returns the grid of the configuration Triton picked.

    Raises:
        IRFormatError: the spec indexes integer values it does not have.
    """
    grids = []
    for choice in call.grids:
        if any(d >= len(ints) for d in choice.dims):
            raise IRFormatError(f"ember::triton_kernel {call.kernel}: a grid dim indexes "
                                f"past its {len(ints)} integer values")
        grids.append((choice, tuple(int(ints[d]) for d in choice.dims)))
    if len(grids) == 1 and not grids[0][0].when:
        return grids[0][1]

    def grid(meta: dict[str, Any]) -> tuple[int, ...]:
        for choice, dims in grids:
            if choice.matches(meta):
                return dims
        raise RuntimeError(
            f"user Triton kernel {call.kernel}: the autotuner chose a configuration "
            f"({ {k: meta.get(k) for k in grids[0][0].when} }) that was not among its "
            "configs at capture; compile again after changing the configs")

    return grid


def launch(call: UserKernelCall, tensors: Sequence[torch.Tensor],
           ints: Sequence[int], copy_written: bool = True) -> list[torch.Tensor]:
    """Launch ``call``'s kernel on ``tensors`` (written ones replaced by fresh copies)
    and return the copies, in ``call.writes`` order. ``copy_written=False``: on the
    tensors themselves, which it writes (returned in that order).

    Raises:
        IRFormatError: the kernel cannot be resolved in this process or its source
            changed (:func:`~ember.runtime.user_kernel_spec.resolve_kernel`), or the spec
            indexes values the node does not have.
    """
    kernel = resolve_kernel(call)
    values: list[Any] = list(tensors)
    copies = []
    shared: dict[int, torch.Tensor] = {}
    for w in call.writes:
        if w >= len(values):
            raise IRFormatError(f"ember::triton_kernel {call.kernel}: written index {w} "
                                f"past its {len(values)} tensors")
        copy = shared.get(w)
        if copy is None:
            copy = _fresh_copy(tensors[w]) if copy_written else tensors[w]
            shared[w] = values[w] = copy
            for group in call.same:  # one tensor passed twice (in and out): one copy
                if w in group:
                    for i in group:
                        if i < len(values):
                            shared[i] = values[i] = copy
        copies.append(copy)
    positional: list[Any] = []
    keywords: dict[str, Any] = {}
    for a in call.args:
        if a.kind == "const":
            value: Any = a.value
        elif a.kind == "tl_dtype":
            import triton.language as tl  # only a kernel launch needs Triton

            value = tl.dtype(str(a.value))
        else:
            pool: Sequence[Any] = values if a.kind == "tensor" else ints
            if a.index >= len(pool):
                raise IRFormatError(f"ember::triton_kernel {call.kernel}: an argument "
                                    f"indexes past its {len(pool)} {a.kind} values")
            value = pool[a.index]
            if a.kind == "int":
                value = int(value)
        if a.name is None:
            positional.append(value)
        else:
            keywords[a.name] = value
    grid = launch_grid(call, ints)
    with _on_device(tensors):
        kernel[grid](*positional, **keywords)
    return copies


def _on_device(tensors: Sequence[torch.Tensor]) -> contextlib.AbstractContextManager[Any]:
    """The CUDA device of the first CUDA tensor, current while the kernel launches
    (Triton launches on the current device)."""
    for t in tensors:
        if t.device.type == "cuda":
            return torch.cuda.device(t.device)
    return contextlib.nullcontext()


@torch.library.custom_op("ember::triton_kernel", mutates_args=())
def triton_kernel(kernel: str, tensors: list[torch.Tensor], ints: list[int],
                  spec: str) -> list[torch.Tensor]:
    """Launch a user Triton kernel (``kernel`` is its ``module:name``, ``spec`` a
    :class:`UserKernelCall`); returns written copies of the tensors it writes."""
    call = parse_call(spec)
    if call.kernel != kernel:
        raise IRFormatError(f"ember::triton_kernel: the node names {kernel!r} but its "
                            f"spec {call.kernel!r}")
    return launch(call, tensors, ints)


@triton_kernel.register_fake
def _triton_kernel_fake(kernel: str, tensors: list[torch.Tensor], ints: list[int],
                        spec: str) -> list[torch.Tensor]:
    call = parse_call(spec)
    return [torch.empty_strided(tensors[w].size(), tensors[w].stride(),
                                dtype=tensors[w].dtype, device=tensors[w].device)
            for w in call.writes]


@torch.library.custom_op("ember::triton_kernel_", mutates_args=("tensors",))
def triton_kernel_(kernel: str, tensors: list[torch.Tensor], ints: list[int],
                   spec: str) -> None:
    """:func:`triton_kernel` launched on ``tensors`` themselves: the ones the kernel
    writes are written in place (:data:`IN_PLACE_TARGET`)."""
    call = parse_call(spec)
    if call.kernel != kernel:
        raise IRFormatError(f"ember::triton_kernel_: the call names {kernel!r} but its "
                            f"spec {call.kernel!r}")
    launch(call, tensors, ints, copy_written=False)


@triton_kernel_.register_fake
def _triton_kernel_in_place_fake(kernel: str, tensors: list[torch.Tensor], ints: list[int],
                                 spec: str) -> None:
    return None
