"""Graph breaks in strict mode: each cause gives eager results, the right number of
graphs and breaks, a message naming the source line; fullgraph=True raises."""

from __future__ import annotations

import ember.frontend as ef
import numpy as np
import pytest
import torch
from ember.frontend.bytecode import FullGraphError
from strict_helpers import check, strict


def b_print(x):
    y = x + 1
    print("value shape", y.shape)  # BREAK-print
    return y * 2


def b_data_dependent_if(x):
    y = x * 2
    if y.sum() > 0:  # BREAK-if
        return y + 1
    return y - 1


def b_item(x):
    s = x.sum().item()  # BREAK-item
    return x * s


def b_tolist(x):
    vals = x.tolist()  # BREAK-tolist
    return x + len(vals)


def b_numpy(x):
    y = x.relu()
    n = np.sqrt(4.0)  # BREAK-numpy
    return y * float(n)


def _helper_with_print(x):
    print("inside")  # BREAK-inner
    return x * 3


def b_inlined(x):
    y = x + 1
    z = _helper_with_print(y)
    return z - 1


@ef.disable
def _eager_only(x):
    return x * 5


def b_disable(x):
    return _eager_only(x + 1) + 1  # BREAK-disable


def _generator(x):
    for i in range(2):
        yield x * i


def b_generator(x):
    return sum(list(_generator(x))) + x  # BREAK-gen


def b_loop_break(x, y):
    out = []
    for i in range(3):
        x = x * 2
        print(i)  # BREAK-loop
        out.append(x + y)
    return torch.stack(out)


def _line_of(marker: str) -> int:
    import inspect

    src, _ = inspect.getsourcelines(inspect.getmodule(_line_of))
    for i, line in enumerate(src):
        if f"# BREAK-{marker}" in line:
            return i + 1
    raise AssertionError(marker)


CASES = [
    (b_print, (torch.randn(3),), 2, 1, "print", "print"),
    (b_data_dependent_if, (torch.randn(3),), 2, 1, "if", "data-dependent"),
    (b_item, (torch.randn(3),), 2, 1, "item", "item()"),
    (b_tolist, (torch.randn(3),), 1, 1, "tolist", "tolist()"),
    (b_numpy, (torch.randn(3),), 2, 1, "numpy", "cannot look into"),
    # the callee runs through its own compiled wrapper; its graphs and breaks count too
    (b_inlined, (torch.randn(3),), 3, 2, "inner", "print"),
    (b_disable, (torch.randn(3),), 2, 1, "disable", "ember.frontend.disable"),
    (b_generator, (torch.randn(3),), 1, 3, "gen", "generator"),
]


@pytest.mark.parametrize("fn,args,graphs,breaks,marker,reason", CASES,
                         ids=[c[0].__name__ for c in CASES])
def test_break_runs_eagerly_and_names_line(fn, args, graphs, breaks, marker, reason,
                                           capsys):
    compiled = check(fn, *args, graphs=graphs, breaks=breaks)
    first = compiled.breaks[0]
    assert reason in first.reason
    assert first.location is not None
    assert first.location.line == _line_of(marker)
    assert first.location.file.endswith("test_strict_breaks.py")
    assert f"BREAK-{marker}" in first.location.text


@pytest.mark.parametrize("fn,args,graphs,breaks,marker,reason", CASES,
                         ids=[c[0].__name__ for c in CASES])
def test_fullgraph_raises(fn, args, graphs, breaks, marker, reason, capsys):
    compiled = strict(fn, fullgraph=True)
    with pytest.raises(FullGraphError) as err:
        compiled(*args)
    text = str(err.value)
    assert reason in text
    assert "test_strict_breaks.py" in text and str(_line_of(marker)) in text
    assert f"BREAK-{marker}" in text and "hint:" in text


def test_data_dependent_both_branches():
    compiled = strict(b_data_dependent_if)
    pos, neg = torch.ones(3), -torch.ones(3)
    torch.testing.assert_close(compiled(pos), b_data_dependent_if(pos))
    torch.testing.assert_close(compiled(neg), b_data_dependent_if(neg))
    # one graph before the branch, one per branch taken
    assert compiled.stats.graphs == 3 and compiled.stats.graph_breaks == 1


def test_break_inside_loop(capsys):
    x, y = torch.randn(3), torch.randn(3)
    compiled = strict(b_loop_break)
    torch.testing.assert_close(compiled(x, y), b_loop_break(x, y))
    torch.testing.assert_close(compiled(x, y), b_loop_break(x, y))
    # a break per iteration: resume points differ by loop state (the counter)
    assert compiled.stats.graph_breaks == 3
    assert capsys.readouterr().out.count("\n") == 12  # eager and compiled, twice


def test_allow_break_under_fullgraph(capsys):
    compiled = strict(b_print, fullgraph=True)
    x = torch.randn(3)
    with ef.allow_break("print"):
        torch.testing.assert_close(compiled(x), b_print(x))
    compiled2 = strict(b_print, fullgraph=True, options={"allow_breaks": ("print",)})
    torch.testing.assert_close(compiled2(x), b_print(x))


def test_explain_reports_graphs_breaks_guards(capsys):
    out = ef.explain(b_print)(torch.randn(3))
    assert out.graph_count == 2 and out.break_count == 1
    assert out.ops_per_graph == [1, 1]
    assert out.breaks[0].location.line == _line_of("print")
    assert "L['x']: Tensor float32[3]" in out.guards
    assert "Graph break count: 1" in str(out)


def test_nonstrict_region_is_traced():
    calls = []

    @ef.nonstrict
    def region(x):
        calls.append(1)
        return x.sin() * 2

    def fn(x):
        return region(x) + 1

    x = torch.randn(3)
    compiled = strict(fn)
    torch.testing.assert_close(compiled(x), x.sin() * 2 + 1)
    torch.testing.assert_close(compiled(x), x.sin() * 2 + 1)
    assert compiled.stats.graphs == 1 and compiled.stats.graph_breaks == 0
    assert len(calls) == 1  # traced once, its Python does not run again


def test_graph_breaks_log(monkeypatch, capsys):
    from ember.runtime.config import patch

    with patch(logs=frozenset({"graph_breaks"})):
        strict(b_print)(torch.randn(3))
    err = capsys.readouterr().err
    assert "graph break" in err and "print" in err and str(_line_of("print")) in err
