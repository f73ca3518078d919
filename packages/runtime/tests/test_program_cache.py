"""The whole-program cache (ember.runtime.cache): hits and misses by key component,
weights never served from an entry, corrupt and foreign entries, ``cache info|clear``,
and the same key in another process. The stages are stand-ins that count their runs;
``test_program_cache_e2e.py`` runs the real ones in fresh processes."""

from __future__ import annotations

import dataclasses
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ember.runtime.cache.key as key_module
import ember.runtime.pipeline as pipeline_module
import pytest
import torch
from counting_stage import CountingStage, install_counting_stage
from ember.runtime.__main__ import main as cli_main
from ember.runtime.cache.local import LocalProgramCache
from ember.runtime.cache import ProgramCacheWarning, stats
from ember.runtime.cache.entry import MAGIC
from ember.runtime.cache.key import KeyRequest, Uncacheable, cache_key
from ember.runtime.compiled.private_cache import CacheDirError
from ember.runtime.config import Config, patch
from ember.runtime.ir import InputKind, Program, SourceLocation, TensorMeta, load, save
from ember.runtime.ir.graph import Node
from ember.runtime.pipeline import compile_program
from ember.runtime.stages import EagerGraphWarning, StageDeclined
from handbuilt import ProgramBuilder, mlp_program


@pytest.fixture
def stage(monkeypatch: pytest.MonkeyPatch) -> CountingStage:
    return install_counting_stage(monkeypatch)


@pytest.fixture
def cache_dir(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "cache"
    with patch(program_cache=True, cache_enabled=True, cache_dir=root, remote_cache=None):
        yield root


def _constant_program(value: float) -> Program:
    """x * c + w, c a constant node (its values can be folded), w a parameter."""
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3), name="x")
    w = pb.input(torch.randn(3), InputKind.PARAMETER, "w", name="w")
    c = pb.get_attr("c", torch.full((3,), value), op="constant")
    out = pb.call("aten::add.Tensor", pb.call("aten::mul.Tensor", x, c), w)
    program: Program = pb.finish(out)
    return program


def _entries(root: Path) -> list[Path]:
    return sorted((root / "programs").glob("*.entry"))


