"""``torch.inference_mode()`` in and around compiled code: results made in it are
inference tensors as in eager, ``torch.is_inference_mode_enabled()`` reads true inside
the capture, the mode a call is made under is guarded (bytecode/inference_blocks.py,
inference_outputs.py), and ``t.is_inference()`` of an input reads the real tensor's flag,
guarded (bytecode/inference_tensors.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.frontend.bytecode.sources import LocalSource
from ember.frontend.capture_cache_codec import decode_source, encode_source
from torch import nn

BACKENDS = ["eager", "aot_eager"]
W = torch.randn(3, requires_grad=True)


def _flags(value: Any) -> list[Any]:
    """``(is_inference, requires_grad)`` of each tensor of ``value``; other values as
    they are."""
    items = value if isinstance(value, tuple) else (value,)
    return [(v.is_inference(), v.requires_grad) if isinstance(v, torch.Tensor) else v
            for v in items]


def _same_as_eager(fn: Callable[..., Any], compiled: Callable[..., Any], *args: Any) -> Any:
    expected, got = fn(*args), compiled(*args)
    assert _flags(got) == _flags(expected)
    for g, e in zip(got if isinstance(got, tuple) else (got,),
                    expected if isinstance(expected, tuple) else (expected,)):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(g, e)
    return got


def block(x: torch.Tensor) -> Any:
    a = x + 1
    with torch.inference_mode():
        inside = torch.is_inference_mode_enabled()
        y = x * 2
        view = x[1:]  # a view of a normal tensor: normal, as eagerly
    return a, y, view, y + a, inside, torch.is_inference_mode_enabled()


@torch.inference_mode()
def _helper(x: torch.Tensor) -> torch.Tensor:
    return x.sin() * W


def decorated(x: torch.Tensor) -> Any:
    return _helper(x), x * W


@pytest.mark.parametrize("backend", [*BACKENDS, "inductor"])
def test_results_of_an_inference_mode_block_are_inference_tensors(backend: str) -> None:
    compiled = ef.compile(block, backend=backend)
    x = torch.randn(3)
    for _ in range(2):
        out = _same_as_eager(block, compiled, x)
        assert out[1].is_inference() and out[4] is True
    assert compiled.stats.graphs == 1 and compiled.stats.graph_breaks == 0
    assert not torch.is_inference_mode_enabled()
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
        out[1].add_(1)  # as eagerly: outside inference mode


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_function_decorated_with_inference_mode_is_inlined(backend: str) -> None:
    compiled = ef.compile(decorated, backend=backend)
    out = _same_as_eager(decorated, compiled, torch.randn(3))
    assert _flags(out) == [(True, False), (False, True)]
    assert compiled.stats.graphs == 1 and compiled.stats.graph_breaks == 0


def test_what_eager_refuses_on_inference_tensors_raises_the_same() -> None:
    def write_after(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            y = x * 2
        y.add_(1)
        return y

    def save_for_backward(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            y = x * 2
        return (y * W).sum()

    for fn, message in ((write_after, "Inplace update to inference tensor"),
                        (save_for_backward, "Inference tensors cannot be saved")):
        with pytest.raises(RuntimeError, match=message):
            fn(torch.randn(3))
        with pytest.raises(RuntimeError, match=message):
            ef.compile(fn, backend="aot_eager")(torch.randn(3))


def test_a_graph_break_inside_the_block_keeps_inference_mode() -> None:
    def fn(x: torch.Tensor) -> Any:
        with torch.inference_mode():
            y = x * 2
            torch._dynamo.graph_break()
            z = y + 1
            inside = torch.is_inference_mode_enabled(), torch.is_grad_enabled()
        return y, z, x + 1, inside

    compiled = ef.compile(fn, backend="aot_eager")
    for _ in range(2):
        _same_as_eager(fn, compiled, torch.randn(3))
        assert not torch.is_inference_mode_enabled() and torch.is_grad_enabled()
    assert "inference_mode block" in compiled.breaks[0].reason


def reads_mode(x: torch.Tensor) -> torch.Tensor:
    if torch.is_inference_mode_enabled():
        return x + 1
    return x - 1


@pytest.mark.parametrize("capture", ["strict", "trace"])
def test_the_mode_of_the_call_is_guarded(capture: str) -> None:
    x = torch.randn(3, requires_grad=True)
    for fn in (reads_mode, lambda x: x * 2):
        compiled = ef.compile(fn, backend="aot_eager", options={"capture": capture})
        _same_as_eager(fn, compiled, x)  # grad mode on: requires grad
        with torch.no_grad():
            _same_as_eager(fn, compiled, x)
        with torch.inference_mode():  # grad mode off too: only the inference guard fails
            out = _same_as_eager(fn, compiled, x)
            assert out[0].is_inference() and not out[0].requires_grad
        with torch.no_grad():
            _same_as_eager(fn, compiled, x)
        assert compiled.stats.compiles == 3
        assert compiled.stats.cache_hits == 1


def test_trace_capture_results_of_the_block_are_inference_tensors() -> None:
    compiled = ef.compile(block, backend="aot_eager", options={"capture": "trace"})
    x = torch.randn(3)
    out = _same_as_eager(block, compiled, x)
    assert out[1].is_inference()


# ---- t.is_inference() of an input ----------------------------------------------------


def branch_on_flag(x: torch.Tensor) -> torch.Tensor:
    if x.is_inference():
        return x + 1
    return x - 1


def function_of_flag(x: torch.Tensor) -> Any:
    return torch.is_inference(x), torch.Tensor.is_inference(x), x * 2


@pytest.mark.parametrize("fn", [branch_on_flag, function_of_flag])
def test_is_inference_of_an_input_reads_the_real_tensor_guarded(fn: Callable[..., Any]
                                                                 ) -> None:
    with torch.inference_mode():
        inference = torch.randn(3)
    normal = torch.randn(3)
    compiled = ef.compile(fn, backend="eager")
    for x in (inference, normal, inference, normal):
        _same_as_eager(fn, compiled, x)
    assert compiled.stats.compiles == 2 and compiled.stats.cache_hits == 2


def test_is_inference_of_a_parameter_and_of_a_made_tensor() -> None:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> Any:
            with torch.inference_mode():
                y = x * 2
            return self.lin.weight.is_inference(), y.is_inference(), (x + 1).is_inference()

    m = M()
    assert ef.compile(m, backend="eager")(torch.randn(3)) == m(torch.randn(3)) == (
        False, True, False)


def test_the_flag_source_is_portable() -> None:
    from ember.frontend.bytecode.inference_tensors import InferenceFlagSource

    source = InferenceFlagSource(LocalSource("x"))
    assert decode_source(encode_source(source)) == source
    assert source.expr() == "x.is_inference()"
