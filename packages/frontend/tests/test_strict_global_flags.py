"""Torch's global flags queried in compiled code (``torch.are_deterministic_algorithms_
enabled()``, ``get_float32_matmul_precision()``, ``is_anomaly_enabled()``,
``get_num_threads()``, the SDPA backend flags): a call is guarded to give the value of
the capture, so a flag flipped between calls recompiles (the first value was a constant
of the graph, never checked)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from strict_helpers import strict


def _deterministic(x: torch.Tensor) -> torch.Tensor:
    return x * (2 if torch.are_deterministic_algorithms_enabled() else 3)


def _precision(x: torch.Tensor) -> torch.Tensor:
    return x * (2 if torch.get_float32_matmul_precision() == "highest" else 3)


def _anomaly(x: torch.Tensor) -> torch.Tensor:
    return x * (2 if torch.is_anomaly_enabled() else 3)


def _flash(x: torch.Tensor) -> torch.Tensor:
    return x * (2 if torch.backends.cuda.flash_sdp_enabled() else 3)


CASES: dict[str, tuple[Callable[..., Any], Callable[[bool], Any], Callable[[], Any]]] = {
    "deterministic": (_deterministic, torch.use_deterministic_algorithms,
                      torch.are_deterministic_algorithms_enabled),
    "precision": (_precision, lambda on: torch.set_float32_matmul_precision(
        "highest" if on else "high"), torch.get_float32_matmul_precision),
    "anomaly": (_anomaly, torch.autograd.set_detect_anomaly, torch.is_anomaly_enabled),
    "flash": (_flash, torch.backends.cuda.enable_flash_sdp,
              torch.backends.cuda.flash_sdp_enabled),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_flag_flipped_between_calls(case: str) -> None:
    fn, set_flag, read_flag = CASES[case]
    before = read_flag()
    compiled = strict(fn)
    try:
        for on in (False, True, False):
            set_flag(on)
            torch.testing.assert_close(compiled(torch.ones(2)), fn(torch.ones(2)))
    finally:
        if case == "precision":
            torch.set_float32_matmul_precision(before)
        else:
            set_flag(before)
    assert compiled.stats.compiles == 2
