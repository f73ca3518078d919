"""Graph breaks in strict mode: each cause gives eager results, the right number of
graphs and breaks, a message naming the source line; fullgraph=True raises."""

from __future__ import annotations

import re

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
    n = np.linalg.norm([3.0, 4.0])  # BREAK-numpy (a NumPy function Ember does not trace)
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


def b_exception(x):
    y = x.cos()
    try:
        v = {}["missing"]
    except KeyError:
        print("handled")  # BREAK-exc
        v = 2
    return y * v


def b_context_manager(x):
    y = x + 1
    with torch.device("cpu"):  # BREAK-ctx
        y = y * 2
    return y


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
    # a break inside an except block moves to where the exception was raised; the
    # handler then breaks again
    (b_exception, (torch.randn(3),), 2, 2, "exc", "print() (inside an except"),
    # the block's end (its __exit__) runs for real too: a second break
    (b_context_manager, (torch.randn(3),), 2, 2, "ctx", "context manager device"),
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


@pytest.mark.parametrize("reasons", [(), ("",), (5,)])
def test_allow_break_refuses_what_would_match_nothing_or_everything(reasons):
    """``""`` is a part of every reason (it turned ``fullgraph=True`` off, silently);
    a non-string raised a TypeError inside the capture."""
    with pytest.raises(ValueError, match="each a non-empty string"):
        with ef.allow_break(*reasons):
            pass


def test_explain_reports_graphs_breaks_guards(capsys):
    out = ef.explain(b_print)(torch.randn(3))
    assert out.graph_count == 2 and out.break_count == 1
    assert out.ops_per_graph == [1, 1]
    assert out.breaks[0].location.line == _line_of("print")
    assert "x.dtype == torch.float32 and x.shape == (3,)" in out.guards
    assert "Graph break count: 1" in str(out)


def test_explain_counts_the_graphs_of_callees_run_at_a_break(capsys):
    # the break inside _helper_with_print runs that call for real through its own
    # compiled wrapper; its graphs are reported with the caller's (as stats count them)
    out = ef.explain(b_inlined)(torch.randn(3))
    compiled = strict(b_inlined)
    compiled(torch.randn(3))
    inner = getattr(compiled, "_compiled", compiled)
    assert out.graph_count == inner.stats.graphs == 3
    assert len(out.ops_per_graph) == 3 and all(n > 0 for n in out.ops_per_graph)
    assert "callee _helper_with_print" in out.guards


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


def test_break_inside_no_grad_block_keeps_grad_modes(capsys):
    def fn(x):
        with torch.no_grad():
            y = x * 2
            print("inside")
            z = y + 1
        return z * x

    x = torch.randn(3, requires_grad=True)
    compiled = strict(fn)
    for _ in range(2):
        got, expected = compiled(x), fn(x)
        torch.testing.assert_close(got, expected)
        assert got.requires_grad == expected.requires_grad is True
    assert torch.is_grad_enabled()
    # only the print: the second graph starts under no_grad and leaves the block
    assert compiled.stats.graph_breaks == 1 and compiled.stats.graphs == 2


def test_closure_survives_a_break(capsys):
    def fn(x):
        k = 2

        def scale(t):
            return t * k

        y = scale(x)
        print("mid")
        k = 3
        return scale(y)

    x = torch.randn(3)
    compiled = strict(fn)
    for _ in range(3):
        torch.testing.assert_close(compiled(x), x * 6)
    assert compiled.stats.compiles == 2 and compiled.stats.cache_hits == 4


def test_break_in_loop_over_list_resumes_iteration(capsys):
    def fn(xs):
        out = 0
        for i, t in enumerate(xs):
            out = out + t * i
            if i == 1:
                print("one")
        return out

    xs = [torch.randn(2) for _ in range(3)]
    compiled = strict(fn)
    for _ in range(2):
        torch.testing.assert_close(compiled(xs), fn(xs))
    assert compiled.stats.graph_breaks == 1 and compiled.stats.compiles == 2


