"""The random generator's state read or set in compiled code (``torch.get_rng_state``,
``set_rng_state``, ``initial_seed``, a generator's ``get_state``/``set_state``) is
that of each call, as in eager: these calls break the graph (run at capture, the state
was a constant of the first call and restoring it did nothing)."""

from __future__ import annotations

import torch
from strict_helpers import assert_same, strict


def _replayed(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    state = torch.get_rng_state()
    a = torch.rand(3) + x
    torch.set_rng_state(state)
    return a, torch.rand(3) + x


def _generator_replayed(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.default_generator
    state = gen.get_state()
    a = torch.rand(3) + x
    gen.set_state(state)
    return a, torch.rand(3) + x


def _seeded(x: torch.Tensor) -> torch.Tensor:
    return x + torch.initial_seed()


def _compare(fn: object) -> None:
    compiled = strict(fn)
    for seed in range(3):
        torch.manual_seed(seed)
        expected = fn(torch.zeros(3))  # type: ignore[operator]
        after_eager = torch.rand(2)
        torch.manual_seed(seed)
        got = compiled(torch.zeros(3))
        assert_same(got, expected)
        assert_same(torch.rand(2), after_eager)  # the generator moved on as in eager


def test_get_and_set_rng_state() -> None:
    _compare(_replayed)


def test_a_generators_get_and_set_state() -> None:
    _compare(_generator_replayed)


def test_initial_seed_of_each_call() -> None:
    _compare(_seeded)
