"""NumPy ufuncs on capture-time constants (bytecode/numpy_rules.py): computed at capture.

Found on transformers' Reformer, whose ``_get_least_common_mult_chunk_len`` calls
``np.lcm(config.lsh_attn_chunk_length, config.local_attn_chunk_length)``: ``np.lcm`` is
not in the NumPy tables, so every call broke the graph although both arguments are
constants. A ufunc is pure, so on constant scalars its result is a constant.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from strict_helpers import strict


class _Config:
    a = 4
    b = 6


def test_ufunc_of_constants_is_a_constant_and_guarded() -> None:
    config = _Config()

    def f(x: torch.Tensor) -> Any:
        return x * int(np.lcm(config.a, config.b)) + np.gcd(config.a, config.b)

    compiled = strict(f)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), f(x))
    assert compiled.stats.graph_breaks == 0 and compiled.stats.graphs == 1
    config.a = 5  # the arguments are guarded: a new value compiles again
    torch.testing.assert_close(compiled(x), f(x))
    assert compiled.stats.graph_breaks == 0 and compiled.stats.compiles == 2


def test_ufunc_result_type_is_numpys() -> None:
    def f(x: torch.Tensor) -> Any:
        return x + 1, np.lcm(4, 6), np.logaddexp(0.0, 0.0)

    compiled = strict(f)
    _, lcm, lae = compiled(torch.zeros(1))
    assert type(lcm) is np.int64 and lcm == 12
    assert type(lae) is np.float64 and lae == np.logaddexp(0.0, 0.0)
    assert compiled.stats.graph_breaks == 0


def test_ufunc_of_a_symbolic_size_still_breaks_naming_it() -> None:
    def f(x: torch.Tensor) -> Any:
        return x * int(np.lcm(x.shape[0], 4))

    compiled = strict(f, dynamic=True)
    for n in (6, 7):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), f(x))
    assert compiled.stats.graph_breaks == 1, compiled.stats
    reasons = [b.describe() for b in compiled.breaks]
    assert "numpy.lcm" in reasons[0], reasons