def test_limit_after_a_break_runs_the_rest_eagerly():
    import warnings

    from ember.frontend.compiled import RecompileLimitWarning
    from ember.runtime.config import patch

    def fn(x):
        s = x.sum().item()
        return x * s + 1

    compiled = strict(fn)
    inputs = [torch.randn(3) for _ in range(5)]
    with patch(recompile_limit=2), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for t in inputs:
            torch.testing.assert_close(compiled(t), fn(t))
    limit = [w for w in caught if issubclass(w.category, RecompileLimitWarning)]
    assert len(limit) == 1 and "STACK[0]" in str(limit[0].message)
    assert compiled.stats.eager_fallback_calls == 3


def test_unsupported_bytecode_runs_the_function_eagerly():
    # (match statements and class statements, the examples before, are interpreted:
    # test_strict_match.py, test_strict_class_statements.py)
    def fn(x, scale):
        try:
            y = x * scale
        except* ValueError:
            y = x
        return y

    x = torch.randn(3)
    compiled = strict(fn)
    torch.testing.assert_close(compiled(x, 2), x * 2)
    torch.testing.assert_close(compiled(x, 1), x)
    assert compiled.stats.graphs == 0 and compiled.stats.graph_breaks == 1
    # NOTE: Python 3.12 names CALL_INTRINSIC_2 before CHECK_EG_MATCH
    assert re.search(r"unsupported bytecode (\w+, )*CHECK_EG_MATCH", compiled.breaks[0].reason)
    assert compiled.stats.eager_fallback_calls == 2
    with pytest.raises(FullGraphError, match="CHECK_EG_MATCH"):
        strict(fn, fullgraph=True)(x, 1)


def test_dead_locals_after_a_break_are_not_guarded(capsys):
    def fn(x, n):
        for i in range(n):
            x = x + i
        print("done")
        return x * 2

    compiled = strict(fn)
    x = torch.randn(3)
    for n in (2, 3):
        torch.testing.assert_close(compiled(x, n), fn(x, n))
    # n and i are dead after the print: the segment after it is reused for n=3
    assert compiled.stats.compiles == 3 and compiled.stats.cache_hits == 1
    later = [s for ip, segs in compiled.segments.items() if ip != 0 for s in segs]
    assert len(later) == 1
    assert all("n" != g.source.expr() for g in later[0].guards.guards if g.source)


class _NoisyBag:
    def __init__(self, items):
        self.items = items

    def __iter__(self):
        print("iterating")
        for item in self.items:
            yield item * 2


def test_break_inside_an_inlined_iter_runs_the_loop_for_real(capsys):
    def fn(x, bag):
        y = x + 1
        for t in bag:
            y = y + t
        return y

    x, bag = torch.randn(3), _NoisyBag([torch.randn(3) for _ in range(2)])
    compiled = strict(fn)
    for _ in range(2):
        torch.testing.assert_close(compiled(x, bag), fn(x, bag))
    assert capsys.readouterr().out.count("iterating") == 4
    assert compiled.breaks[0].reason == "call to print()"


