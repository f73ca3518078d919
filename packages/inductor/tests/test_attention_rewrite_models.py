"""The attention rewrite on the zoo's Hugging Face GPT-2 and BERT (suite ``test``, CPU,
eager attention): every layer's attention becomes SDPA and the outputs match eager."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("ember.frontend")
pytest.importorskip("ember.aot")

_TOOLS = str(Path(__file__).resolve().parents[3] / "tools")
if _TOOLS not in sys.path:
    sys.path.insert(0, _TOOLS)

import zoo
from ember.frontend import capture
from ember.runtime.config import patch
from ember.runtime.pipeline import compile_program

# model -> (attention layers of the ``test`` size, is the mask causal)
MODELS = {"hf_gpt2": (2, True), "hf_bert": (2, False)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_hf_eager_attention_becomes_sdpa(name: str, dtype: torch.dtype,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    if name not in zoo.names("test"):
        pytest.skip(f"{name} is not in the zoo")
    module, inputs = zoo.get(name).make(torch.device("cpu"), dtype, "test")
    module.eval().requires_grad_(False)
    module.model.set_attn_implementation("eager")  # matmul/softmax/matmul in Python
    with patch(logs="patterns"):
        compiled = compile_program(capture(module, *inputs), "inductor")
    layers, causal = MODELS[name]
    assert compiled.program.metadata["rewrites"] == {"attention": layers}
    log = [line for line in capsys.readouterr().err.splitlines() if "->" in line]
    assert len(log) == layers
    assert all(("is_causal=True" in line) == causal for line in log)
    (out,) = compiled(list(inputs))
    expected = module(*inputs)
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(out, expected, atol=tol, rtol=tol)
