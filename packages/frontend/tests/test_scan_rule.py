"""torch's ``associative_scan`` in strict capture (bytecode/scan_rules.py): one graph.

Found on transformers' Mamba, whose selective scan calls
``associative_scan(combine_fn, (A, Bu), dim=2, combine_mode="generic")`` when it sees a
compiler: the higher-order op broke the graph in every layer (14 breaks and 27
compiles for a 2-layer model). The rule computes the same inclusive scan with ordinary
ops, the combine function interpreted as user code.
"""

from __future__ import annotations

from typing import Any

import ember.frontend as ef
import pytest
import torch

scan_module = pytest.importorskip("torch._higher_order_ops.associative_scan")
associative_scan = scan_module.associative_scan


def _linear_recurrence(left: Any, right: Any) -> Any:
    # h[i] = a[i] * h[i-1] + b[i]: associative, not commutative
    a_left, b_left = left
    a_right, b_right = right
    return a_left * a_right, a_right * b_left + b_right


def _sequential(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    h, out = torch.zeros_like(b[:, 0]), []
    for i in range(a.shape[1]):
        h = a[:, i] * h + b[:, i]
        out.append(h)
    return torch.stack(out, 1)


def _mamba_like(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _, states = associative_scan(_linear_recurrence, (a, b), dim=1, combine_mode="generic")
    return states.sum(-1)


@pytest.mark.parametrize("n", [1, 2, 5, 8, 13])
def test_recurrence_scan_is_one_graph_with_eager_values_and_gradients(n: int) -> None:
    gen = torch.Generator().manual_seed(n)
    a = torch.rand(2, n, 3, generator=gen)
    b = torch.randn(2, n, 3, generator=gen, requires_grad=True)
    compiled = ef.compile(_mamba_like, backend="aot_eager")
    got = compiled(a, b)
    got.square().sum().backward()
    got_grad, b.grad = b.grad, None
    want = _sequential(a, b).sum(-1)
    want.square().sum().backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_grad, b.grad)
    stats = compiled.stats
    assert (stats.graphs, stats.graph_breaks, stats.eager_fallback_calls) == (1, 0, 0), stats


@pytest.mark.parametrize("reverse", [False, True])
def test_tensor_scan_matches_eager_generic_scan(reverse: bool) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return associative_scan(lambda p, q: p + q, x, -1, reverse=reverse,
                                combine_mode="generic")

    x = torch.randn(3, 7)
    compiled = ef.compile(f, backend="eager")
    torch.testing.assert_close(compiled(x), f(x))
    torch.testing.assert_close(compiled(x), (x.flip(-1).cumsum(-1).flip(-1) if reverse
                                             else x.cumsum(-1)))
    assert compiled.stats.graph_breaks == 0, compiled.stats


def test_non_commutative_matrix_combine_keeps_operand_order() -> None:
    # a generic (non-pointwise) combine: running matrix products, order matters
    def f(m: torch.Tensor) -> torch.Tensor:
        return associative_scan(lambda p, q: p @ q, m, 0, combine_mode="generic")

    m = torch.randn(6, 3, 3)
    want = [m[0]]
    for i in range(1, 6):
        want.append(want[-1] @ m[i])
    compiled = ef.compile(f, backend="eager")
    torch.testing.assert_close(compiled(m), torch.stack(want), rtol=1e-4, atol=1e-5)
    assert compiled.stats.graph_breaks == 0, compiled.stats


def test_pointwise_mode_on_cpu_still_breaks_and_raises_as_eager() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return associative_scan(lambda p, q: p + q, x, 0)  # pointwise: CUDA only

    x = torch.randn(4)
    with pytest.raises(ValueError, match="CUDA"):
        f(x)
    compiled = ef.compile(f, backend="eager")
    with pytest.raises(ValueError, match="CUDA"):
        compiled(x)
