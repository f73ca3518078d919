"""Graph input names come from the user's names (arguments, locals live at a break,
module members); a name the IR reserves (``output``, the output node's) is renamed."""

from __future__ import annotations

import os

import ember.frontend as ef
import pytest
import torch
import torch.nn as nn

os.environ.setdefault("EMBER_PROGRAM_CACHE", "0")


def _argument_named_output(output: torch.Tensor) -> torch.Tensor:
    return output + 1


def _local_named_output_at_a_break(x: torch.Tensor) -> torch.Tensor:
    output = x + 1
    print("a graph break")
    return output * 2


@pytest.mark.parametrize("capture", ["strict", "trace"])
def test_an_argument_named_output(capture: str) -> None:
    compiled = ef.compile(_argument_named_output, options={"capture": capture})
    torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 2.0))
    assert compiled.stats.graphs == 1


def test_a_local_named_output_live_at_a_break() -> None:
    compiled = ef.compile(_local_named_output_at_a_break)
    torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 4.0))
    assert compiled.stats.graph_breaks == 1


def test_adaptive_log_softmax_with_loss() -> None:
    """Its forward keeps a local ``output`` alive across its data-dependent steps."""
    torch.manual_seed(0)
    module = nn.AdaptiveLogSoftmaxWithLoss(8, 10, [4, 8])
    x, target = torch.randn(6, 8), torch.tensor([0, 3, 5, 9, 1, 7])
    expected = module(x, target)
    actual = ef.compile(module)(x, target)
    torch.testing.assert_close(actual.output, expected.output)
    torch.testing.assert_close(actual.loss, expected.loss)
