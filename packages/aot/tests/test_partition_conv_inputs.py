"""``aot.save_conv_inputs``: a forward value that a backward convolution or matmul
reads, and that a forward one already wrote to memory, is saved rather than recomputed
(recomputing it would write it and read it back a second time)."""

from __future__ import annotations

import pytest
import torch
from aot_capture import capture, compile_fn
from ember.aot.config import AotConfig
from ember.aot.partition.extern_reads import SAVED_FOR_EXTERN
from ember.aot.pipeline import aot_compile
from ember.runtime.config import patch


def _conv_bn_relu_conv(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor,
                       gamma: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    y = torch.nn.functional.conv2d(x, w1)
    y = torch.nn.functional.batch_norm(y, None, None, gamma, beta, training=True)
    return torch.nn.functional.conv2d(torch.relu(y), w2).sum()


def _norm_linear_tanh_linear(x: torch.Tensor, w1: torch.Tensor,
                             w2: torch.Tensor) -> torch.Tensor:
    h = torch.nn.functional.layer_norm(x, (16,))
    return (torch.tanh(h @ w1) @ w2).sum()


def _inputs(kind: str) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    if kind == "conv":
        return (torch.randn(2, 3, 10, 10, requires_grad=True),
                torch.randn(4, 3, 3, 3, requires_grad=True),
                torch.randn(4, 4, 3, 3, requires_grad=True),
                torch.ones(4, requires_grad=True), torch.zeros(4, requires_grad=True))
    return (torch.randn(8, 16, requires_grad=True), torch.randn(16, 32, requires_grad=True),
            torch.randn(32, 4, requires_grad=True))


FUNCTIONS = {"conv": _conv_bn_relu_conv, "linear": _norm_linear_tanh_linear}


def _partition(kind: str, save: bool,
               capsys: pytest.CaptureFixture[str]) -> tuple[list[str], list[str], list[str]]:
    """(saved value names, recomputed value names, log lines)."""
    program = capture(FUNCTIONS[kind], *_inputs(kind))
    capsys.readouterr()
    with patch(logs=frozenset({"partition"})), torch.enable_grad():
        aot_compile(program, AotConfig(training=True, save_conv_inputs=save))
    lines = capsys.readouterr().err.splitlines()
    saved = [line.split()[1] for line in lines if line.startswith("  saved ")]
    recomputed = [line.split()[1] for line in lines if line.startswith("  recomputed ")]
    return saved, recomputed, lines


def test_the_relu_a_convolution_reads_is_saved(capsys: pytest.CaptureFixture[str]) -> None:
    saved, recomputed, lines = _partition("conv", True, capsys)
    assert "relu" in saved and "relu" not in recomputed, lines
    assert any(line.split()[1] == "relu" and line.endswith(SAVED_FOR_EXTERN)
               for line in lines if line.startswith("  saved ")), lines
    # the batch norm's own pointwise work is still recomputed from the saved convolution
    assert "convolution" in saved and recomputed, lines


def test_without_the_option_the_cut_recomputes_it(capsys: pytest.CaptureFixture[str]) -> None:
    saved, recomputed, lines = _partition("conv", False, capsys)
    assert "relu" in recomputed and "relu" not in saved, lines
    assert not any(line.endswith(SAVED_FOR_EXTERN) for line in lines)


def test_matmul_inputs_are_saved_too(capsys: pytest.CaptureFixture[str]) -> None:
    # the layer norm's output and the tanh, each read by a forward and a backward matmul
    saved, recomputed, lines = _partition("linear", True, capsys)
    for value in ("native_layer_norm[0]", "tanh"):
        assert any(line.split()[1] == value and line.endswith(SAVED_FOR_EXTERN)
                   for line in lines if line.startswith("  saved ")), lines
    assert "mm" not in saved and "tanh" not in recomputed, lines
    # without the option they are left to the cut: the layer norm's output is recomputed
    # from what the cut saves; the tanh, which its own gradient reads, is saved rather
    # than the matmul result it is computed from (as many bytes: the tie goes to
    # recomputing fewer ops)
    saved, recomputed, lines = _partition("linear", False, capsys)
    assert "native_layer_norm[0]" not in saved and "tanh" in saved, lines
    assert "mm" not in saved and "tanh" not in recomputed, lines
    assert not any(line.endswith(SAVED_FOR_EXTERN) for line in lines)


def test_a_max_pool_with_its_indices_is_recomputed(
        capsys: pytest.CaptureFixture[str]) -> None:
    # the pooled output feeds the next convolution, but saving it would save its int64
    # indices too (the backward reads them): the cut recomputes the pool instead. Its
    # input (8,192 elements) is over aot.recompute_reduction_limit: a pooling window is
    # not a large reduction (recompute_rules.py), so that limit does not apply
    def f(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        y = torch.relu(torch.nn.functional.conv2d(x, w1, padding=1))
        pooled = torch.nn.functional.max_pool2d(y, 2)
        return torch.nn.functional.conv2d(pooled, w2).sum()

    torch.manual_seed(0)
    inputs = (torch.randn(2, 3, 32, 32, requires_grad=True),
              torch.randn(4, 3, 3, 3, requires_grad=True),
              torch.randn(4, 4, 3, 3, requires_grad=True))
    program = capture(f, *inputs)
    capsys.readouterr()
    with patch(logs=frozenset({"partition"})), torch.enable_grad():
        aot_compile(program, AotConfig(training=True))
    lines = capsys.readouterr().err.splitlines()
    saved = [line.split()[1] for line in lines if line.startswith("  saved ")]
    assert not any(name.startswith("max_pool2d") for name in saved), lines
    assert any(line.split()[1].startswith("max_pool2d") for line in lines
               if line.startswith("  recomputed ")), lines


@pytest.mark.parametrize("kind", list(FUNCTIONS))
def test_gradients_match_eager(kind: str) -> None:
    expected_inputs = _inputs(kind)
    FUNCTIONS[kind](*expected_inputs).backward()
    for save in (True, False):
        inputs = _inputs(kind)
        with torch.enable_grad():
            _, run = compile_fn(FUNCTIONS[kind], *inputs,
                                config=AotConfig(training=True, save_conv_inputs=save))
            (out,) = run(list(inputs))
            out.backward()
        for got, want in zip(inputs, expected_inputs, strict=True):
            assert got.grad is not None and want.grad is not None
            torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-5)


def test_the_option_takes_a_bool() -> None:
    with pytest.raises(ValueError, match=r"option 'aot.save_conv_inputs'=1: expected bool"):
        AotConfig.from_options({"aot.save_conv_inputs": 1})
    assert not AotConfig.from_options({"aot.save_conv_inputs": False}).save_conv_inputs
