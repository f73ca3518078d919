"""The batch-size sweep of ``tools/bench.py --sizes``: every compiled variant of a model run
at other batch sizes, timed round-robin at each size, with the compiles each size caused.

A static compile recompiles (or, with automatic dynamic shapes, turns symbolic) when the
size changes; a ``dynamic=True`` compile should not, except where a compiler specialises
(sizes 0 and 1). The sweep shows both: time per size and compiles over the sweep.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from benchlib import timing


def resize_batch(inputs: tuple[Any, ...], size: int) -> tuple[Any, ...]:
    """``inputs`` with dimension 0 of every tensor of at least one dimension made ``size``:
    the tensor repeated along dimension 0 and cut, so values (token ids, ranges) stay
    those of the model's own example; other inputs unchanged.

    Raises:
        ValueError: ``size`` is below 1, or a tensor input has an empty dimension 0.
    """
    if size < 1:
        raise ValueError(f"batch size {size}: expected at least 1")
    resized: list[Any] = []
    for x in inputs:
        if not isinstance(x, torch.Tensor) or x.dim() == 0:
            resized.append(x)
            continue
        if x.shape[0] == 0:
            raise ValueError(f"cannot resize an input of shape {tuple(x.shape)} along dim 0")
        times = math.ceil(size / x.shape[0])
        repeated = x.detach().repeat(times, *([1] * (x.dim() - 1)))[:size]
        resized.append(repeated.clone().requires_grad_(x.requires_grad))
    return tuple(resized)


@dataclass(frozen=True)
class SweepVariant:
    """One compiled variant as the sweep drives it: ``bind(inputs)`` gives the call to
    time on those inputs; ``compiles()`` the variant's compile count so far (``None``:
    not reported)."""

    bind: Callable[[tuple[Any, ...]], Callable[[], Any]]
    compiles: Callable[[], int | None]


@dataclass
class SweepResult:
    """A variant's sweep: batch size -> median seconds (or the exception raised at that
    size), and the compiles the sweep caused (``None``: not reported)."""

    seconds: dict[int, float | BaseException] = field(default_factory=dict)
    compiles: int | None = None


def run(variants: Mapping[str, SweepVariant], inputs: tuple[Any, ...], sizes: tuple[int, ...],
        device: torch.device, min_time_s: float = 0.3) -> dict[str, SweepResult]:
    """Time every variant at every size of ``sizes`` (inputs from :func:`resize_batch`).

    Per size, each variant is called once alone (its compile, if the size causes one, is
    counted there, so process-wide counters such as torch.compile's are attributed to
    the right variant), then all are timed together
    (:func:`benchlib.timing.interleaved_median_seconds`). A failure at one size is
    recorded for that size; the sweep goes on.
    """
    results = {key: SweepResult() for key in variants}
    for size in sizes:
        resized = resize_batch(inputs, size)
        calls: dict[str, Callable[[], Any]] = {}
        for key, variant in variants.items():
            result = results[key]
            before = variant.compiles()
            try:
                call = variant.bind(resized)
                call()
                timing.synchronize(device)
            except Exception as exc:  # noqa: BLE001 - a failure is a result, recorded
                result.seconds[size] = exc
                continue
            after = variant.compiles()
            if before is not None and after is not None:
                result.compiles = (result.compiles or 0) + after - before
            calls[key] = call
        measured = timing.interleaved_median_seconds(calls, device, min_time_s=min_time_s)
        for key, value in measured.items():
            results[key].seconds[size] = value
    return results
