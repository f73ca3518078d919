"""PyTorch's transformer fast path end to end through ``ember.frontend.compile``
(inductor, CPU): in inference ``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer``
call ``_native_multi_head_attention`` / ``_transformer_encoder_layer_fwd``, which the aot
stage decomposes (``ember.aot.transformer_decompositions``): no op runs eagerly, and the
results are eager's. In training the fast path is not taken and gradients are eager's.
Op-level cases (every mask type, bool and float masks, fully masked queries):
``packages/aot/tests/test_transformer_decompositions.py``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ember.frontend
import pytest
import torch
from ember.runtime.config import patch

E, H, FF, L, B = 32, 4, 64, 6, 3
STRICT = {"strict": True}


def _padding() -> torch.Tensor:
    padding = torch.zeros(B, L, dtype=torch.bool)
    padding[1, 4:] = True
    padding[2, 2:] = True
    return padding


def _causal() -> torch.Tensor:
    return torch.ones(L, L, dtype=torch.bool).triu(1)


def _compiled_matches_eager(fn: Callable[..., Any], *args: Any, tol: float = 1e-5) -> None:
    """``fn`` compiled (inductor) gives eager's results, with nothing run eagerly."""
    compiled = ember.frontend.compile(fn, backend="inductor", options=STRICT)
    expected, got = fn(*args), compiled(*args)
    if isinstance(expected, torch.Tensor):
        expected, got = (expected,), (got,)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        if e is None:  # need_weights=False: eager's weights are None
            assert g is None or g.numel() == 0
            continue
        torch.testing.assert_close(g, e, rtol=tol, atol=tol, equal_nan=True)
    assert compiled.stats.fallbacks == 0, compiled.stats
    assert compiled.stats.graph_breaks == 0, compiled.stats


@pytest.mark.parametrize("weights", ["averaged", "per_head", "none"])
@pytest.mark.parametrize("masks", ["none", "attn", "padding", "both"])
@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention_in_inference(batch_first: bool, masks: str, weights: str) -> None:
    """The fast path is taken with ``batch_first=True`` and bool masks; with
    ``batch_first=False`` the module runs its regular path, which must match too."""
    torch.manual_seed(0)
    module = torch.nn.MultiheadAttention(E, H, batch_first=batch_first).eval()
    x = torch.randn(B, L, E) if batch_first else torch.randn(L, B, E)
    attn_mask = _causal() if masks in ("attn", "both") else None
    padding = _padding() if masks in ("padding", "both") else None

    def attend(x: torch.Tensor, attn_mask: torch.Tensor | None,
               padding: torch.Tensor | None) -> Any:
        return module(x, x, x, attn_mask=attn_mask, key_padding_mask=padding,
                      need_weights=weights != "none",
                      average_attn_weights=weights == "averaged")

    with torch.no_grad():
        _compiled_matches_eager(attend, x, attn_mask, padding)


@pytest.mark.parametrize("masks", ["attn", "padding"])
def test_multihead_attention_with_float_masks(masks: str) -> None:
    """Float masks (added to the scores) take the regular path, not the fast one."""
    torch.manual_seed(0)
    module = torch.nn.MultiheadAttention(E, H, batch_first=True).eval()
    x = torch.randn(B, L, E)
    attn_mask = torch.randn(L, L) if masks == "attn" else None
    padding = (torch.zeros(B, L).masked_fill(_padding(), float("-inf"))
               if masks == "padding" else None)
    with torch.no_grad():
        _compiled_matches_eager(
            lambda x: module(x, x, x, attn_mask=attn_mask, key_padding_mask=padding), x)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("masks", ["none", "causal", "padding", "both"])
def test_transformer_encoder_in_inference(masks: str, norm_first: bool,
                                          activation: str) -> None:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(E, H, FF, dropout=0.1, activation=activation,
                                             batch_first=True, norm_first=norm_first)
    encoder = torch.nn.TransformerEncoder(layer, 2, norm=torch.nn.LayerNorm(E),
                                          enable_nested_tensor=False).eval()
    x = torch.randn(B, L, E)
    mask = _causal() if masks in ("causal", "both") else None
    padding = _padding() if masks in ("padding", "both") else None
    # NOTE: is_causal is given: left None, TransformerEncoder compares the mask with a
    # causal one (torch.equal), a data-dependent value that breaks the graph
    with torch.no_grad():
        _compiled_matches_eager(
            lambda x, m, p: encoder(x, mask=m, src_key_padding_mask=p,
                                    is_causal=m is not None), x, mask, padding)


