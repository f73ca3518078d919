"""A value that a matmul reads through a row-major reshape, and that the graph also
returns (a GELU the backward saves), is computed by one kernel: the reshape's buffer
holds the value, which is returned as a view of it (``views.reshaped_bases``). Before,
a second kernel computed the value again for the output: in a GPT's training forward,
every saved GELU twice (0.9 ms a step on an H100)."""

from __future__ import annotations

import pytest
import torch
from helpers import compile_for


def _kernels(program: object) -> list[str]:
    wrapper = program.files["forward/wrapper.py"].decode()  # type: ignore[attr-defined]
    return [line.strip() for line in wrapper.splitlines() if line.strip().startswith("# kernel")]


@pytest.mark.parametrize("chain", [1, 2])
def test_the_value_and_its_reshape_share_one_kernel(backend: str, chain: int) -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.nn.functional.gelu(x)
        flat = g.view(-1, 8) if chain == 1 else g.view(8, 8).view(-1, 8)
        return g, flat @ w

    x, w = torch.randn(2, 4, 8), torch.randn(8, 3)
    program, run = compile_for(fn, x, w, backend=backend)
    assert len(_kernels(program)) == 1, _kernels(program)
    got, expected = run(x, w), fn(x, w)
    torch.testing.assert_close(got[0], expected[0])
    torch.testing.assert_close(got[1], expected[1])


def test_a_reshape_stored_in_another_layout_leaves_the_value_alone(backend: str) -> None:
    # the matmul reads the transposed reshape: its buffer is not the value's row-major
    # order, so the value is computed by its own kernel, as before
    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.nn.functional.gelu(x)
        return g, g.view(-1, 8).t() @ w

    x, w = torch.randn(2, 4, 8), torch.randn(8, 3)
    program, run = compile_for(fn, x, w, backend=backend)
    got, expected = run(x, w), fn(x, w)
    torch.testing.assert_close(got[0], expected[0])
    torch.testing.assert_close(got[1], expected[1])
