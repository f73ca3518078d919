"""Higher-order ops (``torch.cond``, ``while_loop``, ...) in the strict capture: a graph
break before the call, which then runs eagerly between two compiled graphs. The call is
never run on fake tensors: torch runs a higher-order op's eager call through Dynamo,
which, once that failed under the capture's dispatch mode, failed again for the real
call at the break (and for the user's own eager calls later in the process)."""

from __future__ import annotations

import ember.frontend as ef
import pytest
import torch
from ember.frontend.bytecode import FullGraphError
from ember.runtime.config import patch
from torch._higher_order_ops.while_loop import while_loop


def _with_cond(x: torch.Tensor) -> torch.Tensor:
    y = x * 2 + 1
    z = torch.cond(y.sum() > 0, lambda t: t.sin(), lambda t: t.cos() - 1, (y,))
    return z.exp() + x


def test_cond_runs_eagerly_at_a_break_between_compiled_graphs(
        capsys: pytest.CaptureFixture[str]) -> None:
    compiled = ef.compile(_with_cond)
    with patch(logs=frozenset({"graph_breaks"})):
        for sign in (1.0, -1.0):  # both branches
            x = sign * torch.rand(6) + sign
            torch.testing.assert_close(compiled(x), _with_cond(x))
    assert compiled.stats.graph_breaks >= 1 and compiled.stats.graphs == 2
    err = capsys.readouterr().err
    assert "graph break in _with_cond: torch.cond (a higher-order op" in err
    assert "z = torch.cond(" in err  # the user's line
    # and torch's own eager cond still works in this process
    torch.testing.assert_close(_with_cond(torch.ones(3)), _with_cond(torch.ones(3)))


def test_fullgraph_names_the_higher_order_op() -> None:
    compiled = ef.compile(_with_cond, fullgraph=True)
    with pytest.raises(FullGraphError, match=r"torch\.cond \(a higher-order op"):
        compiled(torch.rand(4))
    torch.testing.assert_close(torch.cond(torch.tensor(True), torch.sin, torch.cos,
                                          (torch.ones(2),)), torch.ones(2).sin())


def test_while_loop_runs_eagerly_too() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        i, acc = while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * 2),
                            (torch.tensor(0), x + 1))
        return acc - i

    compiled = ef.compile(fn)
    x = torch.randn(5)
    torch.testing.assert_close(compiled(x), fn(x))
    assert compiled.stats.graph_breaks >= 1
