"""A number computed from a data-dependent size, live at a graph break
(``bytecode.recipes.SizedBy``): read after the graph from the size of a value that has
it (``nonzero``'s rows), where the whole function ran eagerly before; a number no
tensor has as a size (an ``.item()``) still moves the break to the ``.item()``."""

from __future__ import annotations

from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.runtime.config import patch
from strict_helpers import strict


def routed_sum(h: torch.Tensor, routed: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(h)
    for e in range(3):
        (tokens,) = torch.where(routed == e)
        any_left = tokens.numel() > 0  # a SymBool over the row count: breaks at `if`
        if any_left:
            out.index_add_(0, tokens, h[tokens] * (e + 1))
    return out


def test_a_data_dependent_bool_at_a_break_is_read_from_the_graphs_output(
        capsys: Any) -> None:
    f = strict(routed_sum)
    torch.manual_seed(0)
    with patch(logs=frozenset({"dynamic"})):
        for n in (12, 12, 20, 7):
            h, routed = torch.randn(n, 4), torch.randint(0, 2, (n,))  # expert 2: no tokens
            torch.testing.assert_close(f(h, routed), routed_sum(h, routed))
    assert f.stats.eager_fallback_calls == 0 and f.stats.graphs >= 1, f.stats
    err = capsys.readouterr().err
    assert "u0 > 0 is live at a graph break: read after the graph from dim 0 of a value " \
           "with size u0" in err, err


def item_scaled(x: torch.Tensor) -> torch.Tensor:
    k = x.sum().long().item() * 2  # an .item(): no tensor has it as a size
    print(end="")  # a break with k live
    return x * k


def test_an_item_value_at_a_break_breaks_at_the_item_instead(capsys: Any) -> None:
    f = ef.compile(item_scaled, backend="aot_eager", dynamic=True,
                   options={"capture": "strict"})
    with patch(logs=frozenset({"graph_breaks"})):
        for x in (torch.ones(3), -torch.ones(4)):
            torch.testing.assert_close(f(x), item_scaled(x))
    err = capsys.readouterr().err
    assert "Tensor.item() needs the tensor's data (its value is a data-dependent size the " \
           "code after a graph break would need)" in err, err
    assert f.stats.eager_fallback_calls == 0, f.stats


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_the_rows_of_nonzero_carry_their_count_across_the_break(backend: str) -> None:
    def first_rows(x: torch.Tensor) -> torch.Tensor:
        idx = (x > 0).nonzero()
        n = idx.shape[0] * 2 + 1  # a SymInt over the row count, live at the break
        print(end="")  # a break
        return x[: n % x.shape[0]].sum() + n

    f = ef.compile(first_rows, backend=backend, options={"capture": "strict"})
    for x in (torch.tensor([1.0, -1.0, 2.0, 3.0]), torch.tensor([-1.0, -2.0, 5.0, 0.0]),
              torch.tensor([-1.0, -2.0, -5.0, 0.0])):
        torch.testing.assert_close(f(x), first_rows(x))
    assert f.stats.eager_fallback_calls == 0 and f.stats.graph_breaks >= 1, f.stats
