"""Loading a program pauses Python's garbage collector and gives it back as it was
(``ember.runtime.ir.gc_pause``): enabled after a load, after a failed load, and still
disabled for a program that disabled it itself."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
from ember.runtime.ir import IRFormatError, load, save
from ember.runtime.ir.gc_pause import collector_paused
from handbuilt import mlp_program


@pytest.fixture
def restore_gc() -> Iterator[None]:
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_the_pause_disables_the_collector_and_restores_it(restore_gc: None) -> None:
    gc.enable()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner pause restores the outer pause's state
    assert gc.isenabled()
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_a_load_runs_paused_and_leaves_the_collector_as_it_was(
        tmp_path: Path, restore_gc: None, monkeypatch: pytest.MonkeyPatch) -> None:
    import ember.runtime.ir.serialize as serialize

    program, _ = mlp_program()
    path = tmp_path / "mlp.ember"
    save(program, path)
    seen: list[bool] = []
    real = serialize._read_program

    def spy(*args: object) -> object:
        seen.append(gc.isenabled())
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(serialize, "_read_program", spy)
    gc.enable()
    loaded = load(path)
    assert seen == [False] and gc.isenabled()
    assert loaded.graphs.keys() == program.graphs.keys()
    with open(path, "rb") as f:
        load(f)
    assert seen == [False, False] and gc.isenabled()
    path.write_bytes(b"not a zip")
    with pytest.raises(IRFormatError):
        load(path)
    assert gc.isenabled()