def test_second_compile_is_a_hit_that_runs_no_stage(
        stage: CountingStage, cache_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    program, _ = mlp_program()
    before = (stats().local_hits, stats().misses, stats().stores)
    with patch(logs="cache"):
        first = compile_program(program, "aot_eager")
        second = compile_program(program, "aot_eager")
    assert stage.runs == 1
    assert (stats().local_hits, stats().misses, stats().stores) == (
        before[0] + 1, before[1] + 1, before[2] + 1)
    x = torch.randn(2, 4)
    torch.testing.assert_close(second([x])[0], first([x])[0])
    (entry,) = _entries(cache_dir)
    short = entry.name[:16]
    logged = [line.split("] ", 1)[1] for line in capsys.readouterr().err.splitlines()
              if "program cache" in line]
    key = cache_key(KeyRequest(program, "aot_eager", (stage,), {}, None))
    components = " ".join(f"{n}={d[:8]}" for n, d in key.components.items())
    assert logged == [f"program cache miss {short} ({components})",
                      f"program cache store {short} ({entry.stat().st_size} bytes)",
                      f"program cache hit (local) {short}"]
    assert entry.stat().st_mode & 0o777 == 0o600
    assert (cache_dir / "programs").stat().st_mode & 0o777 == 0o700


class DecliningStage(CountingStage):
    def run(self, program: Program, options: dict[str, Any]) -> Program:
        self.runs += 1
        raise StageDeclined("needs a data-dependent shape")


def test_a_declined_compile_is_not_stored(monkeypatch: pytest.MonkeyPatch, cache_dir: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    declining = DecliningStage()
    monkeypatch.setattr(pipeline_module, "load_stage", lambda name: declining)
    program, _ = mlp_program()
    with patch(logs="cache"), pytest.warns(EagerGraphWarning):
        compile_program(program, "aot_eager")
    assert "not stored: a stage declined the program (needs a data-dependent shape)" \
        in capsys.readouterr().err
    assert _entries(cache_dir) == []


def test_the_setting_turns_it_off(stage: CountingStage, cache_dir: Path) -> None:
    program, _ = mlp_program()
    with patch(program_cache=False):
        compile_program(program, "aot_eager")
        compile_program(program, "aot_eager")
    with patch(cache_enabled=False):
        compile_program(program, "aot_eager")
    assert stage.runs == 3
    assert not (cache_dir / "programs").exists()


def test_settings_from_the_environment() -> None:
    env = {"EMBER_PROGRAM_CACHE": "0", "EMBER_REMOTE_CACHE": "redis://h:1/2",
           "EMBER_REMOTE_CACHE_KEY": "a-secret-of-16-bytes"}
    read = Config.from_env(env)
    assert (read.program_cache, read.remote_cache, read.remote_cache_key) == (
        False, "redis://h:1/2", "a-secret-of-16-bytes")
    assert "a-secret" not in repr(read)
    assert Config.from_env({}).program_cache is True
    with pytest.raises(ValueError, match="EMBER_PROGRAM_CACHE='maybe': expected 0 or 1"):
        Config.from_env({"EMBER_PROGRAM_CACHE": "maybe"})


def _request(program: Program, **changes: Any) -> KeyRequest:
    fields: dict[str, Any] = {"program": program, "backend": "aot_eager",
                              "stages": (CountingStage(),), "options": {"strict": True},
                              "mode": None}
    fields.update(changes)
    return KeyRequest(**fields)


def _changed_components(a: KeyRequest, b: KeyRequest) -> list[str]:
    ka, kb = cache_key(a), cache_key(b)
    changed = [n for n in ka.components if ka.components[n] != kb.components[n]]
    assert (ka.digest != kb.digest) == bool(changed)
    return changed


def _other_op() -> Program:
    program: Program = mlp_program()[0]
    relu = program.forward.node("v4")
    index = program.forward.nodes.index(relu)
    program.forward.nodes[index] = Node(relu.name, "call", "aten::sigmoid.default",
                                        relu.args, meta=relu.meta)
    return program


def _other_input_dtype() -> Program:
    program: Program = mlp_program()[0]
    x = program.forward.nodes[0]
    assert isinstance(x.meta, TensorMeta)
    program.forward.nodes[0] = Node(x.name, "placeholder", x.target,
                                    meta=TensorMeta.of(torch.zeros(2, 4, dtype=torch.float64)))
    return program


@pytest.mark.parametrize(("what", "change", "component"), [
    ("an op", lambda: _request(_other_op()), "program"),
    ("an input's dtype", lambda: _request(_other_input_dtype()), "program"),
    ("a constant's value", lambda: _request(_constant_program(2.0)), "tensors"),
    ("the backend", lambda: _request(_constant_program(1.0), backend="inductor"), "backend"),
    ("an option", lambda: _request(_constant_program(1.0), options={"strict": False}),
     "options"),
    ("the mode", lambda: _request(_constant_program(1.0), mode="max-autotune"), "mode"),
])
def test_a_changed_component_changes_the_key(what: str, change: Any, component: str) -> None:
    base = mlp_program()[0] if component == "program" else _constant_program(1.0)
    assert _changed_components(_request(base), change()) == [component], what


@pytest.mark.parametrize(("name", "value", "component"), [
    ("torch.__version__", "9.9.9", "torch"),
    ("installed_version", lambda dist: "0.0.1", "triton"),
    ("distribution_identity", lambda dist, package: f"{dist} 9.9 src 0", "stages"),
])
def test_versions_are_in_the_key(monkeypatch: pytest.MonkeyPatch, name: str, value: Any,
                                 component: str) -> None:
    request = _request(_constant_program(1.0))
    reference = cache_key(request)  # NOTE: fills distribution_identity's process cache
    owner, attr = (torch, "__version__") if name.startswith("torch") else (key_module, name)
    monkeypatch.setattr(owner, attr, value)
    changed = cache_key(request)
    assert [n for n in reference.components
            if reference.components[n] != changed.components[n]] == [component]


def test_cuda_capability_is_in_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3), name="x")
    program = pb.finish(pb.call("aten::sin.default", x))
    program.forward.nodes[0] = Node("x", "placeholder", "x", meta=TensorMeta(
        torch.float32, (3,), (1,), device=torch.device("cuda", 0)))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d: "NVIDIA H200")
    keys = []
    for capability in ((9, 0), (8, 0)):
        monkeypatch.setattr(torch.cuda, "get_device_capability",
                            lambda d, c=capability: c)
        keys.append(cache_key(_request(program)))
    assert [n for n in keys[0].components
            if keys[0].components[n] != keys[1].components[n]] == ["device"]


