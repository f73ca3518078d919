"""Ops the recorder never records as they are, with what it records instead (a table).

``cudnn_batch_norm`` and ``miopen_batch_norm`` (what ``batch_norm`` dispatches to on
NVIDIA and AMD GPUs, e.g. for float32 on CUDA) update ``running_mean`` and
``running_var`` in place in training, but their schemas do not say so (no ``(a!)``): a
graph holding them looks functional while it is not, and the aot stage's re-trace then
finds the hidden writes (``re-tracing wrote into graph input(s) ..._running_mean``).
They are recorded as ``native_batch_norm``, whose schema declares the writes, with the
same arguments; the vendor-only results (cuDNN's reserve space) are empty tensors, which
nothing in a recorded graph reads (the aot stage derives the backward itself).

Some ops have no fake kernel in torch, though their output sizes follow from their
arguments: ``_ctc_loss`` with Python-list lengths (``F.ctc_loss(lp, t, [4, 3], [3, 2])``)
and its backward. torch treats them as data-dependent (the graph broke at the loss).
:data:`FAKE_KERNELS` gives their results' metadata; :func:`run_fake` runs an op on fake
tensors through it.

Some ops' fake kernels give a result the wrong dtype: ``_pack_padded_sequence``'s
``batch_sizes`` (int64 in eager) comes back float32 from a fake run, and a compiled
program then returned floats, which ``nn.LSTM`` refused. :data:`FAKE_DTYPE_FIXES` lists
them, and :func:`fake_result_fixed` gives the recorder a result of the dtype eager's
kernel makes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from ember.runtime.checked_calls import call_through

__all__ = ["FAKE_DTYPE_FIXES", "FAKE_KERNELS", "RECORD_REWRITES", "fake_result_fixed",
           "run_fake"]

_aten = torch.ops.aten


def _cudnn_batch_norm(input: torch.Tensor, weight: torch.Tensor, bias: Any, running_mean: Any,
                      running_var: Any, training: bool, exponential_average_factor: float,
                      epsilon: float) -> tuple[torch.Tensor, ...]:
    out, mean, invstd = _aten.native_batch_norm.default(
        input, weight, bias, running_mean, running_var, training,
        exponential_average_factor, epsilon)
    return out, mean, invstd, input.new_empty((0,), dtype=torch.uint8)


def _miopen_batch_norm(*args: Any) -> tuple[torch.Tensor, ...]:
    return tuple(_aten.native_batch_norm.default(*args))


# op -> what is recorded in its place (called with the op's arguments, under the recorder)
RECORD_REWRITES: dict[Any, Callable[..., Any]] = {
    _aten.cudnn_batch_norm.default: _cudnn_batch_norm,
    _aten.miopen_batch_norm.default: _miopen_batch_norm,
}


#: op -> {result index: the dtype eager's kernel gives it, which the fake kernel does not}
FAKE_DTYPE_FIXES: dict[str, dict[int, torch.dtype]] = {
    "aten::_pack_padded_sequence.default": {1: torch.int64},
}


def fake_result_fixed(target: str, result: Any) -> Any:
    """``result`` of a fake run of ``target`` with the dtypes of :data:`FAKE_DTYPE_FIXES`
    (fresh fake tensors of the same sizes and strides)."""
    fixes = FAKE_DTYPE_FIXES.get(target)
    if fixes is None:
        return result
    items = list(result)
    for i, dtype in fixes.items():
        old = items[i]
        if old.dtype != dtype:
            items[i] = torch.empty_strided(old.size(), old.stride(), dtype=dtype,
                                           device=old.device)
    return type(result)(items)


def _ctc_loss(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: Any,
              target_lengths: Any, blank: int = 0, zero_infinity: bool = False) -> Any:
    """``_ctc_loss`` (int-list lengths) of ``log_probs`` ``[T, N, C]``: the negative log
    likelihood ``[N]`` and ``log_alpha`` ``[N, T, 2 * max(target_lengths) + 1]``, as
    eager's kernels size them."""
    if log_probs.dim() != 3 or not isinstance(target_lengths, (list, tuple)):
        return NotImplemented
    longest = max((int(n) for n in target_lengths), default=0)
    time, batch = log_probs.shape[0], log_probs.shape[1]
    return (log_probs.new_empty((batch,)),
            log_probs.new_empty((batch, time, 2 * longest + 1)))


def _ctc_loss_backward(grad: torch.Tensor, log_probs: torch.Tensor, *args: Any,
                       **kwargs: Any) -> Any:
    """``_ctc_loss_backward``: a gradient shaped like ``log_probs``."""
    return torch.empty_like(log_probs, memory_format=torch.contiguous_format)


#: op -> a function of the op's (fake) arguments giving its results' metadata (fake
#: tensors), or NotImplemented where the op's own fake kernel applies
FAKE_KERNELS: dict[str, Callable[..., Any]] = {
    "aten::_ctc_loss.default": _ctc_loss,
    "aten::_ctc_loss_backward.default": _ctc_loss_backward,
}


def run_fake(func: Any, target: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """``func(*args, **kwargs)`` on fake tensors, through :data:`FAKE_KERNELS` where it
    has an entry that applies."""
    return call_through(FAKE_KERNELS.get(target), func, args, kwargs)

