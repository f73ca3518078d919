"""Decompositions used only for programs with symbolic sizes, in place of torch's where
those compute with a symbolic *float* (which the IR cannot hold: its symbolic values are
ints), so the op would otherwise stay whole and run eagerly.

Batch norm in training: torch's decompositions scale by ``n / (n - 1)`` and ``1 / n``
with ``n`` the symbolic element count per channel. Here the unbiased variance is
``var`` with ``correction=1`` and every ``1 / n`` is a ``mean``: the counts are read by
the reduction at run time. Anything else (evaluation mode, no saved statistics) is
handed to torch's decomposition, or kept whole when torch has none.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import torch
from ember.aot._torch import OpOverload

aten = torch.ops.aten

Decomposition = Callable[..., Any]


def _reduced_dims(x: torch.Tensor) -> list[int]:
    """Every dim of ``x`` but the channels (dim 1)."""
    return [0, *range(2, x.dim())]


def _per_channel(t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """A ``[C]`` tensor viewed to broadcast against ``x`` (``[1, C, 1, ...]``)."""
    view: torch.Tensor = aten.view.default(t, [1, t.shape[0], *([1] * (x.dim() - 2))])
    return view


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    """float32 for half-precision inputs (ATen's batch norm accumulates in it)."""
    return torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype


def _as(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` converted to ``dtype`` (itself when it has it: no copy is recorded)."""
    if t.dtype == dtype:
        return t
    converted: torch.Tensor = aten._to_copy.default(t, dtype=dtype)
    return converted


def batch_norm_training(fallback: Decomposition | None, x: torch.Tensor,
                        weight: torch.Tensor | None, bias: torch.Tensor | None,
                        running_mean: torch.Tensor, running_var: torch.Tensor,
                        training: bool, momentum: float, eps: float) -> Any:
    """``_native_batch_norm_legit_functional`` in training mode: normalized output, the
    saved mean and inverse standard deviation, and the updated running statistics."""
    if not training:
        return NotImplemented if fallback is None else fallback(
            x, weight, bias, running_mean, running_var, training, momentum, eps)
    dims = _reduced_dims(x)
    acc = _as(x, _compute_dtype(x))
    var, mean = aten.var_mean.correction(acc, dims, correction=0, keepdim=True)
    invstd = aten.rsqrt.default(aten.add.Tensor(var, eps))
    out = aten.mul.Tensor(aten.sub.Tensor(acc, mean), invstd)
    if weight is not None:
        out = aten.mul.Tensor(out, _per_channel(weight, x))
    if bias is not None:
        out = aten.add.Tensor(out, _per_channel(bias, x))
    # NOTE: ATen's CPU kernel returns the saved statistics in the input's dtype, CUDA's
    # in the compute dtype
    saved_dtype = x.dtype if x.device.type == "cpu" else acc.dtype
    save_mean = _as(aten.squeeze.dims(mean, dims), saved_dtype)
    save_invstd = _as(aten.squeeze.dims(invstd, dims), saved_dtype)
    unbiased = aten.var.correction(acc, dims, correction=1)
    new_mean = aten.add.Tensor(aten.mul.Tensor(aten.squeeze.dims(mean, dims), momentum),
                               aten.mul.Tensor(running_mean, 1 - momentum))
    new_var = aten.add.Tensor(aten.mul.Tensor(unbiased, momentum),
                              aten.mul.Tensor(running_var, 1 - momentum))
    return (_as(out, x.dtype), save_mean, save_invstd,
            _as(new_mean, running_mean.dtype),
            _as(new_var, running_var.dtype))


def batch_norm_backward(fallback: Decomposition | None, grad_out: torch.Tensor,
                        x: torch.Tensor, weight: torch.Tensor | None,
                        running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
                        save_mean: torch.Tensor | None, save_invstd: torch.Tensor | None,
                        train: bool, eps: float, output_mask: list[bool]) -> Any:
    """``native_batch_norm_backward`` of a training-mode batch norm (statistics saved):
    ``dx = w * invstd * (dy - mean(dy) - x_hat * mean(dy * x_hat))``,
    ``dw = sum(dy * x_hat)``, ``db = sum(dy)`` over every dim but the channels."""
    if not train or save_mean is None or save_invstd is None:
        return NotImplemented if fallback is None else fallback(
            grad_out, x, weight, running_mean, running_var, save_mean, save_invstd, train,
            eps, output_mask)
    dims = _reduced_dims(x)
    dtype = _compute_dtype(x)
    dy = _as(grad_out, dtype)
    acc = _as(x, dtype)
    invstd = _per_channel(save_invstd, x)
    x_hat = aten.mul.Tensor(aten.sub.Tensor(acc, _per_channel(save_mean, x)), invstd)
    dy_x_hat = aten.mul.Tensor(dy, x_hat)
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        centred = aten.sub.Tensor(
            aten.sub.Tensor(dy, aten.mean.dim(dy, dims, True)),
            aten.mul.Tensor(x_hat, aten.mean.dim(dy_x_hat, dims, True)))
        scale = invstd if weight is None else aten.mul.Tensor(invstd, _per_channel(weight, x))
        grad_input = _as(aten.mul.Tensor(centred, scale), x.dtype)
    if output_mask[1] and weight is not None:
        grad_weight = _as(aten.sum.dim_IntList(dy_x_hat, dims), weight.dtype)
    if output_mask[2]:
        grad_bias = _as(aten.sum.dim_IntList(dy, dims),
                        x.dtype if weight is None else weight.dtype)
    return grad_input, grad_weight, grad_bias


_SYMBOLIC: dict[OpOverload, Decomposition] = {
    aten._native_batch_norm_legit_functional.default: batch_norm_training,
    aten.native_batch_norm_backward.default: batch_norm_backward,
}


def symbolic_decompositions(base: Mapping[Any, Decomposition]) -> dict[Any, Decomposition]:
    """The decompositions for a symbolic program, each handing the cases it does not
    cover to ``base``'s decomposition of its op (or keeping the op whole)."""
    return {op: functools.partial(fn, base.get(op)) for op, fn in _SYMBOLIC.items()}