def test_an_option_without_stable_text_is_not_cached(
        stage: CountingStage, cache_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    program, _ = mlp_program()
    with patch(logs="cache"):
        compile_program(program, "aot_eager", options={"hook": object()})
    assert "program cache not used: option['hook'] is a object, which has no stable " \
           "text form" in capsys.readouterr().err
    assert _entries(cache_dir) == []


def _sourced(file: str) -> Program:
    program: Program = mlp_program()[0]
    program.forward.nodes = [
        dataclasses.replace(n, source=SourceLocation(file, 8, "forward"))
        if n.op == "call" else n for n in program.forward.nodes]
    return program


def test_fx_generated_file_names_do_not_change_the_key() -> None:
    # NOTE: torch.fx names a GraphModule's code <eval_with_key>.N, N counting per process
    first = cache_key(_request(_sourced("<eval_with_key>.1")))
    assert cache_key(_request(_sourced("<eval_with_key>.3"))).digest == first.digest
    assert cache_key(_request(_sourced("model.py"))).digest != first.digest


def test_a_constant_without_values_is_not_cached() -> None:
    program = _constant_program(1.0)
    program.tensors["c"] = torch.empty(3, device="meta")
    request = _request(program)
    with pytest.raises(Uncacheable, match="the values of tensor 'c' cannot be hashed"):
        cache_key(request)


def test_a_hit_runs_on_the_current_weights_not_the_stored_ones(
        stage: CountingStage, cache_dir: Path) -> None:
    program, ex = mlp_program()
    compile_program(program, "aot_eager")
    entry = _entries(cache_dir)[0].read_bytes()
    assert ex["w"].numpy().tobytes() not in entry  # weights are not stored
    new_w, new_b = torch.randn(3, 4), torch.randn(3)
    fresh, _ = mlp_program()
    fresh.tensors = {"fc.weight": new_w, "fc.bias": new_b}
    fn = compile_program(fresh, "aot_eager")
    assert stage.runs == 1
    assert fn.program.tensors["fc.weight"] is new_w
    x = torch.randn(2, 4)
    torch.testing.assert_close(fn([x])[0], torch.relu(x @ new_w.T + new_b) * 2)


def test_a_changed_constant_is_a_miss(stage: CountingStage, cache_dir: Path) -> None:
    compile_program(_constant_program(1.0), "aot_eager")
    fn = compile_program(_constant_program(3.0), "aot_eager")
    assert stage.runs == 2
    x = torch.ones(3)
    torch.testing.assert_close(fn([x, torch.zeros(3)])[0], torch.full((3,), 3.0))


@pytest.mark.parametrize("damage", ["truncate", "flip", "magic"])
def test_a_corrupt_entry_is_a_miss_with_a_warning(
        stage: CountingStage, cache_dir: Path, damage: str) -> None:
    program, _ = mlp_program()
    compile_program(program, "aot_eager")
    (entry,) = _entries(cache_dir)
    data = bytearray(entry.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        data[-100] ^= 0xFF
    else:
        data[:5] = b"EVIL!"
    entry.write_bytes(bytes(data))
    expected = {"truncate": "does not match its SHA-256", "flip": "does not match its SHA-256",
                "magic": "not a program cache entry"}[damage]
    with pytest.warns(ProgramCacheWarning, match=f"entry {entry.name[:16]} is not used "
                                                 f"\\(.*{expected}"):
        fn = compile_program(program, "aot_eager")
    assert stage.runs == 2
    assert fn([torch.randn(2, 4)])[0].shape == (2, 3)
    assert entry.read_bytes().startswith(MAGIC)  # stored again
    compile_program(program, "aot_eager")
    assert stage.runs == 2


def test_an_entry_of_another_key_is_refused(stage: CountingStage, cache_dir: Path) -> None:
    compile_program(_constant_program(1.0), "aot_eager")
    compile_program(_constant_program(2.0), "aot_eager")
    a, b = _entries(cache_dir)
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b)
    b.write_bytes(data_a)
    for value in (1.0, 2.0):
        with pytest.warns(ProgramCacheWarning, match="stored for another key"):
            compile_program(_constant_program(value), "aot_eager")
    assert stage.runs == 4


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_an_entry_owned_by_another_user_is_a_miss(stage: CountingStage,
                                                  cache_dir: Path) -> None:
    program, _ = mlp_program()
    compile_program(program, "aot_eager")
    (entry,) = _entries(cache_dir)
    os.chown(entry, 4242, 4242)
    with pytest.warns(ProgramCacheWarning, match="belongs to another user \\(uid 4242"):
        compile_program(program, "aot_eager")
    assert stage.runs == 2
    assert entry.stat().st_uid == os.getuid()  # replaced by this user's entry


def test_a_linked_entry_is_removed_not_followed(stage: CountingStage, cache_dir: Path,
                                                tmp_path: Path) -> None:
    program, _ = mlp_program()
    compile_program(program, "aot_eager")
    (entry,) = _entries(cache_dir)
    target = tmp_path / "elsewhere"
    target.write_bytes(entry.read_bytes())
    entry.unlink()
    entry.symlink_to(target)
    with pytest.warns(ProgramCacheWarning, match="is a symbolic link"):
        compile_program(program, "aot_eager")
    assert not entry.is_symlink() and target.exists()
    assert stage.runs == 2


def test_a_directory_open_to_others_is_refused(stage: CountingStage, cache_dir: Path) -> None:
    (cache_dir / "programs").mkdir(parents=True, mode=0o700)
    (cache_dir / "programs").chmod(0o777)
    program, _ = mlp_program()
    with pytest.raises(CacheDirError, match="programs is writable by group or others"):
        compile_program(program, "aot_eager")


def test_cache_info_and_clear(stage: CountingStage, cache_dir: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    compile_program(_constant_program(1.0), "aot_eager")
    compile_program(_constant_program(2.0), "aot_eager")
    size = sum(p.stat().st_size for p in _entries(cache_dir))
    captures = LocalProgramCache(cache_dir, "captures")  # (the frontend's capture cache)
    captures.write("a" * 64, b"a capture entry")
    assert cli_main(["cache", "info"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "program cache: on", f"local: {cache_dir / 'programs'}", "entries: 2",
        f"bytes: {size}", "capture entries (ember-frontend): 1 (15 bytes)",
        "stored Triton binaries: 0", "remote: none (EMBER_REMOTE_CACHE unset)"]
    assert cli_main(["cache", "clear"]) == 0
    assert capsys.readouterr().out == (
        f"removed 2 local entries from {cache_dir / 'programs'}\n"
        f"removed 1 capture entries from {cache_dir / 'captures'}\n")
    assert _entries(cache_dir) == [] and captures.usage().entries == 0
    assert cli_main(["cache", "clear", "--remote"]) == 1
    assert "EMBER_REMOTE_CACHE is not set" in capsys.readouterr().err


def test_clear_removes_entries_only(stage: CountingStage, cache_dir: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Files and folders under ``programs/`` that are no entry stay (they were all
    removed: ``EMBER_CACHE_DIR=$HOME`` emptied ``~/programs``)."""
    compile_program(_constant_program(1.0), "aot_eager")
    folder = cache_dir / "programs"
    (folder / "notes.txt").write_text("mine")
    (folder / "src").mkdir()
    (folder / "src" / "thesis.tex").write_text("mine")
    (folder / "dir.entry").mkdir()  # a folder is never an entry
    (folder / ".abc.entry.tmp1234").write_bytes(b"half")  # a writer's leftover
    assert cli_main(["cache", "clear"]) == 0
    assert capsys.readouterr().out == (f"removed 1 local entries from {folder}\n"
                                       f"removed 0 capture entries from "
                                       f"{cache_dir / 'captures'}\n")
    assert sorted(p.name for p in folder.iterdir()) == ["dir.entry", "notes.txt", "src"]
    assert (folder / "src" / "thesis.tex").read_text() == "mine"


_KEY_SCRIPT = """
import sys
from ember.runtime.cache.key import KeyRequest, Uncacheable, cache_key
from ember.runtime.ir import load
program = load(sys.argv[1])
print(cache_key(KeyRequest(program, "eager", (), {"strict": True}, None)).digest)
"""


def test_the_key_is_the_same_in_another_process(tmp_path: Path) -> None:
    program = _constant_program(1.0)
    path = tmp_path / "p.ember"
    save(program, path)
    theirs = subprocess.run([sys.executable, "-c", _KEY_SCRIPT, str(path)],
                            capture_output=True, text=True, check=True).stdout.strip()
    mine = cache_key(KeyRequest(load(path), "eager", (), {"strict": True}, None)).digest
    assert theirs == mine
    same = io.BytesIO()
    save(program, same)
    assert cache_key(KeyRequest(program, "eager", (), {"strict": True}, None)).digest == mine


def test_torch_numerics_settings_are_in_the_key() -> None:
    """The inductor bakes TF32 into its matmul templates: a program compiled under
    ``set_float32_matmul_precision("high")`` is not the one for ``"highest"``."""
    request = _request(_constant_program(1.0))
    saved = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        reference = cache_key(request)
        torch.set_float32_matmul_precision("high")
        changed = cache_key(request)
    finally:
        torch.set_float32_matmul_precision(saved)
    assert [n for n in reference.components
            if reference.components[n] != changed.components[n]] == ["settings"]


def test_grad_mode_is_in_the_key() -> None:
    """The aot stage derives a backward only with grad mode on: the same program
    compiled under ``torch.no_grad()`` is an inference program (a Dynamo graph called
    once under ``no_grad``, then with grad, is compiled twice from the same text)."""
    request = _request(_constant_program(1.0))
    with torch.no_grad():
        inference = cache_key(request)
    training = cache_key(request)
    assert [n for n in inference.components
            if inference.components[n] != training.components[n]] == ["grad"]
