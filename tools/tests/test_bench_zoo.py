"""Every zoo model builds and runs at test size; full sizes are checked on ``meta``."""

from __future__ import annotations

import pytest
import torch
import zoo

_MODELS = zoo.names()


def test_zoo_has_the_models_the_brief_lists() -> None:
    required = {"pointwise", "softmax_layernorm", "rms_norm", "mlp", "naive_attention",
                "resnet", "transformer_block", "gpt"}
    assert required <= set(_MODELS)


@pytest.mark.parametrize("name", _MODELS)
def test_model_runs_at_test_size_with_fresh_random_inputs(name: str) -> None:
    module, inputs = zoo.get(name).make("cpu", torch.float32, "test")
    assert not module.training
    floats = [x for x in inputs if x.is_floating_point()]
    assert all(x.abs().sum() > 0 for x in floats)  # never zeros
    with torch.no_grad():
        out = module(*inputs)
        again = module(*inputs)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, again)  # deterministic (no dropout)


def test_factories_are_reproducible() -> None:
    a_mod, (a_in,) = zoo.get("mlp").make("cpu", torch.float32, "test")
    b_mod, (b_in,) = zoo.get("mlp").make("cpu", torch.float32, "test")
    torch.testing.assert_close(a_in, b_in)
    torch.testing.assert_close(a_mod.state_dict(), b_mod.state_dict())


@pytest.mark.parametrize("name", [n for n in _MODELS if "hf" not in zoo.get(n).tags])
def test_full_size_builds_on_meta_in_bfloat16(name: str) -> None:
    module, inputs = zoo.get(name).make("meta", torch.bfloat16, "full")
    with torch.no_grad():
        out = module(*inputs)
    assert out.device.type == "meta" and out.dtype == torch.bfloat16


def test_full_pointwise_fills_the_gpu() -> None:
    _, (x, y) = zoo.get("pointwise").make("meta", torch.float32, "full")
    assert x.numel() == y.numel() == 1 << 28


def test_unknown_model_and_suite_say_what_exists() -> None:
    with pytest.raises(KeyError, match="known: pointwise"):
        zoo.get("nope")
    with pytest.raises(ValueError, match="unknown suite"):
        zoo.get("mlp").make("cpu", torch.float32, "huge")
