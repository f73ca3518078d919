"""Decompositions of the backward ops of nearest upsampling and replication padding.

Both forwards read each output element from one input element, chosen per axis, so
their gradients are scatter-adds along each axis in turn: ``index_add`` of the incoming
gradient at the source index of every output position. torch registers no
decomposition for these backward ops, and kept whole they were extern calls in every
training step of a U-Net, a GAN generator or a YOLO neck.

The source indices, as eager computes them (checked against eager by
``tests/test_resample_grad_decompositions.py``):

- nearest: ``min(floor(j * step), in - 1)`` for output position ``j``, in float32,
  with ``step = 1 / scale`` when the forward was given a positive scale factor and
  ``in / out`` (a float32 division) otherwise; ``nearest-exact`` reads
  ``floor((j + 0.5) * step)``;
- replication padding: ``clamp(j - before, 0, in - 1)`` with ``before`` the padding in
  front of that axis (``padding`` lists the last axis first, then the one before it).

Half-precision gradients are accumulated in float32 and rounded once, as eager's nearest
backward does (eager's replication-pad backward sums in the half type, so an edge
element's gradient may differ from it by a rounding).
Symbolic sizes and negative padding keep the op whole (``NotImplemented``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import torch
from ember.aot._torch import OpOverload

RESAMPLE_GRAD_DECOMPOSITIONS: dict[OpOverload, Callable[..., Any]] = {}
_aten = torch.ops.aten
_HALF = (torch.float16, torch.bfloat16)


def _float32(value: float | Fraction) -> float:
    """The float32 nearest to ``value`` (a Python float that is exactly that float32, so
    that a float32 tensor times it multiplies in float32 by eager's factor)."""
    near = struct.unpack("f", struct.pack("f", float(value)))[0]
    bits = struct.unpack("I", struct.pack("f", near))[0]
    around = [struct.unpack("f", struct.pack("I", b))[0] for b in (bits - 1, bits + 1)
              if 0 <= b < 0x7F800000]
    exact = Fraction(value)
    best: float = min([near, *around], key=lambda c: abs(Fraction(c) - exact))
    return best


def _plain_ints(*sizes: Sequence[Any]) -> bool:
    return all(type(s) is int for size in sizes for s in size)


def _scatter_axes(grad: torch.Tensor, input_size: Sequence[int],
                  sources: Sequence[torch.Tensor]) -> torch.Tensor:
    """Sums ``grad`` into a tensor of ``input_size``: along each of the trailing axes
    (one per entry of ``sources``), output position ``j`` adds into ``sources[k][j]``."""
    acc = torch.float32 if grad.dtype in _HALF else grad.dtype
    out = grad.to(acc)
    first = len(input_size) - len(sources)
    for k, source in enumerate(sources):
        dim = first + k
        shape = list(out.shape)
        shape[dim] = input_size[dim]
        out = torch.zeros(shape, dtype=acc, device=grad.device).index_add(dim, source, out)
    return out.to(grad.dtype).contiguous()


def _nearest_sources(output_size: Sequence[int], input_size: Sequence[int],
                     scales: Sequence[Any], exact: bool,
                     device: torch.device) -> list[torch.Tensor]:
    spatial = input_size[len(input_size) - len(output_size):]
    sources = []
    for out, inp, scale in zip(output_size, spatial, scales, strict=True):
        step = _float32(1.0 / scale if scale is not None and scale > 0
                        else Fraction(inp, out))
        j = torch.arange(out, dtype=torch.float32, device=device)
        if exact:
            j = j + 0.5
        pos = (j * step).floor().to(torch.int64)
        sources.append(pos.clamp_max(inp - 1))
    return sources


def _nearest_backward(exact: bool, axes: int) -> Callable[..., Any]:
    def backward(grad: torch.Tensor, output_size: Sequence[Any],
                 input_size: Sequence[Any], *scales: Any) -> Any:
        if (not _plain_ints(output_size, input_size) or len(output_size) != axes
                or not grad.dtype.is_floating_point):
            return NotImplemented
        scales = tuple(scales) + (None,) * (axes - len(scales))
        sources = _nearest_sources(output_size, input_size, scales, exact, grad.device)
        return _scatter_axes(grad, input_size, sources)
    backward.__name__ = f"upsample_nearest{'_exact' if exact else ''}{axes}d_backward"
    return backward


def _replication_pad_backward(axes: int) -> Callable[..., Any]:
    def backward(grad: torch.Tensor, x: torch.Tensor, padding: Sequence[Any]) -> Any:
        if (not _plain_ints(padding, x.shape) or len(padding) != 2 * axes
                or min(padding) < 0 or not grad.dtype.is_floating_point):
            return NotImplemented
        sizes = x.shape[x.dim() - axes:]
        sources = []
        for k, size in enumerate(sizes):
            before = padding[2 * (axes - 1 - k)]
            j = torch.arange(grad.shape[x.dim() - axes + k], device=grad.device)
            sources.append((j - before).clamp(0, size - 1))
        return _scatter_axes(grad, list(x.shape), sources)
    backward.__name__ = f"replication_pad{axes}d_backward"
    return backward


for _axes in (1, 2, 3):
    RESAMPLE_GRAD_DECOMPOSITIONS[
        getattr(_aten, f"upsample_nearest{_axes}d_backward").default
    ] = _nearest_backward(False, _axes)
    RESAMPLE_GRAD_DECOMPOSITIONS[
        getattr(_aten, f"_upsample_nearest_exact{_axes}d_backward").default
    ] = _nearest_backward(True, _axes)
    RESAMPLE_GRAD_DECOMPOSITIONS[
        getattr(_aten, f"replication_pad{_axes}d_backward").default
    ] = _replication_pad_backward(_axes)
