"""The attention rewrite on a CUDA GPU: hand-written attention (the rule cases and HF
GPT-2 with eager attention) becomes the fused SDPA kernel torch picks for the device
(flash, memory-efficient or cuDNN attention), and the compiled result matches eager
within bfloat16 tolerance. Skipped without CUDA; run on the H200 test machine
(``bash tools/gpu/h200_all.sh tests``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from attention_cases import CASES, CUDA_FUSED_ATTENTION, core_program
from ember.runtime.config import patch
from helpers import compile_and_load

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU"),
]


def _inputs(case: str, dtype: torch.dtype, lq: int, lk: int) -> tuple[torch.Tensor, ...]:
    """B=2, H=4, D=64 on the GPU; masks [lq, lk] with every row keeping a position."""
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 4, lq, 64, generator=g)
    k, v = (torch.randn(2, 4, lk, 64, generator=g) for _ in range(2))
    extra: tuple[torch.Tensor, ...] = ()
    if case == "additive_mask":
        extra = (torch.randn(lq, lk, generator=g),)
    elif case in ("where_mask", "masked_fill"):
        keep = torch.rand(lq, lk, generator=g) > 0.3
        keep[:, 0] = True
        extra = (keep,)
    return tuple(t.to(dtype if t.is_floating_point() else t.dtype).cuda()
                 for t in (q, k, v, *extra))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32],
                         ids=["bf16", "f16", "f32"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_rewritten_to_a_fused_kernel_and_matches_eager(case: str, dtype: torch.dtype,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    fn = CASES[case][0]
    for lq, lk in ((128, 128), (64, 96)):
        inputs = _inputs(case, dtype, lq, lk)
        with patch(logs="patterns"):
            compiled, run = compile_and_load(core_program(fn, *inputs))
        err = capsys.readouterr().err
        if dtype == torch.float16 and case == "where_mask":
            # finfo(float16).min does not absorb the scores (attention_masks.py)
            assert "rewrites" not in compiled.metadata, err
        else:
            assert compiled.metadata.get("rewrites") == {"attention": 1}, err
            wrapper = compiled.files["forward/wrapper.py"].decode()
            assert any(op in wrapper for op in CUDA_FUSED_ATTENTION), wrapper
        (out,) = run(*inputs)
        expected = fn(*inputs)
        # NOTE: the fused kernel keeps scores and probabilities in float32 where eager
        # rounds each op's result to bf16/f16: both are compared with a float64 reference,
        # and the compiled error may not exceed twice eager's (plus a float32 margin)
        reference = fn(*(t.double() if t.is_floating_point() else t for t in inputs))
        ours = (out.double() - reference).abs().max().item()
        eagers = (expected.double() - reference).abs().max().item()
        assert ours <= 2 * eagers + 1e-4, (ours, eagers)


@pytest.mark.parametrize("name", ["hf_gpt2", "hf_bert"])
def test_hf_eager_attention_on_the_gpu(name: str) -> None:
    pytest.importorskip("transformers")
    tools = str(Path(__file__).resolve().parents[3] / "tools")
    if tools not in sys.path:
        sys.path.insert(0, tools)
    import zoo
    from ember.frontend import capture
    from ember.runtime.pipeline import compile_program

    module, inputs = zoo.get(name).make(torch.device("cuda"), torch.bfloat16, "quick")
    module.eval().requires_grad_(False)
    module.model.set_attn_implementation("eager")
    compiled = compile_program(capture(module, *inputs), "inductor")
    assert compiled.program.metadata["rewrites"] == {"attention": 2}
    (out,) = compiled(list(inputs))
    torch.testing.assert_close(out, module(*inputs), atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
def test_training_attention_runs_a_fused_backward(dtype: torch.dtype) -> None:
    """Hand-written causal attention in training: the aot stage rewrites it before the
    backward (``InductorStage.pre_grad_passes``), so forward and backward are fused
    SDPA kernels, and the gradients match eager's."""
    from ember.frontend import capture
    from ember.runtime.ir import print_program
    from ember.runtime.pipeline import compile_program
    from test_attention_rewrite_training import CausalAttention

    g = torch.Generator().manual_seed(3)
    qkv = [torch.randn(2, 4, 256, 64, generator=g).to(dtype).cuda().requires_grad_()
           for _ in range(3)]
    module = CausalAttention()
    with patch(program_cache=False):
        compiled = compile_program(capture(module, *qkv), "inductor")
    forward, _, backward = print_program(compiled.program).partition("graph backward(")
    assert any(f"= aten::{op}.default(" in forward for op in CUDA_FUSED_ATTENTION), forward
    assert "_attention_backward.default(" in backward and "_softmax" not in backward

    def grads(fn: object) -> list[torch.Tensor]:
        for x in qkv:
            x.grad = None
        out = fn(qkv) if fn is compiled else module(*qkv)  # type: ignore[operator]
        out = out[0] if isinstance(out, (list, tuple)) else out
        out.float().sum().backward()
        return [x.grad.float() for x in qkv]  # type: ignore[union-attr]

    tol = 3e-2 if dtype == torch.bfloat16 else 2e-3
    for got, want in zip(grads(compiled), grads(module)):
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)
