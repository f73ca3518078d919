"""The strict capture gives ``F.scaled_dot_product_attention`` a contiguous copy of an
attention mask whose last stride is not 1 on devices whose fused kernels need that
(``bytecode/attention_rules.py``: CUDA; HF BERT's broadcast mask made SDPA run its
math path there). On the CPU machine the rule is tried by treating the CPU as such a
device: the copy is recorded once before SDPA, the results and gradients are eager's,
and a mask already dense, or a CPU mask by default, is passed as it is."""

from __future__ import annotations

import ember.frontend as ef
import pytest
import torch
import torch.nn.functional as F
from ember.frontend.bytecode import attention_rules
from ember.runtime.config import patch


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor
               ) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m) * 2


def _attention_positional(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          m: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, m) * 2


def _inputs(dense: bool) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 8, 4, generator=g, requires_grad=True) for _ in range(3))
    m = torch.randn(2, 1, 8, 8, generator=g)
    if not dense:
        m = m.transpose(-1, -2)  # last stride 8
    return [q, k, v, m]


def _recorded(fn, inputs, capsys: pytest.CaptureFixture[str]) -> str:  # type: ignore[no-untyped-def]
    with patch(logs=frozenset({"graphs", "patterns"}), capture_cache=False,
               program_cache=False):
        out = ef.compile(fn, backend="eager")(*inputs)
    torch.testing.assert_close(out, fn(*inputs))
    return capsys.readouterr().err


@pytest.mark.parametrize("fn", [_attention, _attention_positional])
def test_a_strided_mask_is_made_dense_before_sdpa(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str],
                                                   fn) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(attention_rules, "FUSED_MASK_DEVICES", ("cpu",))
    log = _recorded(fn, _inputs(dense=False), capsys)
    assert "sdpa_dense_mask:" in log and "strides (64, 64, 1, 8)" in log, log
    assert log.count("aten::clone.default") == 1, log


def test_a_dense_mask_and_a_cpu_mask_are_passed_as_they_are(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    log = _recorded(_attention, _inputs(dense=False), capsys)  # CPU: not a fused-mask device
    assert "sdpa_dense_mask" not in log and "aten::clone" not in log, log
    monkeypatch.setattr(attention_rules, "FUSED_MASK_DEVICES", ("cpu",))
    log = _recorded(_attention, _inputs(dense=True), capsys)
    assert "sdpa_dense_mask" not in log and "aten::clone" not in log, log


def test_gradients_through_the_dense_mask_are_eagers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attention_rules, "FUSED_MASK_DEVICES", ("cpu",))
    eager = _inputs(dense=False)
    _attention(*eager).sum().backward()
    compiled = _inputs(dense=False)
    with patch(capture_cache=False, program_cache=False):
        ef.compile(_attention)(*compiled).sum().backward()
    for a, b in zip(compiled[:3], eager[:3]):
        assert a.grad is not None and b.grad is not None
        torch.testing.assert_close(a.grad, b.grad)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_on_cuda_a_strided_mask_takes_a_fused_kernel_in_training(
        capsys: pytest.CaptureFixture[str]) -> None:
    # without the rule SDPA records its math path here (_safe_softmax, float32 bmm)
    g = torch.Generator(device="cuda").manual_seed(0)

    def make() -> list[torch.Tensor]:
        g.manual_seed(0)
        qkv = [torch.randn(2, 4, 128, 64, device="cuda", dtype=torch.bfloat16, generator=g)
               .requires_grad_() for _ in range(3)]
        m = torch.randn(2, 1, 128, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        return [*qkv, m.transpose(-1, -2)]

    eager, compiled = make(), make()
    _attention(*eager).float().sum().backward()
    with patch(logs=frozenset({"graphs"}), capture_cache=False, program_cache=False):
        out = ef.compile(_attention)(*compiled)
    log = capsys.readouterr().err
    assert "aten::_scaled_dot_product_" in log and "_safe_softmax" not in log, log
    out.float().sum().backward()
    for a, b in zip(compiled[:3], eager[:3]):
        assert a.grad is not None and b.grad is not None
        err = (a.grad.float() - b.grad.float()).norm() / b.grad.float().norm()
        assert err < 2e-2, err
