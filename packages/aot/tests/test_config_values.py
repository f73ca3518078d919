"""The ``aot.*`` options' values: a wrong type or a negative count is a ValueError naming
the option and what it accepts, whether the options come from ``compile`` (checked
before any work), the stage, the command line or :class:`AotConfig` itself."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from aot_capture import capture
from ember.aot.__main__ import main
from ember.aot.config import AotConfig
from ember.aot.pipeline import aot_compile
from ember.aot.stage import AotStage
from ember.runtime.ir import save
from ember.runtime.pipeline import check_options

LIMIT = "option 'aot.recompute_reduction_limit'"


@pytest.mark.parametrize(("options", "message"), [
    ({"aot.recompute_reduction_limit": -1}, rf"{LIMIT}=-1: expected an int >= 0"),
    ({"aot.recompute_reduction_limit": True}, rf"{LIMIT}=True: expected int"),
    ({"aot.recompute_reduction_limit": 4.5}, rf"{LIMIT}=4.5: expected int"),
    ({"aot.save_everything": "yes"}, r"option 'aot.save_everything'='yes': expected bool"),
    ({"aot.decompose": 1}, r"option 'aot.decompose'=1: expected bool"),
    ({"aot.training": 0}, r"option 'aot.training'=0: expected bool or None"),
])
def test_a_bad_value_names_the_option(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AotConfig.from_options(options)
    with pytest.raises(ValueError, match=message):
        check_options("aot_eager", options)  # what compile() and torch.compile run
    program = capture(lambda x: x.sum(), torch.randn(3))
    with pytest.raises(ValueError, match=message):
        AotStage().run(program, dict(options))


def test_a_negative_limit_fails_at_compile_not_at_the_first_call() -> None:
    import ember.frontend

    with pytest.raises(ValueError, match=rf"{LIMIT}=-5: expected an int >= 0"):
        ember.frontend.compile(lambda x: x.sum(), backend="aot_eager",
                               options={"aot.recompute_reduction_limit": -5})


def test_zero_saves_every_reduction_and_is_accepted() -> None:
    assert AotConfig.from_options({"aot.recompute_reduction_limit": 0}) \
        .recompute_reduction_limit == 0
    with pytest.raises(ValueError, match=rf"{LIMIT}=-1"):
        AotConfig(recompute_reduction_limit=-1)


def test_command_line_refuses_a_negative_limit(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "in.ember"
    save(capture(lambda x: x.sum(), torch.randn(3)), source)
    assert main([str(source), "-o", str(tmp_path / "out.ember"),
                 "--option", "aot.recompute_reduction_limit=-1"]) == 1
    assert f"{LIMIT}=-1: expected an int >= 0" in capsys.readouterr().err


@pytest.mark.parametrize("option", ["nope=1", "strict=true"])
def test_command_line_refuses_an_unknown_option(option: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown key (or the inductor's ``strict``) was ignored: exit status 0."""
    source = tmp_path / "in.ember"
    save(capture(lambda x: x.sum(), torch.randn(3)), source)
    assert main([str(source), "-o", str(tmp_path / "out.ember"), "--option", option]) == 1
    err = capsys.readouterr().err
    assert f"unknown aot option(s) '{option.split('=')[0]}'" in err
    assert "aot.save_everything" in err
    assert not (tmp_path / "out.ember").exists()


def test_training_forced_off_with_an_input_that_requires_grad_warns() -> None:
    """A compiled backend's outputs then do not require grad (the interpreter's do):
    backward failed with torch's generic error and nothing said why."""
    program = capture(lambda x: x * 2, torch.randn(3, requires_grad=True))
    with pytest.warns(UserWarning, match="aot.training=False compiles an inference program"):
        aot_compile(program, AotConfig(training=False))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        aot_compile(capture(lambda x: x * 2, torch.randn(3)), AotConfig(training=False))
