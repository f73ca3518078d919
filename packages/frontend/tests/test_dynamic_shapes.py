"""Dynamic shapes in the frontend: ``dynamic=None|True|False``, automatic dynamic,
``mark_dynamic``/``mark_static``/``maybe_mark_dynamic``, and the shape guards (ranges,
duck-sized equalities, relations with their source lines), in both capture modes."""

from __future__ import annotations

import re
import warnings
from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.frontend.compiled import RecompileLimitWarning
from ember.runtime.config import patch

MODES = ["strict", "trace"]


def compiled(fn: Any, capture: str, **kw: Any) -> Any:
    return ef.compile(fn, backend="eager", options={"capture": capture}, **kw)


def guard_lines(f: Any, capsys: pytest.CaptureFixture[str], *args: Any) -> list[str]:
    """The shape guards logged (``EMBER_LOGS=guards``) while calling ``f(*args)``."""
    capsys.readouterr()
    with patch(logs=frozenset({"guards"})):
        f(*args)
    err = capsys.readouterr().err
    return [line.strip() for line in err.splitlines()
            if ".size(" in line or ".shape ==" in line]


def affine(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ w) * 2


@pytest.mark.parametrize("capture", MODES)
def test_batch_sweep_compiles_twice_with_automatic_dynamic(capture: str) -> None:
    f = compiled(affine, capture)
    w = torch.randn(8, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecompileLimitWarning)
        for batch in range(1, 65):
            x = torch.randn(batch, 8)
            torch.testing.assert_close(f(x, w), affine(x, w))
    assert f.stats.compiles == 2, f.stats
    assert f.stats.recompile_limit_fallbacks == 0 and f.stats.eager_fallback_calls == 0
    assert f.stats.cache_hits == 62


@pytest.mark.parametrize("capture", MODES)
def test_dynamic_true_compiles_once_and_false_per_size(capture: str) -> None:
    always = compiled(affine, capture, dynamic=True)
    never = compiled(affine, capture, dynamic=False)
    w = torch.randn(8, 4)
    for batch in range(2, 7):
        x = torch.randn(batch, 8)
        torch.testing.assert_close(always(x, w), affine(x, w))
        torch.testing.assert_close(never(x, w), affine(x, w))
    assert always.stats.compiles == 1
    assert never.stats.compiles == 5