def test_the_fast_path_is_what_is_captured(capsys: pytest.CaptureFixture[str]) -> None:
    """The strict capture records the fast-path ops (what the tests above check is
    their decomposition); the regular path with ``batch_first=False``."""
    def captured(fn: Callable[..., Any], *args: Any) -> str:
        capsys.readouterr()
        with torch.no_grad(), patch(logs="graphs"):
            ember.frontend.compile(fn, backend="eager")(*args)
        return capsys.readouterr().err

    x = torch.randn(B, L, E)
    for batch_first in (True, False):
        mha = torch.nn.MultiheadAttention(E, H, batch_first=batch_first).eval()
        text = captured(lambda x, p, mha=mha: mha(x, x, x, key_padding_mask=p),
                        x if batch_first else x.transpose(0, 1), _padding())
        assert ("aten::_native_multi_head_attention.default" in text) == batch_first
    layer = torch.nn.TransformerEncoderLayer(E, H, FF, batch_first=True).eval()
    encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    assert "aten::_transformer_encoder_layer_fwd.default" in captured(encoder, x)
    assert "aten::_native_multi_head_attention.default" in captured(_EncoderBlock().eval(), x)


class _EncoderBlock(torch.nn.Module):
    """torchvision's ViT encoder block: pre-norm self-attention (``need_weights=False``)
    and a GELU MLP, layer norms with eps 1e-6."""

    def __init__(self) -> None:
        super().__init__()
        self.ln_1 = torch.nn.LayerNorm(E, eps=1e-6)
        self.self_attention = torch.nn.MultiheadAttention(E, H, dropout=0.1, batch_first=True)
        self.dropout = torch.nn.Dropout(0.1)
        self.ln_2 = torch.nn.LayerNorm(E, eps=1e-6)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(E, FF), torch.nn.GELU(),
                                       torch.nn.Dropout(0.1), torch.nn.Linear(FF, E),
                                       torch.nn.Dropout(0.1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.ln_1(x)
        y, _ = self.self_attention(y, y, y, need_weights=False)
        x = x + self.dropout(y)
        return x + self.mlp(self.ln_2(x))


class _TinyViT(torch.nn.Module):
    """torchvision's VisionTransformer, small: patch convolution, class token, position
    embedding, encoder blocks, final norm, head on the class token."""

    def __init__(self, image: int = 16, patch: int = 4, classes: int = 10) -> None:
        super().__init__()
        self.patch = patch
        self.conv_proj = torch.nn.Conv2d(3, E, kernel_size=patch, stride=patch)
        self.class_token = torch.nn.Parameter(torch.zeros(1, 1, E))
        tokens = (image // patch) ** 2 + 1
        self.pos_embedding = torch.nn.Parameter(torch.randn(1, tokens, E) * 0.02)
        self.layers = torch.nn.Sequential(_EncoderBlock(), _EncoderBlock())
        self.ln = torch.nn.LayerNorm(E, eps=1e-6)
        self.head = torch.nn.Linear(E, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.conv_proj(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = self.ln(self.layers(x + self.pos_embedding))
        return self.head(x[:, 0])


def test_vit_block_in_inference() -> None:
    torch.manual_seed(0)
    block = _EncoderBlock().eval()
    with torch.no_grad():
        _compiled_matches_eager(block, torch.randn(B, L, E))


def test_tiny_vit_in_inference() -> None:
    torch.manual_seed(0)
    model = _TinyViT().eval()
    with torch.no_grad():
        _compiled_matches_eager(model, torch.randn(2, 3, 16, 16), tol=1e-4)


def test_training_takes_the_regular_path() -> None:
    """In training (dropout off, for determinism) the modules run their regular path:
    values and gradients of the input and every parameter are eager's."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(E, H, FF, dropout=0.0, batch_first=True)
    eager = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).train()
    ours = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).train()
    ours.load_state_dict(eager.state_dict())
    compiled = ember.frontend.compile(ours, backend="inductor", options=STRICT)
    x = torch.randn(B, L, E)
    x_eager, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()
    padding = _padding()
    expected = eager(x_eager, src_key_padding_mask=padding)
    got = compiled(x_ours, src_key_padding_mask=padding)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    grad = torch.randn_like(expected)
    expected.backward(grad)
    got.backward(grad)
    assert x_eager.grad is not None and x_ours.grad is not None
    torch.testing.assert_close(x_ours.grad, x_eager.grad, rtol=1e-4, atol=1e-4)
    for (name, p), q in zip(eager.named_parameters(), ours.parameters()):
        assert p.grad is not None and q.grad is not None, name
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-4, msg=name)
    assert compiled.stats.graph_breaks == 0


def test_encoder_with_nested_tensors_matches_eager_at_padded_positions() -> None:
    """``enable_nested_tensor=True`` with a key padding mask: eager runs the layers on a
    nested tensor and returns zeros at the padded positions."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(E, H, FF, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=True).eval()
    x, padding = torch.randn(B, L, E), _padding()
    with torch.no_grad():
        expected = encoder(x, src_key_padding_mask=padding)
        assert not expected[padding].any()
        got = ember.frontend.compile(encoder, backend="inductor")(
            x, src_key_padding_mask=padding)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
