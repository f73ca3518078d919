"""The ``device`` option is checked: a value that is no device, or one no kernel
backend serves, is a ``ValueError`` naming the option. Before, ``"nonsense"`` raised
torch's ``RuntimeError`` without naming the option, and ``"meta"`` ran the graph eagerly
with a warning (the option asked for and ignored)."""

from __future__ import annotations

import ember.frontend as ef
import pytest
import torch
from ember.inductor.compile import option_device


def add_one(x: torch.Tensor) -> torch.Tensor:
    return x + 1


@pytest.mark.parametrize(("value", "message"), [
    ("nonsense", "option 'device'='nonsense': not a device"),
    (3.5, "option 'device'=3.5: not a device"),
    ("meta", "option 'device'='meta': no Ember kernel backend for device type 'meta'; "
             "device types: cpu, cuda"),
])
def test_a_bad_device_names_the_option(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        option_device({"device": value})


def test_a_bad_device_fails_the_compile_not_quietly_eager() -> None:
    f = ef.compile(add_one, options={"device": "meta"})
    with pytest.raises(ValueError, match="option 'device'='meta'"):
        f(torch.ones(2))


@pytest.mark.parametrize("value", [None, "", "cpu", torch.device("cpu"), "cuda:1"])
def test_good_devices_are_accepted(value: object) -> None:
    expected = None if value in (None, "") else torch.device(value)  # type: ignore[arg-type]
    assert option_device({"device": value}) == expected


def test_every_option_is_in_the_readme_table() -> None:
    """The README's option table lists each key ``InductorStage.options`` declares
    (``precompile_triton``, ``emulate_precision_casts`` and ``attention_dropout`` were
    accepted but documented only in ``compile_program``'s docstring)."""
    from pathlib import Path

    from ember.inductor.stage import InductorStage

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    rows = {line.split("|")[1].strip().strip("`") for line in readme.splitlines()
            if line.startswith("| `")}
    assert set(InductorStage.options) <= rows, set(InductorStage.options) - rows
