"""``F.scaled_dot_product_attention`` with a mask the fused kernels can read; torch's
transformer modules' causal-mask detection (``_causal_hint_rule``, at the end).

On a GPU, SDPA's fused kernels (flash, memory-efficient, cuDNN) need the attention
mask's last dimension to have stride 1; a mask built by broadcasting (HF's
``where(expand(...), 0, -inf)``: an expanded condition gives the ``where`` a layout whose
last stride is not 1) makes every fused kernel refuse it, and SDPA runs its math path:
two float32 matmuls and a softmax over ``[B, H, L, S]`` scores, forward and backward.
So the capture gives SDPA ``attn_mask.contiguous()`` there (the same values: one copy of
the mask, then a fused kernel). The rule applies to tensors on
:data:`FUSED_MASK_DEVICES` (where the fused kernels have that requirement); on the CPU
the mask is passed as it is. ``EMBER_LOGS=patterns`` says where it applied.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from ember.frontend.bytecode.builtin_rules import BUILTIN_RULES
from ember.frontend.bytecode.frame import Frame, location_of
from ember.frontend.torch_substitutes import SUBSTITUTES, detect_is_causal_mask
from ember.runtime.logs import log

#: device types whose fused SDPA kernels need a mask with last stride 1
FUSED_MASK_DEVICES = ("cuda",)
#: SDPA's positional parameters up to the mask
_MASK_POSITION = 3


def needs_dense_mask(mask: Any) -> bool:
    """Whether ``mask`` is a tensor a fused SDPA kernel would refuse for its layout alone:
    on a :data:`FUSED_MASK_DEVICES` device, with a last dimension over 1 element whose
    stride is not 1."""
    return (isinstance(mask, torch.Tensor) and mask.device.type in FUSED_MASK_DEVICES
            and mask.dim() > 0 and mask.size(-1) > 1 and mask.stride(-1) != 1)


def _sdpa_rule(h: Any, interp: Any, frame: Frame, args: list[Any],
               kwargs: dict[str, Any]) -> Any:
    fn = F.scaled_dot_product_attention
    if len(args) > _MASK_POSITION:
        mask = args[_MASK_POSITION]
        if needs_dense_mask(mask):
            args = [*args[:_MASK_POSITION], _dense(h, interp, frame, mask),
                    *args[_MASK_POSITION + 1:]]
    elif needs_dense_mask(kwargs.get("attn_mask")):
        kwargs = {**kwargs, "attn_mask": _dense(h, interp, frame, kwargs["attn_mask"])}
    return h.record(interp, fn, args, kwargs)


def _dense(h: Any, interp: Any, frame: Frame, mask: torch.Tensor) -> Any:
    where = location_of(frame, frame.last_line)
    log("patterns", lambda: f"sdpa_dense_mask: {where.file}:{where.line} ({where.function}): "
                            f"the attention mask (strides {tuple(mask.stride())}) made "
                            "contiguous for a fused kernel")
    return h.record(interp, mask.contiguous, [], {})


BUILTIN_RULES[F.scaled_dot_product_attention] = _sdpa_rule


def _causal_hint_rule(h: Any, interp: Any, frame: Frame, args: list[Any],
                      kwargs: dict[str, Any]) -> Any:
    """torch's ``_detect_is_causal_mask``: Ember's substitute, inlined (it reads no
    tensor data; ``ember.frontend.torch_substitutes``)."""
    return h.inline(interp, frame, detect_is_causal_mask, args, kwargs, None)


for _owner, _name, _original, _substitute in SUBSTITUTES:
    if _substitute is detect_is_causal_mask:
        BUILTIN_RULES[_original] = _causal_hint_rule
