"""ember.runtime.config (env vars, patch) and ember.runtime.logs (topics)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest
from ember.runtime import config as config_module
from ember.runtime.config import Config, config, patch
from ember.runtime.logs import TOPICS, log, log_enabled


def test_defaults_without_environment() -> None:
    c = Config.from_env({})
    assert c.logs == frozenset()
    assert c.serialize_boundaries is False
    assert c.cache_dir == Path("~/.cache/ember").expanduser()
    assert c.cache_enabled is True
    assert c.recompile_limit == 8
    assert c.debug_dir is None


def test_environment_is_parsed() -> None:
    c = Config.from_env({
        "EMBER_LOGS": " graphs, guards ,", "EMBER_SERIALIZE_BOUNDARIES": "1",
        "EMBER_CACHE_DIR": "/tmp/ec", "EMBER_CACHE": "0", "EMBER_RECOMPILE_LIMIT": "3",
        "EMBER_DEBUG_DIR": "/tmp/dbg",
    })
    assert c.logs == {"graphs", "guards"}
    assert c.serialize_boundaries is True and c.cache_enabled is False
    assert c.cache_dir == Path("/tmp/ec") and c.debug_dir == Path("/tmp/dbg")
    assert c.recompile_limit == 3


@pytest.mark.parametrize(("env", "message"), [
    ({"EMBER_SERIALIZE_BOUNDARIES": "maybe"}, "EMBER_SERIALIZE_BOUNDARIES='maybe': expected 0 or 1"),
    ({"EMBER_RECOMPILE_LIMIT": "many"}, "EMBER_RECOMPILE_LIMIT='many': expected an integer"),
])
def test_bad_values_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Config.from_env(env)


def test_patch_overrides_and_restores() -> None:
    before = config.recompile_limit
    with patch(recompile_limit=before + 5, logs="graphs,recompiles") as c:
        assert c is config and config.recompile_limit == before + 5
        assert config.logs == {"graphs", "recompiles"}
    assert config.recompile_limit == before


def test_patch_restores_after_an_exception() -> None:
    before = config.serialize_boundaries
    with pytest.raises(KeyError), patch(serialize_boundaries=not before):
        raise KeyError("boom")
    assert config.serialize_boundaries == before


def test_patch_rejects_unknown_settings() -> None:
    with pytest.raises(AttributeError, match="no Ember setting named recompile_limt"), \
            patch(recompile_limt=1):
        pass


def test_reload_reads_the_environment_in_place() -> None:
    # NOTE: every setting is restored: reload resets those the env omits (the test
    # session's EMBER_PROGRAM_CACHE=0 among them), which leaked into later tests
    saved = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    try:
        config_module.reload({"EMBER_RECOMPILE_LIMIT": "2", "EMBER_LOGS": "all"})
        assert config.recompile_limit == 2 and config.logs == {"all"}
    finally:
        for name, value in saved.items():
            setattr(config, name, value)


def test_log_prints_enabled_topics_only(capsys: pytest.CaptureFixture[str]) -> None:
    with patch(logs="graphs"):
        assert log_enabled("graphs") and not log_enabled("guards")
        log("graphs", "the graph")
        log("guards", "not shown")
    assert capsys.readouterr().err == "[ember.graphs] the graph\n"


def test_all_enables_every_topic_and_messages_can_be_lazy(
    capsys: pytest.CaptureFixture[str],
) -> None:
    calls: list[int] = []

    def expensive() -> str:
        calls.append(1)
        return "costly text"

    log("output_code", expensive)
    assert calls == []
    with patch(logs="all"):
        assert all(log_enabled(t) for t in TOPICS)
        log("output_code", expensive)
    assert calls == [1]
    assert capsys.readouterr().err == "[ember.output_code] costly text\n"


def test_logs_go_through_the_logging_module(caplog: pytest.LogCaptureFixture) -> None:
    with patch(logs="recompiles"), caplog.at_level(logging.INFO, logger="ember"):
        log("recompiles", "guard x.size(0) == 4 failed")
    assert [(r.name, r.getMessage()) for r in caplog.records] == [
        ("ember.recompiles", "guard x.size(0) == 4 failed")]


def test_unknown_topic_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown Ember log topic 'graph'"):
        log("graph", "typo")