@pytest.mark.parametrize("capture", MODES)
def test_dynamic_true_guards_read_like_sizes(capture: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    f = compiled(lambda x, y: x + y, capture, dynamic=True)
    lines = [re.sub(r"\(symbol s\d+\)", "(symbol s)", line.split("  # ")[0])
             for line in guard_lines(f, capsys, torch.randn(4, 3), torch.randn(4, 3))]
    # y's sizes are x's symbols (one relation each), checked as equalities
    assert "x.size(0) in [2, inf) (symbol s)" in lines, lines
    assert "x.size(1) in [2, inf) (symbol s)" in lines, lines
    assert "y.size(0) == x.size(0)" in lines and "y.size(1) == x.size(1)" in lines, lines
    assert any(re.match(r"x\.dtype == torch\.float32 and x\.shape == "
                        r"\(x\.size\(0\), x\.size\(1\)\) and x\.stride\(\) == "
                        r"\(x\.size\(1\), 1\)", line) for line in lines), lines
    assert f(torch.ones(5, 2), torch.ones(5, 2)).shape == (5, 2)
    assert f.stats.compiles == 1
    f(torch.ones(5, 2), torch.ones(1, 2))  # broadcasting: a new graph, y.size(0) == 1
    assert f.stats.compiles == 2


@pytest.mark.parametrize("capture", MODES)
def test_sizes_zero_and_one_specialise(capture: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    f = compiled(lambda x: x * 2, capture, dynamic=True)
    lines = guard_lines(f, capsys, torch.randn(1, 5))
    assert any("x.shape == (1, x.size(1))" in line for line in lines), lines
    f(torch.randn(1, 7))
    assert f.stats.compiles == 1
    f(torch.randn(3, 7))
    assert f.stats.compiles == 2


@pytest.mark.parametrize("capture", MODES)
def test_mark_dynamic_range_is_guarded(capture: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    f = compiled(lambda x: x.sum(0), capture, dynamic=False)
    x = torch.randn(8, 3)
    ef.mark_dynamic(x, 0, min=4, max=16)
    lines = guard_lines(f, capsys, x)
    assert any(re.fullmatch(r"x\.size\(0\) in \[4, 16\] \(symbol s\d+\)", line)
               for line in lines), lines
    assert "x.shape == (x.size(0), 3)" in " ".join(lines)
    for n in (4, 16):
        torch.testing.assert_close(f(torch.ones(n, 3)), torch.full((3,), float(n)))
    assert f.stats.compiles == 1
    with patch(logs=frozenset({"recompiles"})):
        f(torch.ones(17, 3))
    assert f.stats.compiles == 2
    assert re.search(r"x\.size\(0\) in \[4, 16\] \(symbol s\d+\) \(got 17\)",
                     capsys.readouterr().err)


def test_mark_dynamic_checks_its_arguments() -> None:
    x = torch.ones(2, 3)
    with pytest.raises(IndexError, match="dim 2 is out of range for a tensor of rank 2"):
        ef.mark_dynamic(x, 2)
    with pytest.raises(ValueError, match=r"empty range \[5, 4\]"):
        ef.mark_dynamic(x, 0, min=5, max=4)
    with pytest.raises(TypeError, match="expected a tensor"):
        ef.mark_static([1], 0)  # type: ignore[arg-type]


def pinned(x: torch.Tensor) -> torch.Tensor:
    if x.size(0) == 8:  # pins x.size(0)
        return x + 1
    return x - 1


@pytest.mark.parametrize("capture", MODES)
def test_mark_dynamic_on_a_pinned_dim_names_the_dim_and_line(capture: str) -> None:
    x = torch.randn(8, 3)
    ef.mark_dynamic(x, 0)
    with pytest.raises(ef.DynamicDimError,
                       match=r"x\.size\(0\) was marked dynamic \(mark_dynamic\) but is "
                             r"static \(8\): the program specialised it") as info:
        compiled(pinned, capture)(x)
    assert "if x.size(0) == 8" in str(info.value)


@pytest.mark.parametrize("capture", MODES)
def test_maybe_mark_dynamic_on_a_pinned_dim_stays_static(
        capture: str, capsys: pytest.CaptureFixture[str]) -> None:
    x = torch.randn(8, 3)
    ef.maybe_mark_dynamic(x, 0)
    f = compiled(pinned, capture)
    with patch(logs=frozenset({"dynamic"})):
        torch.testing.assert_close(f(x), x + 1)
    err = capsys.readouterr().err
    assert "x.size(0) stays static (8, asked by maybe_mark_dynamic): the program " \
           "specialised it" in err, err


@pytest.mark.parametrize("capture", MODES)
def test_mark_static_wins_over_dynamic_true(capture: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    x = torch.randn(4, 3)
    ef.mark_static(x, 1)
    f = compiled(lambda x: x * 2, capture, dynamic=True)
    lines = guard_lines(f, capsys, x)
    assert any("x.shape == (x.size(0), 3)" in line for line in lines), lines


def halves(x: torch.Tensor) -> torch.Tensor:
    y = x.view(x.size(0), 2, -1)  # needs x.size(1) % 2 == 0
    return y.sum(1)


@pytest.mark.parametrize("capture", MODES)
def test_relation_guards_carry_their_source_line(capture: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    f = compiled(halves, capture, dynamic=True)
    lines = guard_lines(f, capsys, torch.randn(3, 8))
    relation = [line for line in lines if line.startswith("x.size(1) % 2 == 0  # from ")]
    assert relation, lines
    assert relation[0].endswith("in halves: y = x.view(x.size(0), 2, -1)  # needs "
                                "x.size(1) % 2 == 0"), relation
    torch.testing.assert_close(f(torch.ones(5, 6)), torch.full((5, 3), 2.0))
    assert f.stats.compiles == 1
    with patch(logs=frozenset({"recompiles"})), pytest.raises(RuntimeError):
        f(torch.ones(5, 7))  # a new capture, which raises as eager does
    err = capsys.readouterr().err
    assert re.search(r"guard failed: [^;]*% 2\)? == 0 \(got .*x\.size\(1\) = 7\)", err), err


@pytest.mark.parametrize("capture", MODES)
def test_automatic_dynamic_is_logged(capture: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    f = compiled(affine, capture)
    w = torch.randn(8, 4)
    with patch(logs=frozenset({"dynamic"})):
        f(torch.randn(8, 8), w)
        f(torch.randn(16, 8), w)
    err = capsys.readouterr().err
    assert "automatic: x.size(0) changed 8 -> 16 in affine, recompiling with it " \
           "symbolic" in err, err
    assert "x.size(0) is symbolic: s0 in [2, inf) (automatic)" in err, err


@pytest.mark.parametrize("capture", MODES)
def test_automatic_dynamic_needs_a_size_only_change(capture: str) -> None:
    f = compiled(affine, capture)
    w = torch.randn(8, 4)
    f(torch.randn(8, 8), w)
    f(torch.randn(16, 8, dtype=torch.float64), w.double())  # dtype changed too: static
    f(torch.randn(24, 8, dtype=torch.float64), w.double())  # now only the size: dynamic
    f(torch.randn(32, 8, dtype=torch.float64), w.double())
    assert f.stats.compiles == 3, f.stats


@pytest.mark.parametrize("capture", MODES)
def test_static_programs_keep_their_exact_guards(capture: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    f = compiled(affine, capture)
    lines = guard_lines(f, capsys, torch.randn(2, 8), torch.randn(8, 4))
    assert "x.shape == (2, 8)" in " ".join(lines), lines
    assert not any("symbol" in line for line in lines), lines


def test_each_symbol_is_read_once_per_call() -> None:
    f = ef.compile(lambda x, y: x + y, backend="eager", dynamic=True)
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    f(x, y)
    (segment,) = f.segments[0]
    assert segment.match(f._entry_state((x, y), {}), f._ctx) is not None
    source = segment._matcher.__ember_source__
    # one shape read per tensor, each size a local read once; no Tensor.size() calls
    code = [line.split("  # ")[0] for line in source.splitlines()]
    assert source.count(".shape  #") == 2 and not any(".size(" in c for c in code), source
    assert len([line for line in source.splitlines() if "= v" in line and "]  # '"
                in line]) == 4, source


class Cache:
    def __init__(self, k: torch.Tensor) -> None:
        self.k = k


def test_dynamic_true_leaves_parameters_and_buffers_static(
        capsys: pytest.CaptureFixture[str]) -> None:
    norm = torch.nn.BatchNorm1d(4).eval()
    f = ef.compile(lambda x, cache: norm(x) + cache.k.sum(), backend="eager", dynamic=True)
    with patch(logs=frozenset({"dynamic"})):
        f(torch.randn(3, 4), Cache(torch.randn(2, 5)))
    err = capsys.readouterr().err
    assert "x.size(0) is symbolic" in err and "cache.k.size(1) is symbolic" in err, err
    assert "running_mean" not in err and "weight" not in err, err
