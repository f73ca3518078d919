"""torch functions that a capture runs as Ember's own Python, with the same results.

Each substitute computes what the torch function computes, on values a capture can
hold (fake tensors, no data):

- ``torch.nn.modules.transformer._detect_is_causal_mask(mask, is_causal, size)``
  compares the mask's values with a causal mask (a data-dependent ``bool``: a graph
  break in strict capture, an error in trace capture). Its answer is only a hint: every
  caller (``TransformerEncoder``, ``Transformer``, the decoder) passes the mask itself
  along, and attention with that mask is attention with ``is_causal=True`` when the
  mask is causal. So for a tensor mask with no ``is_causal`` given the substitute
  answers False (the mask is applied as given); with ``is_causal`` given or no mask it
  answers as torch does.
- ``nn.TransformerEncoder.forward``, where eager takes the nested-tensor path (inference,
  a key padding mask, no attention mask, ``enable_nested_tensor=True``; fake tensors
  cannot be nested ones: with ``mask_check=False`` strict capture crashed or returned
  other values, and with ``mask_check=True`` torch skips the path while compiling, so
  the padded positions differed from eager's zeros): the same computation on dense
  tensors, each layer run with the key padding mask and its padded positions set to
  zero (what the nested path's ``to_padded_tensor(0.0)`` gives), then the final norm.
  With ``mask_check=True`` eager nests only a left-aligned mask: the graph computes
  that from the mask and zeroes only then. Everywhere else torch's own ``forward`` runs.

Strict capture inlines the substitute in place of the function (:func:`substitute_for`,
from ``calls.inline``, for the module's ``forward``; a rule of ``attention_rules`` for
the function torch would run on fake tensors); the trace capture installs them while
its trace runs (:func:`substitutes_installed`).
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import torch
from ember.frontend._torch import causal_mask_detector
from torch import nn

__all__ = ["SUBSTITUTES", "detect_is_causal_mask", "substitute_for", "substitutes_installed"]


def detect_is_causal_mask(mask: torch.Tensor | None, is_causal: bool | None = None,
                          size: int | None = None) -> bool:
    """``_detect_is_causal_mask`` without reading the mask's values (module docstring)."""
    if is_causal is not None or mask is None:
        return is_causal is True
    return False


_ENCODER_FORWARD: Any = nn.TransformerEncoder.forward
# a copy (another function object, the same code): calling it runs torch's forward, not
# its substitute
_TORCH_ENCODER_FORWARD = types.FunctionType(
    _ENCODER_FORWARD.__code__, _ENCODER_FORWARD.__globals__, _ENCODER_FORWARD.__name__,
    _ENCODER_FORWARD.__defaults__, _ENCODER_FORWARD.__closure__)
_TORCH_ENCODER_FORWARD.__kwdefaults__ = _ENCODER_FORWARD.__kwdefaults__
# named as this module's: strict capture inlines it as a module's forward is (torch
# functions are run on fake tensors), and the capture cache finds it by this name
_TORCH_ENCODER_FORWARD.__module__ = __name__
_TORCH_ENCODER_FORWARD.__qualname__ = "_TORCH_ENCODER_FORWARD"
_FAST_PATH_DEVICES = ("cpu", "cuda", "xpu")


_PLAIN_TORCH_FUNCTIONS = (torch.Tensor.__torch_function__, nn.Parameter.__torch_function__)


def _overrides_torch_function(t: Any) -> bool:
    """Whether ``t``'s class overrides ``__torch_function__`` (what eager's
    ``has_torch_function`` check finds in plain code; not a torch function mode a
    capture may have pushed)."""
    return getattr(type(t), "__torch_function__", None) not in _PLAIN_TORCH_FUNCTIONS


def _nested_path(encoder: Any, src: torch.Tensor, mask: Any, padding: Any) -> bool:
    """Whether eager's ``TransformerEncoder.forward`` converts ``src`` to a nested tensor
    (its conditions but ``mask_check``'s, which reads the mask's values; a device outside
    the usual ones: not decided here, torch's forward runs)."""
    first = encoder.layers[0]
    if (not torch.backends.mha.get_fastpath_enabled()
            or not getattr(encoder, "use_nested_tensor", False) or first.training):
        return False
    if (not isinstance(src, torch.Tensor) or src.dim() != 3 or src.is_nested
            or not isinstance(padding, torch.Tensor) or mask is not None
            or torch.is_autocast_enabled()):
        return False
    if padding.dtype != torch.bool and not padding.is_floating_point():
        return False  # torch's forward raises its error about the mask's type
    attn, norm1, norm2 = first.self_attn, first.norm1, first.norm2
    weights = [attn.in_proj_weight, attn.in_proj_bias, attn.out_proj.weight,
               attn.out_proj.bias, norm1.weight, norm1.bias, norm2.weight, norm2.bias,
               first.linear1.weight, first.linear1.bias, first.linear2.weight,
               first.linear2.bias]
    tensors = [src, *weights]
    if any(_overrides_torch_function(t) for t in tensors):
        return False
    if src.device.type not in _FAST_PATH_DEVICES:
        return False
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))


def transformer_encoder_forward(self: Any, src: torch.Tensor, mask: Any = None,
                                src_key_padding_mask: Any = None,
                                is_causal: bool | None = None) -> torch.Tensor:
    """``nn.TransformerEncoder.forward`` (module docstring)."""
    padding = src_key_padding_mask
    if not _nested_path(self, src, mask, padding):
        return _TORCH_ENCODER_FORWARD(  # type: ignore[no-any-return]
            self, src, mask, src_key_padding_mask, is_causal)
    # a float mask pads where it is not zero (the nested path keeps its zeros)
    padded = padding if padding.dtype == torch.bool else padding != 0
    if getattr(self, "mask_check", True):
        # eager nests only a left-aligned mask (each row's kept positions first), else
        # runs the dense path: decided in the graph, from the mask's values
        kept = padded.logical_not()
        aligned = (kept[:, 1:] <= kept[:, :-1]).all()
        padded = padded & aligned
    zeroed = padded.unsqueeze(-1)
    output = src
    for layer in self.layers:
        output = layer(output, src_key_padding_mask=padding)
        output = output.masked_fill(zeroed, 0.0)
    if self.norm is not None:
        output = self.norm(output)
    return output


SUBSTITUTES: list[tuple[Any, str, Any, Any]] = [
    (*causal_mask_detector(), detect_is_causal_mask),
    (nn.TransformerEncoder, "forward", _ENCODER_FORWARD, transformer_encoder_forward),
]
"""(owner, attribute, torch's function, its substitute)."""

_BY_FUNCTION = {original: substitute for _, _, original, substitute in SUBSTITUTES}


def substitute_for(fn: Any) -> Any:
    """The function a capture runs for ``fn``: its substitute, or ``fn`` itself."""
    return _BY_FUNCTION.get(fn, fn) if isinstance(fn, types.FunctionType) else fn


@contextlib.contextmanager
def substitutes_installed() -> Iterator[None]:
    """Inside, the substitutes stand where torch's functions are (for code run for real
    on fake tensors: the trace capture); torch's are put back after, also on error.
    NOTE: process-wide while it lasts; the substitutes compute the same values."""
    saved = []
    try:
        for owner, name, original, substitute in SUBSTITUTES:
            if getattr(owner, name, None) is original:
                saved.append((owner, name, original))
                setattr(owner, name, substitute)
        yield
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)
