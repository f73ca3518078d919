"""A user's op that fails on fake tensors during a strict capture (a shape mismatch):
the user gets the op's exception type, and torch's fake-tensor logger prints nothing
("failed while attempting to run meta" with a traceback); its level and ``disabled`` flag
are put back, and no logger's level is set per captured op (each ``setLevel`` clears every
logger's cache)."""

from __future__ import annotations

import logging
from typing import Any

import ember.frontend as ef
import pytest
import torch

LOGGER = "torch._subclasses.fake_tensor"


def matmul_call(x: torch.Tensor) -> Any:
    return torch.matmul(x, x) + 1


def matmul_operator(x: torch.Tensor) -> Any:
    return (x @ x) + 1


@pytest.mark.parametrize("fn", [matmul_call, matmul_operator])
def test_failing_op_prints_nothing_and_keeps_the_exception_type(
        fn: Any, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    level = logging.getLogger(LOGGER).level
    x = torch.ones(2, 3)
    with pytest.raises(RuntimeError) as eager:
        fn(x)
    capfd.readouterr()
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        with pytest.raises(RuntimeError) as got:
            ef.compile(fn)(x)
    assert type(got.value) is type(eager.value)
    assert not [r for r in caplog.records if r.name == LOGGER and r.levelno >= logging.ERROR]
    out, err = capfd.readouterr()
    assert "failed while attempting to run meta" not in out + err
    assert logging.getLogger(LOGGER).level == level
    assert not logging.getLogger(LOGGER).disabled


def test_a_capture_sets_no_logger_level(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = logging.Logger.setLevel

    def counted(self: logging.Logger, level: int | str) -> None:
        calls.append(1)
        real(self, level)

    monkeypatch.setattr(logging.Logger, "setLevel", counted)

    def ops(x: torch.Tensor) -> torch.Tensor:
        for _ in range(10):
            x = torch.sin(x) * 2 + 1
        return x

    ef.compile(ops)(torch.randn(4))
    assert calls == []
