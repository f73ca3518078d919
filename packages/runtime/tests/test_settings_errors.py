"""Unknown or unreadable settings: ``EMBER_LOGS`` topics warn once (an environment
variable never stops ``import ember``), ``patch(logs=...)`` raises, other ``EMBER_*``
values name the variable."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import warnings

import pytest
from ember.runtime import config as config_module
from ember.runtime.config import LOG_TOPICS, Config, UnknownLogTopicWarning, config, patch
from ember.runtime.logs import TOPICS


def test_unknown_env_topic_warns_listing_the_topics_and_keeps_the_others() -> None:
    with pytest.warns(UnknownLogTopicWarning) as record:
        c = Config.from_env({"EMBER_LOGS": "graphs,grpahs,recompile"})
    assert c.logs == {"graphs"}
    (warning,) = record
    text = str(warning.message)
    assert "EMBER_LOGS='graphs,grpahs,recompile'" in text
    assert "'grpahs', 'recompile'" in text
    assert "topics: " + ", ".join(LOG_TOPICS) in text


def test_unknown_env_topic_warns_once() -> None:
    env = {"EMBER_LOGS": "only-once-topic"}
    with pytest.warns(UnknownLogTopicWarning):
        Config.from_env(env)
    saved = dataclasses.replace(config)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert Config.from_env(env).logs == frozenset()
            config_module.reload({"EMBER_LOGS": "all"})  # known topics never warn
    finally:
        for f in dataclasses.fields(Config):
            setattr(config, f.name, getattr(saved, f.name))


def test_unknown_env_topic_does_not_stop_the_import() -> None:
    env = dict(os.environ, EMBER_LOGS="graphs,bogus")
    done = subprocess.run(
        [sys.executable, "-c", "import ember.runtime.logs as l; print(sorted(l.config.logs))"],
        env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['graphs']"
    assert "unknown Ember log topic 'bogus'" in done.stderr
    assert done.stderr.count("UnknownLogTopicWarning") == 1


@pytest.mark.parametrize("logs", ["grpahs", "graphs,bogus", frozenset({"bogus"}), ["x"]])
def test_patch_with_unknown_topic_raises(logs: object) -> None:
    before = config.logs
    with pytest.raises(ValueError, match="unknown Ember log topic.*topics: graphs"), \
            patch(logs=logs):
        pass
    assert config.logs == before


@pytest.mark.parametrize("logs", ["all", "graphs, guards", frozenset({"cache"})])
def test_patch_with_known_topics(logs: object) -> None:
    with patch(logs=logs) as c:
        assert c.logs <= set(TOPICS) | {"all"} and c.logs


@pytest.mark.parametrize(("env", "message"), [
    ({"EMBER_RECOMPILE_LIMIT": "-1"}, "EMBER_RECOMPILE_LIMIT='-1': expected an integer >= 1"),
    # NOTE: 0 compiled once anyway (the first compile counts), as 1 does
    ({"EMBER_RECOMPILE_LIMIT": "0"}, "EMBER_RECOMPILE_LIMIT='0': expected an integer >= 1"),
    ({"EMBER_CUDAGRAPH_SHAPES": "-1"}, "EMBER_CUDAGRAPH_SHAPES='-1': expected an integer >= 0"),
    ({"EMBER_COMPILE_THREADS": "-2"}, "EMBER_COMPILE_THREADS='-2': expected an integer >= 0"),
    ({"EMBER_TRITON_WORKERS": "-2"}, "EMBER_TRITON_WORKERS='-2': expected an integer >= -1"),
    ({"EMBER_RECOMPILE_LIMIT": "2.5"}, "EMBER_RECOMPILE_LIMIT='2.5': expected an integer"),
    ({"EMBER_CACHE": "sometimes"}, "EMBER_CACHE='sometimes': expected 0 or 1"),
    ({"EMBER_TORCH_LAUNCHER": "triton"}, "EMBER_TORCH_LAUNCHER='triton': expected 0 or 1"),
    # empty meant the default silently (cache clear then emptied ~/.cache/ember)
    ({"EMBER_CACHE_DIR": ""}, "EMBER_CACHE_DIR='': expected a directory"),
    ({"EMBER_DEBUG_DIR": " "}, "EMBER_DEBUG_DIR=' ': expected a directory"),
])
def test_unreadable_values_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Config.from_env(env)


@pytest.mark.parametrize(("setting", "value", "variable", "minimum"), [
    ("recompile_limit", 0, "EMBER_RECOMPILE_LIMIT", 1),
    ("recompile_limit", True, "EMBER_RECOMPILE_LIMIT", 1),
    ("cudagraph_shapes", -1, "EMBER_CUDAGRAPH_SHAPES", 0),
    ("compile_threads", -1, "EMBER_COMPILE_THREADS", 0),
    ("compile_threads", "4", "EMBER_COMPILE_THREADS", 0),
    ("triton_workers", -2, "EMBER_TRITON_WORKERS", -1),
])
def test_patch_bounds_integer_settings_as_the_environment_does(
        setting: str, value: object, variable: str, minimum: int) -> None:
    before = getattr(config, setting)
    with pytest.raises(ValueError, match=rf"setting {setting}={value!r} \({variable}\): "
                                         rf"expected an integer >= {minimum}"):
        with patch(**{setting: value}):
            pass
    assert getattr(config, setting) == before


def test_the_smallest_values_are_accepted() -> None:
    env = {"EMBER_RECOMPILE_LIMIT": "1", "EMBER_CUDAGRAPH_SHAPES": "0",
           "EMBER_COMPILE_THREADS": "0", "EMBER_TRITON_WORKERS": "-1"}
    read = Config.from_env(env)
    assert (read.recompile_limit, read.cudagraph_shapes, read.compile_threads,
            read.triton_workers) == (1, 0, 0, -1)
    with patch(recompile_limit=1, cudagraph_shapes=0, compile_threads=0, triton_workers=-1):
        pass


def test_torchs_launcher_is_on_unless_the_environment_turns_it_off() -> None:
    assert Config.from_env({}).torch_launcher
    assert not Config.from_env({"EMBER_TORCH_LAUNCHER": "0"}).torch_launcher
    assert Config.from_env({"EMBER_TORCH_LAUNCHER": "1"}).torch_launcher
