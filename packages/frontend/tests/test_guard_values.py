"""Guards never run text made from user objects: dict keys and other captured values
reach the generated check functions as constants, looked up as objects (both capture
modes)."""

from __future__ import annotations

import enum
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.frontend.bytecode.guards import Guard, compile_matcher
from ember.frontend.bytecode.sources import ItemSource, LocalSource

MODES = ["strict", "trace"]


class CraftedKey:
    """A dict key whose ``repr`` is Python code that would create ``marker``."""

    def __init__(self, marker: Path, shown: str | None = None) -> None:
        self.marker = marker
        self.shown = shown

    def __repr__(self) -> str:
        if self.shown is not None:
            return self.shown
        return f"__import__('os').system('touch {self.marker}')"

    def __hash__(self) -> int:
        return 7

    def __eq__(self, other: object) -> bool:
        return self is other


class Color(enum.Enum):
    RED = 1
    GREEN = 2


def compiled(fn: Any, mode: str) -> Any:
    return ef.compile(fn, backend="eager", options={"capture": mode})


def source_of(match: Any) -> str:
    text: str = match.__ember_source__
    return text


def call_three_times(fn: Any, mode: str, x: torch.Tensor, d: dict[Any, Any]) -> Any:
    c = compiled(fn, mode)
    for _ in range(3):
        torch.testing.assert_close(c(x, d), fn(x, d))
    return c


@pytest.mark.parametrize("mode", MODES)
def test_crafted_key_repr_is_never_run(mode: str, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    key = CraftedKey(marker)

    def f(x: torch.Tensor, d: dict[Any, float]) -> torch.Tensor:
        return x + d[key]

    c = call_three_times(f, mode, torch.ones(3), {key: 2.0})
    assert not marker.exists()
    assert (c.stats.compiles, c.stats.cache_hits) == (1, 2)
    # the guard on the value under the key still holds
    torch.testing.assert_close(c(torch.ones(3), {key: 5.0}), torch.full((3,), 6.0))
    assert not marker.exists()


def test_crafted_key_is_a_constant_of_the_matcher(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    key = CraftedKey(marker)
    src = ItemSource(LocalSource("d"), key)
    match = compile_matcher([Guard("equals", src, 2.0)], [src])
    code = [line.split("#")[0] for line in source_of(match).splitlines()]
    assert not any("system" in line for line in code)
    state = SimpleNamespace(locals={"d": {key: 2.0}})
    assert match(state, None) == [2.0]
    assert match(SimpleNamespace(locals={"d": {key: 3.0}}), None) is None
    assert not marker.exists()


def test_crafted_repr_with_line_breaks_stays_in_the_comment(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    key = CraftedKey(marker, shown=f"1\nimport os; os.system('touch {marker}')\r\u2028#")
    src = ItemSource(LocalSource("d"), key)
    match = compile_matcher([Guard("equals", src, 1.0)], [src])
    assert match(SimpleNamespace(locals={"d": {key: 1.0}}), None) == [1.0]
    assert not marker.exists()
    assert "import os" not in "".join(line.split("#")[0]
                                      for line in source_of(match).splitlines())


def test_keys_with_one_repr_are_distinct_guards() -> None:
    a, b = CraftedKey(Path("-"), shown="k"), CraftedKey(Path("-"), shown="k")

    def f(x: torch.Tensor, d: dict[Any, float]) -> torch.Tensor:
        return x * d[a] + d[b]

    c = compiled(f, "strict")
    x = torch.ones(2)
    torch.testing.assert_close(c(x, {a: 2.0, b: 3.0}), torch.full((2,), 5.0))
    torch.testing.assert_close(c(x, {a: 2.0, b: 3.0}), torch.full((2,), 5.0))
    assert (c.stats.compiles, c.stats.cache_hits) == (1, 1)
    # only the value under b changes: the guard on d[b] must see it
    torch.testing.assert_close(c(x, {a: 2.0, b: 7.0}), torch.full((2,), 9.0))
    assert c.stats.compiles == 2


@pytest.mark.parametrize("mode", MODES)
def test_enum_keys(mode: str) -> None:
    def f(x: torch.Tensor, d: dict[Any, float]) -> torch.Tensor:
        return x * d[Color.RED] - d[Color.GREEN]

    c = call_three_times(f, mode, torch.ones(2), {Color.RED: 3.0, Color.GREEN: 1.0})
    assert (c.stats.compiles, c.stats.cache_hits) == (1, 2)
    torch.testing.assert_close(c(torch.ones(2), {Color.RED: 4.0, Color.GREEN: 1.0}),
                               torch.full((2,), 3.0))


@pytest.mark.parametrize("mode", MODES)
def test_nan_key_does_not_recompile(mode: str) -> None:
    nan = float("nan")

    def f(x: torch.Tensor, d: dict[Any, float]) -> torch.Tensor:
        return x + d[nan]

    d = {nan: 4.0}
    c = call_three_times(f, mode, torch.ones(2), d)
    assert (c.stats.compiles, c.stats.recompiles, c.stats.cache_hits) == (1, 0, 2)


@pytest.mark.parametrize("mode", MODES)
def test_negative_zero_is_not_zero(mode: str) -> None:
    # -0.0 == 0.0 in Python, but copysign (and atan2, 1/x) tell them apart: a program
    # compiled for one must not run for the other
    c = compiled(lambda x, v: torch.copysign(x, v), mode)
    x = torch.ones(3)
    for v in (0.0, -0.0, 0.0, -0.0):
        assert torch.equal(c(x, v), torch.copysign(x, v)), v
    assert (c.stats.compiles, c.stats.cache_hits) == (2, 2)


TRICKY_KEYS: list[Any] = [
    ("a", 1, (2.5, None)),
    frozenset({"x", 3}),
    "it's \"quoted\"\nand\\n on two lines",
    "'''",
    b"\x00bytes'",
    -0.0,
    10**30,
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("key", TRICKY_KEYS, ids=lambda k: type(k).__name__)
def test_structured_and_quoted_keys(mode: str, key: Any) -> None:
    def f(x: torch.Tensor, d: dict[Any, float]) -> torch.Tensor:
        return x + d[key]

    c = call_three_times(f, mode, torch.zeros(2), {key: 1.5, "other": 0.0})
    assert (c.stats.compiles, c.stats.cache_hits) == (1, 2)


@pytest.mark.parametrize("key", TRICKY_KEYS, ids=lambda k: type(k).__name__)
def test_iterated_dict_with_tricky_keys(key: Any) -> None:
    def f(x: torch.Tensor, d: dict[Any, torch.Tensor]) -> torch.Tensor:
        for v in d.values():
            x = x + v
        return x

    d = {key: torch.ones(2), Color.RED: torch.ones(2)}
    c = call_three_times(f, "strict", torch.zeros(2), d)
    assert (c.stats.compiles, c.stats.cache_hits) == (1, 2)


def test_unknown_global_state_guard_fails_loudly() -> None:
    with pytest.raises(ValueError, match="no reader for the global state"):
        compile_matcher([Guard("global", None, ("__import__('os')", 1))])
