"""Which guards a dynamic recording keeps (GraphRecorder(dynamic=True).finish()): one
form per relation, none implied by the others or by the ranges, and none from torch's
performance heuristics that leave the recorded ops unchanged."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.export
from ember.runtime import import_exported
from ember.runtime.callable import ProgramCallable
from ember.runtime.ir import InputSpec, verify
from ember.runtime.tracing import GraphRecorder


def guards(fn: Callable[..., Any], *inputs: torch.Tensor,
           dims: dict[int, tuple[int, int | None]]) -> list[str]:
    """The guard lines of ``fn`` recorded with ``dims`` of each input dynamic."""
    rec = GraphRecorder(dynamic=True)
    fakes = [rec.add_input(x, InputSpec(f"x{i}"), dynamic_dims=dims)
             for i, x in enumerate(inputs)]
    with rec:
        out = fn(*fakes)
    program = rec.finish([out])
    verify(program)
    return [g.expr for g in program.forward.guards]


class ConvBN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.relu(self.bn(self.conv(x)))
        return out


def test_conv_backend_heuristic_is_not_a_guard() -> None:
    # torch's fake convolution asks batch >= 16 to pick mkldnn over its own kernel: the
    # recorded convolution and its contiguous output are the same either way
    conv = torch.nn.Conv2d(3, 4, 3)
    assert guards(conv, torch.randn(4, 3, 8, 8), dims={0: (2, 64)}) == []


def test_conv_backend_heuristic_stays_a_guard_for_a_channels_last_input() -> None:
    # the backend then decides the output's memory format: kept
    conv = torch.nn.Conv2d(3, 4, 3)
    x = torch.randn(4, 3, 8, 8).to(memory_format=torch.channels_last)
    assert guards(conv, x, dims={0: (2, 64)}) == ["s0 < 16"]


def test_exported_conv_bn_with_a_batch_dim_runs_at_every_batch_in_its_range() -> None:
    model = ConvBN().eval()
    ep = torch.export.export(model, (torch.randn(4, 3, 8, 8),),
                             dynamic_shapes=({0: torch.export.Dim("batch", min=2, max=64)},))
    program = import_exported(ep)
    assert program.forward.guards == []
    for batch in (2, 16, 64):
        x = torch.randn(batch, 3, 8, 8)
        with torch.no_grad():
            got = ProgramCallable(program)([x])[0]
            torch.testing.assert_close(got, model(x))