def test_layers_with_a_break_share_one_compiled_forward(capsys):
    class Noisy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            print("layer")
            return self.lin(x).relu()

    class Deep(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([Noisy() for _ in range(6)])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    model = Deep()
    compiled = strict(model)
    x = torch.randn(2, 4)
    for _ in range(2):
        torch.testing.assert_close(compiled(x), model(x))
    # the layers share one compiled forward (guarded by type, parameters as inputs)
    # and the loop's resume point is one entry for every iteration (plus its end):
    # Deep.forward: its start, the loop's resume point (next layer, end of loop);
    # Noisy.forward: its print and after it, once for the first layer's input (no
    # grad) and once for the others'. test_strict_recompiles.py checks the count
    # does not grow with depth.
    assert compiled.stats.eager_fallback_calls == 0
    assert (compiled.stats.compiles, compiled.stats.graph_breaks) == (3 + 2 * 2, 2 + 2)
    assert capsys.readouterr().out.count("layer") == 2 * 6 * 2  # compiled, then eager


def test_a_function_run_eagerly_as_a_whole_names_its_def_line() -> None:
    # before: "f runs eagerly: unsupported bytecode LOAD_BUILD_CLASS\n  at <unknown location>"
    def except_star(x: torch.Tensor) -> torch.Tensor:
        try:
            x = x + 1
        except* ValueError:
            pass
        return x

    report = str(ef.explain(except_star)(torch.ones(1)))
    assert re.search(r"runs eagerly: unsupported bytecode (\w+, )*CHECK_EG_MATCH", report)
    assert "test_strict_breaks.py" in report and "def except_star(x" in report


_LOGGED: list[int] = []


@ef.disable
def _logged(x: torch.Tensor) -> torch.Tensor:
    _LOGGED.append(1)
    return x


@ef.nonstrict
def _region(x: torch.Tensor) -> torch.Tensor:
    return _logged(x) * 2


def test_a_disabled_call_inside_a_nonstrict_function_runs_at_every_call() -> None:
    # before: the nonstrict function's Python ran once, on fake tensors, and the
    # disabled function with it: _LOGGED == [1] after three calls
    _LOGGED.clear()
    compiled = strict(lambda x: _region(x) + 1)
    for _ in range(3):
        torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 3.0))
    assert _LOGGED == [1, 1, 1]
    assert any("call to" in b.reason and "nonstrict" in b.reason for b in compiled.breaks)


def _lstsq(a, b):
    return torch.linalg.lstsq(a, b).solution


@pytest.mark.parametrize("dynamic", [None, True, False])
def test_a_data_dependent_break_hints_only_what_would_help(dynamic, capsys):
    # lstsq's output size depends on the data: with dynamic=None or True the capture
    # with symbolic shapes was tried too, so asking for it is no hint
    compiled = ef.compile(_lstsq, dynamic=dynamic)
    a, b = torch.randn(5, 3), torch.randn(5, 2)
    torch.testing.assert_close(compiled(a, b), _lstsq(a, b))
    (brk,) = compiled.breaks
    assert "data-dependent size" in brk.reason
    if dynamic is False:
        assert "compile with dynamic=None or True" in brk.hint
    else:
        assert "even a capture with symbolic shapes" in brk.hint
        assert "dynamic=None or True" not in brk.hint


def _scaled(x):
    return x * x.shape[-1] ** -0.5


def test_a_size_used_as_a_float_by_arithmetic_stays_symbolic():
    compiled = ef.compile(_scaled, dynamic=True)
    for n in (8, 9, 12):
        x = torch.randn(3, n)
        torch.testing.assert_close(compiled(x), _scaled(x))
    assert (compiled.stats.compiles, compiled.breaks) == (1, [])


def _leaky(x):
    return torch.nn.functional.leaky_relu(x, x.shape[-1] ** -0.5)  # no tensor form


def test_a_size_used_as_a_float_under_dynamic_shapes_says_so(capsys):
    """A dimension the user marked stays symbolic: the call that cannot take the float
    breaks the graph, and the hint says why."""
    compiled = ef.compile(_leaky)
    x = torch.randn(3, 8)
    ef.mark_dynamic(x, 1)
    torch.testing.assert_close(compiled(x), _leaky(x))
    (brk,) = compiled.breaks
    assert "SymFloat" in brk.reason, brk
    assert "float made from a symbolic size" in brk.hint and "data-dependent" not in brk.hint


def test_a_size_used_as_a_float_under_dynamic_true_compiles_per_size():
    """Sizes dynamic=True made symbolic: the function turns them off (declined_sizes) and
    compiles per size, one graph each, no break."""
    compiled = ef.compile(_leaky, dynamic=True)
    for n in (8, 9):
        x = torch.randn(3, n)
        torch.testing.assert_close(compiled(x), _leaky(x))
    assert compiled.breaks == [] and compiled.stats.graphs == 2
