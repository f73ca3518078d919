"""An outside object handed to standard-library code run for real
(``dataclasses.asdict``/``astuple``/``replace``, ``copy.copy``/``deepcopy``,
``operator.attrgetter``): what that code reads of it is guarded, so a config changed
between calls is seen (its values were constants of the first call, never guarded)."""

from __future__ import annotations

import copy
import dataclasses
import operator
from collections.abc import Callable
from typing import Any

import pytest
import torch
from strict_helpers import strict


@dataclasses.dataclass
class _Inner:
    bias: float = 0.0


@dataclasses.dataclass
class _Config:
    scale: float = 2.0
    inner: _Inner = dataclasses.field(default_factory=_Inner)


READERS: dict[str, Callable[[_Config], float]] = {
    "asdict": lambda cfg: dataclasses.asdict(cfg)["scale"] + dataclasses.asdict(cfg)[
        "inner"]["bias"],
    "astuple": lambda cfg: dataclasses.astuple(cfg)[0] + dataclasses.astuple(cfg)[1][0],
    "replace": lambda cfg: dataclasses.replace(cfg).scale + dataclasses.replace(
        cfg).inner.bias,
    "copy": lambda cfg: copy.copy(cfg).scale + copy.copy(cfg).inner.bias,
    "deepcopy": lambda cfg: copy.deepcopy(cfg).scale + copy.deepcopy(cfg).inner.bias,
    "attrgetter": lambda cfg: operator.attrgetter("scale")(cfg) + operator.attrgetter(
        "inner.bias")(cfg),
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_config_changed_between_calls(reader: str) -> None:
    read = READERS[reader]
    cfg = _Config()

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * read(cfg)

    compiled = strict(fn)
    changes: list[Callable[[], Any]] = [
        lambda: None, lambda: setattr(cfg, "scale", 3.0),
        lambda: setattr(cfg.inner, "bias", 1.0), lambda: setattr(cfg, "scale", 2.0)]
    for change in changes:
        change()
        torch.testing.assert_close(compiled(torch.ones(2)), fn(torch.ones(2)))
