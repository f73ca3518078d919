"""The batched tensor guards (``ember.frontend.guard_batch``): a check function with many
``tensor`` guards checks them in one C++ call while the tensors look as on a call that
passed them; every metadata change a guard catches is still caught once the batch has
answered calls (the call recompiles, and computes what eager computes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from ember.frontend.guard_batch import MIN_BATCHED, TensorBatch
from strict_helpers import strict

N = MIN_BATCHED + 2


def _sum_scaled(xs: list[torch.Tensor]) -> torch.Tensor:
    total = xs[0] * 2
    for x in xs[1:]:
        total = total + x * 2
    return total


def _function(compiled: Any) -> Any:
    return getattr(compiled, "_compiled", compiled)  # a module's compile wraps one


def _matcher(compiled: Any) -> Any:
    return _function(compiled).segments[0][0]._matcher


def _batches(compiled: Any) -> list[TensorBatch]:
    text = _matcher(compiled).__ember_source__
    assert "batch" in text, text
    namespace = _matcher(compiled).__globals__
    found = [v for v in namespace.values() if isinstance(v, TensorBatch)]
    if not found:  # the stamped matcher's closure holds the written function
        box = _matcher(compiled).__closure__
        for cell in box or ():
            for fn in cell.cell_contents if isinstance(cell.cell_contents, list) else ():
                found += [v for v in getattr(fn, "__globals__", {}).values()
                          if isinstance(v, TensorBatch)]
    return found


def _warm() -> tuple[Any, list[torch.Tensor]]:
    xs = [torch.randn(4, 4) for _ in range(N)]
    compiled = strict(_sum_scaled)
    for _ in range(3):
        compiled(xs)
    return compiled, xs


def test_the_tensor_guards_are_checked_in_one_batch() -> None:
    compiled, xs = _warm()
    text = _matcher(compiled).__ember_source__
    assert f"# {N} tensor guards, in one C++ check" in text, text
    (batch,) = _batches(compiled)
    hits = batch.hits
    torch.testing.assert_close(compiled(xs), _sum_scaled(xs))
    assert batch.hits == hits + 1 and batch.stamps == 1
    assert compiled.stats.recompiles == 0


CHANGES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "stride": lambda x: x.t().contiguous().t(),
    "storage_offset": lambda x: torch.cat([torch.zeros(1), x.flatten()])[1:].view(4, 4),
    "dtype": lambda x: x.double(),
    "shape": lambda x: torch.randn(1, 4),  # broadcasts
    "requires_grad": lambda x: x.clone().requires_grad_(),
    "type": lambda x: torch.nn.Parameter(x.clone(), requires_grad=False),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_changed_tensor_fails_its_guard_after_the_batch_answered(change: str) -> None:
    compiled, xs = _warm()
    (batch,) = _batches(compiled)
    assert batch.hits >= 1
    changed = list(xs)
    changed[N // 2] = CHANGES[change](xs[N // 2])
    expected = _sum_scaled(changed)
    got = compiled(changed)
    torch.testing.assert_close(got, expected)
    # "type": a Parameter is not a plain tensor (code may test isinstance): its own entry
    assert compiled.stats.recompiles == 1, change
    torch.testing.assert_close(compiled(xs), _sum_scaled(xs))  # the first entry again


def test_a_value_that_is_not_a_tensor_fails_the_guards() -> None:
    compiled, xs = _warm()
    changed: list[Any] = list(xs)
    changed[1] = 3.0
    assert torch.equal(compiled(changed), _sum_scaled(changed))
    assert compiled.stats.recompiles == 1


def test_a_tensor_read_through_has_its_type_tested_before_the_read() -> None:
    params = [torch.nn.Parameter(torch.randn(3)) for _ in range(N)]
    for p in params:
        p.grad = torch.randn(3)

    def grads(ps: list[torch.nn.Parameter]) -> torch.Tensor:
        total = ps[0].grad * 1
        for p in ps[1:]:
            total = total + p.grad
        return total

    compiled = strict(grads)
    compiled(params)
    compiled(params)  # the check function is written at the first lookup
    text = _matcher(compiled).__ember_source__
    lines = text.splitlines()
    grad_fetch = next(i for i, line in enumerate(lines) if ".grad  #" in line)
    assert "isinstance(" in lines[grad_fetch - 1] and "return None" in lines[grad_fetch - 1]
    assert "tensor guards, in one C++ check" in text, text

    reads: list[int] = []

    class Impostor:  # reading its .grad runs code: the guards must not read it
        @property
        def grad(self) -> torch.Tensor:
            reads.append(1)
            return torch.randn(3)

    changed: list[Any] = list(params)
    changed[0] = Impostor()
    function = _function(compiled)
    (segment,) = function.segments[0]
    assert segment.match(function._entry_state((params,), {}), function._ctx) is not None
    assert segment.match(function._entry_state((changed,), {}), function._ctx) is None
    assert reads == []


def test_the_batch_keeps_no_tensor_alive() -> None:
    import weakref

    batch = TensorBatch()
    xs = [torch.randn(2) for _ in range(3)]
    batch.learn(*xs)
    assert batch.holds(*xs)
    ref = weakref.ref(xs[0])
    del xs
    assert ref() is None


def test_the_batch_turns_off_when_the_tensors_change_every_call() -> None:
    batch = TensorBatch()
    for n in range(1, 6):
        xs = [torch.randn(n) for _ in range(3)]
        assert not batch.holds(*xs)
        batch.learn(*xs)
    assert batch.off and not batch.holds(*xs)
