"""The later stages' pre-grad passes (``ember.aot.pre_grad``): run on the decomposed
forward of a training program, and the backward derived from what they return."""

from __future__ import annotations

import pytest
import torch
from aot_capture import capture
from ember.aot.config import AotConfig
from ember.aot.pipeline import aot_compile
from ember.aot.pre_grad import gradient_stop
from ember.runtime.config import patch
from ember.runtime.ir import Program, print_program
from ember.runtime.stages import PRE_GRAD_PASSES, PreGradPass


def _sin_to_cos(program: Program) -> Program:
    """A rewrite whose effect the backward shows: sin becomes cos."""
    result = program.copy()
    count = 0
    for node in result.forward.nodes:
        if node.op == "call" and node.target == "aten::sin.default":
            node.target = "aten::cos.default"
            count += 1
    if not count:
        return program
    result.metadata = {**result.metadata, "rewrites": {"sin_to_cos": count}}
    return result


def _never(program: Program) -> Program:
    raise AssertionError("this pass must not run")


def _has(target: str) -> PreGradPass:
    return PreGradPass("sin_to_cos", _sin_to_cos,
                       lambda p: any(n.target == target for n in p.forward.nodes))


def _training(program: Program, *passes: PreGradPass) -> Program:
    return aot_compile(program, AotConfig(training=True, pre_grad_passes=passes))


def _forward_and_backward(program: Program) -> tuple[str, str]:
    text = print_program(program)
    forward, _, backward = text.partition("graph backward(")
    return forward, backward


def test_the_backward_is_derived_from_the_rewritten_forward() -> None:
    x = torch.randn(8, requires_grad=True)
    result = _training(capture(lambda x: x.sin() * 3, x), _has("aten::sin.default"))
    forward, backward = _forward_and_backward(result)
    assert "= aten::cos.default(" in forward and "= aten::sin.default(" not in forward
    assert "= aten::sin.default(" in backward  # cos' derivative, not sin's
    assert result.metadata["rewrites"] == {"sin_to_cos": 1}
    assert result.metadata["aot"]["differentiable_outputs"] == [0]


def test_a_pass_that_does_not_apply_is_not_run_and_changes_nothing() -> None:
    x = torch.randn(8, requires_grad=True)
    program = capture(lambda x: x.exp() * 3, x)
    plain = print_program(_training(program))
    skipped = PreGradPass("never", _never, lambda p: False)
    assert print_program(_training(program, skipped)) == plain
    # applies, changes nothing: the training program is the one without passes
    assert print_program(_training(program, _has("aten::exp.default"))) == plain


def test_a_region_that_stops_gradients_keeps_the_passes_from_running(
        capsys: pytest.CaptureFixture[str]) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            scale = x.abs() + 1
        return x.sin() * scale

    x = torch.randn(8, requires_grad=True)
    program = capture(fn, x)
    assert gradient_stop(program.forward) is not None
    with patch(logs="patterns"):
        result = _training(program, PreGradPass("never", _never, lambda p: True))
    assert "pre-grad passes not run: %" in capsys.readouterr().err
    assert "= aten::sin.default(" in _forward_and_backward(result)[0]
    assert gradient_stop(capture(lambda x: x.sin() * x.abs(), x).forward) is None


def test_the_aot_stage_reads_the_passes_the_pipeline_hands_it() -> None:
    passes = (_has("aten::sin.default"),)
    assert AotConfig.from_options({PRE_GRAD_PASSES: passes}).pre_grad_passes == passes
    assert AotConfig.from_options({}).pre_grad_passes == ()


def test_factories_and_detach_are_no_gradient_stop() -> None:
    """``zeros_like(x)`` and ``x.detach()`` never require grad in eager: re-deriving
    requires_grad gives the same, so they do not keep the passes from running."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.sin() + torch.zeros_like(x) + x.detach() * 2

    x = torch.randn(8, requires_grad=True)
    program = capture(fn, x)
    assert gradient_stop(program.forward) is None
    result = _training(program, _has("aten::sin.default"))
    forward, backward = _forward_and_backward(result)
    assert "= aten::cos.default(" in forward and "= aten::sin.default(" in backward


def test_statistics_results_are_no_gradient_stop() -> None:
    """Layer norm's mean and rstd (results ATen does not differentiate) are no
    gradient stop: only an op's first result is compared."""
    import torch.nn.functional as F

    x = torch.randn(4, 8, requires_grad=True)
    program = capture(lambda x: F.layer_norm(x, (8,)).sin(), x)
    assert any(isinstance(n.meta, tuple) for n in program.forward.nodes)
    assert gradient_stop(program.forward) is None
