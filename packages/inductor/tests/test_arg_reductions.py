"""argmax/argmin results are indices (int64) in the loop IR, whatever the compared values'
dtype: typed as the values, the index of the first True of a bool mask read 2 as 1
(``max.dim`` of a mask: cumprod's gradient over inputs with zeros was wrong, found by the
OpInfo sweep) and a float-typed index lost integers past 2**24."""

from __future__ import annotations

import pytest
import torch
from helpers import compile_and_load, compile_for, trace


def test_max_dim_of_a_mask_gives_the_first_true_index(backend: str) -> None:
    x = torch.tensor([[0.0, 1, 0, 1, 1], [1, 1, 0, 0, 1], [1, 1, 1, 1, 0]])

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values, indices = torch.max(x == 0, 1)
        return values, indices

    _, run = compile_for(fn, x, backend=backend)
    values, indices = run(x)
    assert indices.tolist() == [0, 2, 4] and indices.dtype == torch.int64
    assert values.tolist() == [True, True, True]


def test_argmin_of_bytes_and_not_of_a_mask(backend: str) -> None:
    x = torch.tensor([[1, 1, 0, 1], [1, 1, 1, 0]], dtype=torch.uint8)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.argmin(x, 1)

    _, run = compile_for(fn, x, backend=backend)
    assert run(x)[0].tolist() == [2, 3]

    def of_mask(x: torch.Tensor) -> torch.Tensor:
        return torch.argmin(x.bool(), 1)

    # eager refuses a bool argmin; the kernels computed one (now an extern call, which
    # raises as eager does)
    _, run = compile_for(of_mask, x, backend=backend)
    with pytest.raises(RuntimeError, match="does not support bool input"):
        run(x)


def test_a_float_argmax_past_2_to_the_24_is_exact() -> None:
    n = 2**24 + 2
    x = torch.zeros(n)
    x[-1] = 1.0  # the last index, 16777217, is not a float32

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x)

    program, run = compile_and_load(trace(fn, (x,)))
    (index,) = run(x)
    assert int(index) == n - 1
