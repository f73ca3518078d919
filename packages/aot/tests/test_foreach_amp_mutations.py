"""List-writing in-place ops (``_foreach_*_``) and torch's AMP ops functionalize: the
compiled program (reference interpreter) matches eager, outputs and written inputs, and
no in-place op is left in it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from aot_capture import compile_fn


def _foreach(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    torch._foreach_mul_([a, b], c)
    torch._foreach_addcmul_([a, b[1:]], [c, c], [b[:2], c], value=0.5)
    torch._foreach_zero_([c])
    return a.sum() + b + torch._foreach_norm([a, b])[1]


def _amp(s: torch.Tensor, tracker: torch.Tensor, found: torch.Tensor,
         g: torch.Tensor) -> torch.Tensor:
    torch._amp_foreach_non_finite_check_and_unscale_([g], found, 1.0 / s)
    return torch._amp_update_scale_(s, tracker, found, 2.0, 0.5, 2) * 1


CASES: list[tuple[str, Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]]]] = [
    ("foreach", _foreach, lambda: (torch.randn(2), torch.randn(3), torch.tensor(2.0))),
    ("amp_finite", _amp, lambda: (torch.tensor(8.0), torch.tensor(1, dtype=torch.int32),
                                  torch.tensor(0.0), torch.randn(3))),
    ("amp_inf", _amp, lambda: (torch.tensor(8.0), torch.tensor(1, dtype=torch.int32),
                               torch.tensor(0.0), torch.tensor([1.0, float("inf")]))),
]


@pytest.mark.parametrize("name,fn,make_inputs", CASES, ids=[c[0] for c in CASES])
def test_matches_eager(name: str, fn: Callable[..., Any],
                       make_inputs: Callable[[], tuple[torch.Tensor, ...]]) -> None:
    inputs = make_inputs()
    program, run = compile_fn(fn, *[t.clone() for t in inputs])
    ours = [t.clone() for t in inputs]
    got = run(ours)
    expected = fn(*inputs)
    torch.testing.assert_close(got[0] if isinstance(got, (list, tuple)) else got, expected)
    for a, b in zip(ours, inputs):
        torch.testing.assert_close(a, b)
    targets = [n.target for g in program.graphs.values() for n in g.nodes if n.op == "call"]
    assert not any(t.split(".")[0].endswith("_") for t in targets), targets
