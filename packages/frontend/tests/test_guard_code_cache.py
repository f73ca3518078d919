"""A long guard check's code object is kept in the code cache
(``ember.runtime.compiled.code_cache``, kind ``guard``): a warm start rebuilds the check
of every guard from its capture-cache entry, and compiling it was ~0.1 s for a 12-layer
BERT. The text is the same in every process, so the second build is a hit; a short
check (a probe of one guard) is compiled, not cached."""

from __future__ import annotations

from pathlib import Path

import pytest
from ember.frontend.guard_writer import CACHED_TEXT
from ember.frontend.guards import compile_matcher
from ember.runtime.config import patch
from strict_helpers import LinearStack as Stack
from strict_helpers import captured_call


def test_a_long_check_is_compiled_once_and_read_back(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    guards, inputs, call = captured_call(Stack(24))
    with patch(cache_dir=tmp_path / "cache", logs="cache"):
        capsys.readouterr()
        first = compile_matcher(guards, inputs)
        assert len(first.__ember_source__) >= CACHED_TEXT
        assert "guard code cache miss" in capsys.readouterr().err
        second = compile_matcher(guards, inputs)
        assert "guard code cache hit" in capsys.readouterr().err
    assert second.__ember_source__ == first.__ember_source__
    assert len(list((tmp_path / "cache" / "wrapper-code").iterdir())) == 1
    passed, again = first(*call), second(*call)
    assert passed is not None and again is not None and len(again) == len(passed)
    assert all(a is b for a, b in zip(again, passed))


def test_a_short_check_is_not_cached(tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    guards, _, _ = captured_call(Stack(24))
    with patch(cache_dir=tmp_path / "cache", logs="cache"):
        capsys.readouterr()
        probe = compile_matcher(guards[:1])
        assert len(probe.__ember_source__) < CACHED_TEXT
        assert "guard code cache" not in capsys.readouterr().err
    assert not (tmp_path / "cache" / "wrapper-code").exists()
