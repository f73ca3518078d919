"""A missing stage names the command that installs it, from a package index and in a
checkout of the repository."""

from __future__ import annotations

import pytest
from ember.runtime import stages as stages_module
from ember.runtime.stages import StageNotInstalledError, load_stage


@pytest.mark.parametrize(("stage", "dist"), [("aot", "ember-aot"),
                                             ("inductor", "ember-inductor")])
def test_a_missing_stage_names_the_commands_that_install_it(
        monkeypatch: pytest.MonkeyPatch, stage: str, dist: str) -> None:
    monkeypatch.setattr(stages_module, "available_stages", dict)
    with pytest.raises(StageNotInstalledError) as e:
        load_stage(stage)
    message = str(e.value)
    assert f"pip install {dist}" in message
    assert f"pip install -e packages/{stage}" in message
    assert "python3 tools/dev.py setup" in message
