"""The program cache's APIs for the frontend's capture cache: the shared entry framing,
``entry_digest`` (which entry a compile stored or loaded) and ``load_entry`` (loading
one without its captured program), the ``subdir`` of a local cache, and the cheap
source stamps of the capture cache's key."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from counting_stage import CountingStage, install_counting_stage
from ember.runtime.cache.entry import EntryError, frame, unframe
from ember.runtime.cache.key import distribution_stamp
from ember.runtime.cache.local import LocalProgramCache
from ember.runtime.cache.program_cache import entry_digest, load_entry
from ember.runtime.config import patch
from ember.runtime.ir import Program
from ember.runtime.pipeline import compile_program
from handbuilt import ProgramBuilder, mlp_program


@pytest.fixture
def stage(monkeypatch: pytest.MonkeyPatch) -> CountingStage:
    return install_counting_stage(monkeypatch)


@pytest.fixture
def cache_dir(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "cache"
    with patch(program_cache=True, cache_enabled=True, cache_dir=root, remote_cache=None):
        yield root


def test_framing_round_trips_and_names_what_is_wrong() -> None:
    data = frame(b"ember-alpha-cache\n", "k1", b"payload", extra=[1, 2])
    header, payload = unframe(data, b"ember-alpha-cache\n", "k1")
    assert (payload, header["extra"], header["key"]) == (b"payload", [1, 2], "k1")
    with pytest.raises(EntryError, match="not a beta cache entry"):
        unframe(data, b"ember-beta-cache\n", "k1")
    with pytest.raises(EntryError, match="stored for another key"):
        unframe(data, b"ember-alpha-cache\n", "k2")
    with pytest.raises(EntryError, match="does not match its SHA-256"):
        unframe(data[:-1] + b"X", b"ember-alpha-cache\n", "k1")


def _user_input_program() -> Program:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3), name="x")
    y = pb.input(torch.randn(3), name="y")
    program: Program = pb.finish(pb.call("aten::mul.Tensor", pb.call("aten::add.Tensor", x, y), x))
    return program


def test_a_stored_compile_is_loaded_by_its_digest_without_its_program(
        stage: CountingStage, cache_dir: Path) -> None:
    program = _user_input_program()
    assert entry_digest(program) is None
    first = compile_program(program, "aot_eager")
    digest = entry_digest(program)
    assert digest is not None and (cache_dir / "programs" / f"{digest}.entry").exists()
    loaded = load_entry(digest)
    assert loaded is not None and stage.runs == 1
    from ember.runtime.callable import ProgramCallable

    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(ProgramCallable(loaded)([x, y])[0], first([x, y])[0])
    assert load_entry("0" * 64) is None


def test_an_entry_that_left_tensors_out_is_kept_but_not_loaded_without_its_program(
        stage: CountingStage, cache_dir: Path) -> None:
    program, _ = mlp_program()  # its weights are tensors of the program, left out
    compile_program(program, "aot_eager")
    digest = entry_digest(program)
    assert digest is not None
    assert load_entry(digest) is None
    assert (cache_dir / "programs" / f"{digest}.entry").exists()
    compile_program(program, "aot_eager")  # a compile with the program still hits
    assert stage.runs == 1


def test_a_local_cache_keeps_its_entries_in_its_subdir(tmp_path: Path) -> None:
    cache = LocalProgramCache(tmp_path, "captures")
    cache.write("k", b"data")
    assert (tmp_path / "captures" / "k.entry").read_bytes() == b"data"
    assert oct((tmp_path / "captures").stat().st_mode & 0o777) == oct(0o700)


def test_a_source_stamp_changes_with_an_edit(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "stamped_pkg"
    package.mkdir()
    source = package / "__init__.py"
    source.write_text("A = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = distribution_stamp("stamped-pkg", "stamped_pkg")
    distribution_stamp.cache_clear()
    source.write_text("A = 2\n")
    os.utime(source, ns=(1, 1))
    after = distribution_stamp("stamped-pkg", "stamped_pkg")
    distribution_stamp.cache_clear()
    assert before.startswith("stamped-pkg none stamp ") and before != after


def test_usage_skips_an_entry_removed_while_it_counts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process removes an entry between the listing and its ``lstat`` (a
    ``cache clear``, a corrupt entry dropped): ``cache info`` raised FileNotFoundError."""
    cache = LocalProgramCache(tmp_path / "root")
    cache.write("a" * 64, b"12345")
    listed = pathlib.Path.iterdir

    def with_a_vanished_entry(self: pathlib.Path) -> Iterator[pathlib.Path]:
        yield from listed(self)
        yield self / ("b" * 64 + ".entry")

    monkeypatch.setattr(pathlib.Path, "iterdir", with_a_vanished_entry)
    usage = cache.usage()
    assert (usage.entries, usage.bytes) == (1, 5)
