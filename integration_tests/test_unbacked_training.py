"""Training through data-dependent (unbacked) sizes end to end, through
``ember.frontend.compile`` on ``aot_eager`` and ``inductor``: the forward binds ``u0``
from ``.item()`` or a boolean mask, the backward graph reads it from a saved zero-byte
carrier ``[u0, 0]`` (``ember.aot.partition.shape_symbols``; before, the backward's
``view``/``expand`` of ``u0`` was taken for its binder and verification failed with
"nothing binds it"). Values and gradients are compared with eager over several data
values, sizes 0 included; no graph may run eagerly (an aot decline is an error here)."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import ember.frontend
import pytest
import torch
from ember.runtime.stages import EagerGraphWarning

BACKENDS = ["aot_eager", "inductor"]


@pytest.fixture(autouse=True)
def _no_eager_graph() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("error", EagerGraphWarning)
        yield


def item_slice(w: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    n: Any = (pos.max().item() + 4) // 4
    torch._check(n >= 1)  # type: ignore[no-untyped-call]
    torch._check(n <= 4)  # type: ignore[no-untyped-call]
    return torch.cat([w[:, :n]], dim=-1).reshape(1, -1, 8) * 2


def item_view_sum(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    k: Any = n.item()
    return (x.view(k, -1) * 2).sum()


def item_slice_mean(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    k: Any = n.item()
    return x[:k].mean(0)


def two_items(x: torch.Tensor, y: torch.Tensor, a: torch.Tensor,
              b: torch.Tensor) -> torch.Tensor:
    i: Any = a.item()
    j: Any = b.item()
    return torch.cat([x[:i], y[:j]]) * 3


def mask_sum(x: torch.Tensor) -> torch.Tensor:
    return (x[x > 0] * 2).sum()


def mask_cat(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.cat([x[x > 0], y[y > 0]]) * 2


def _grad(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, requires_grad=True)


def _items(*values: int, shape: tuple[int, ...]) -> list[torch.Tensor]:
    """A tensor that requires grad of ``shape``, then one int tensor per value."""
    return [_grad(*shape), *(torch.tensor(v) for v in values)]


def _calls(make: Callable[..., list[torch.Tensor]], *args: Any,
           **kwargs: Any) -> list[Callable[[], list[torch.Tensor]]]:
    """One call per argument of ``args``: ``make(*arg, **kwargs)``."""
    return [functools.partial(make, *(a if isinstance(a, tuple) else (a,)), **kwargs)
            for a in args]


def _two_items_inputs(a: int, b: int) -> list[torch.Tensor]:
    return [_grad(6, 3), _grad(5, 3), torch.tensor(a), torch.tensor(b)]


def _positions(n: int) -> list[torch.Tensor]:
    """``item_slice``'s inputs: its slice is ``(n - 1 + 4) // 4`` long."""
    return [_grad(4, 4, 8), torch.arange(n)]


def _negative(*shape: int) -> torch.Tensor:
    return (-torch.rand(*shape) - 0.1).requires_grad_(True)


def _check_calls(fast: Callable[..., torch.Tensor], fn: Callable[..., torch.Tensor],
                 calls: list[Callable[[], list[torch.Tensor]]]) -> None:
    for i, make in enumerate(calls):
        torch.manual_seed(i)
        inputs = make()
        ref_inputs = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
        actual, expected = fast(*inputs), fn(*ref_inputs)
        torch.testing.assert_close(actual, expected, equal_nan=True, msg=f"call {i}")
        tangent = torch.randn_like(expected)
        got = torch.autograd.grad(actual, [t for t in inputs if t.requires_grad], tangent)
        want = torch.autograd.grad(expected, [t for t in ref_inputs if t.requires_grad],
                                   tangent)
        torch.testing.assert_close(got, want, equal_nan=True, msg=f"call {i}")


@pytest.mark.parametrize("dynamic", [None, True], ids=["automatic", "dynamic"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_reproducer_trains_like_eager(backend: str, dynamic: bool | None) -> None:
    fast = ember.frontend.compile(item_slice, backend=backend, dynamic=dynamic)
    w = _grad(4, 4, 8)
    fast(w, torch.arange(16)).sum().backward()
    ref = w.detach().clone().requires_grad_(True)
    item_slice(ref, torch.arange(16)).sum().backward()  # type: ignore[no-untyped-call]
    assert w.grad is not None
    torch.testing.assert_close(w.grad, ref.grad)
    _check_calls(fast, item_slice, _calls(_positions, 3, 9, 13, 16))
    assert fast.stats.compiles <= 2  # automatic: a new pos size recompiles once


# name, function, capture mode (masks: tracing keeps them in one graph), calls
CASES: list[tuple[str, Callable[..., torch.Tensor], str,
                  list[Callable[[], list[torch.Tensor]]]]] = [
    ("view_backward", item_view_sum, "strict", _calls(_items, 4, 6, 2, 5, shape=(20, 3))),
    ("reduction_backward", item_slice_mean, "strict",
     _calls(_items, 3, 5, 1, 8, 0, shape=(8, 3))),
    ("two_symbols", two_items, "strict",
     _calls(_two_items_inputs, (3, 2), (5, 0), (0, 4), (6, 5))),
    ("mask_sum", mask_sum, "trace",
     [lambda: [_grad(7, 4)], lambda: [_negative(7, 4)], lambda: [_grad(7, 4)]]),
    ("mask_cat", mask_cat, "trace",
     [lambda: [_grad(6), _grad(5)], lambda: [_negative(6), _grad(5)],
      lambda: [_grad(6), _negative(5)], lambda: [_grad(6), _grad(5)]]),
]


@pytest.mark.parametrize("name,fn,capture,calls", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("backend", BACKENDS)
def test_unbacked_sizes_in_the_backward_train_like_eager(
        backend: str, name: str, fn: Callable[..., torch.Tensor], capture: str,
        calls: list[Callable[[], list[torch.Tensor]]]) -> None:
    fast = ember.frontend.compile(fn, backend=backend, options={"capture": capture})
    _check_calls(fast, fn, calls)
    assert (fast.stats.compiles, fast.stats.graph_breaks) == (1, 0)


def size_and_mask(a: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.cat([a, y[y > 0]]) * 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_backed_and_an_unbacked_symbol_that_is_zero(backend: str) -> None:
    # the tangent is [s0+u0]: s0 comes from the carrier [s0, 0], u0 from its own [u0, 0]
    # (a shared [s0, u0, 0] has stride Max(1, u0): the inductor laid it out as u0)
    fast = ember.frontend.compile(size_and_mask, backend=backend, dynamic=True,
                                  options={"capture": "trace"})
    _check_calls(fast, size_and_mask, [lambda: [_grad(4), _grad(7)],
                                       lambda: [_grad(5), _negative(7)],
                                       lambda: [_grad(3), _grad(7)]])
    assert fast.stats.compiles == 1
