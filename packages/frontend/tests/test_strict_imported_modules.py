"""A module the compiled code imports itself (``import m`` / ``from m import X`` inside
the function, ``importlib.import_module``): its attributes are read at every call,
guarded where read, as those of a module global are. They were constants of the first
call (never guarded): a changed setting was not seen, and ``m.X = m.X + 1`` wrote the
first call's value again and again."""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Iterator

import pytest
import torch
from strict_helpers import strict

_NAME = "ember_test_imported_settings"


@pytest.fixture
def settings() -> Iterator[types.ModuleType]:
    module = types.ModuleType(_NAME)
    module.SCALE = 2.0  # type: ignore[attr-defined]
    sys.modules[_NAME] = module
    yield module
    del sys.modules[_NAME]


def _import_statement(x: torch.Tensor) -> torch.Tensor:
    import ember_test_imported_settings as cfg  # type: ignore[import-not-found]

    return x * cfg.SCALE


def _from_import(x: torch.Tensor) -> torch.Tensor:
    from ember_test_imported_settings import SCALE  # type: ignore[import-not-found]

    return x * SCALE


def _import_module(x: torch.Tensor) -> torch.Tensor:
    return x * importlib.import_module(_NAME).SCALE


@pytest.mark.parametrize("fn", [_import_statement, _from_import, _import_module])
def test_a_setting_changed_between_calls_is_seen(settings: types.ModuleType,
                                                 fn: object) -> None:
    compiled = strict(fn)
    for scale in (2.0, 3.0, 2.0):
        settings.SCALE = scale  # type: ignore[attr-defined]
        torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), scale))


def _bump(x: torch.Tensor) -> torch.Tensor:
    import ember_test_imported_settings as cfg  # type: ignore[import-not-found]

    cfg.SCALE = cfg.SCALE + 1
    return x * cfg.SCALE


def test_a_read_modify_write_of_a_module_attribute(settings: types.ModuleType) -> None:
    compiled = strict(_bump)
    for expected in (3.0, 4.0, 5.0):
        torch.testing.assert_close(compiled(torch.ones(1)), torch.full((1,), expected))
        assert settings.SCALE == expected  # type: ignore[attr-defined]
