"""Crafted and corrupt .ember files: each fails with an IRFormatError naming the problem,
and none runs code."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
import torch
from ember.runtime.ir import IRFormatError, SymExpr, load, program_to_json, save
from ember.runtime.ir.archive import write_archive
from ir_samples import mlp


def write_ember(path: Path, doc: Any = None, tensors: bytes | None = None,
                members: dict[str, bytes] | None = None) -> Path:
    """A .ember zip with ``doc`` as program.json (default: the mlp program's), ``tensors``
    as tensors.safetensors (default: its tensors) and extra ``members``."""
    program = mlp()
    if doc is None:
        doc = program_to_json(program)
    if tensors is None:
        tensors = safetensors.torch.save(dict(program.tensors))
    written: dict[str, bytes] = {}
    if doc is not ...:
        written["program.json"] = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    written["tensors.safetensors"] = tensors
    written.update(members or {})
    write_archive(str(path), written, frozenset())  # with a matching manifest.json
    return path


def mlp_doc() -> dict[str, Any]:
    return copy.deepcopy(program_to_json(mlp()))


class _CreatesMarker:
    """Unpickling this creates the file ``marker``: proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.marker), "w"))


def test_baseline_file_loads(tmp_path: Path) -> None:
    assert load(write_ember(tmp_path / "ok.ember")) == mlp()


def test_pickle_in_place_of_tensors_is_not_executed(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_CreatesMarker(marker))
    # the control: unpickling this payload does create the marker
    control = tmp_path / "control"
    pickle.loads(pickle.dumps(_CreatesMarker(control)))
    assert control.exists()
    path = write_ember(tmp_path / "evil.ember", tensors=payload)
    with pytest.raises(IRFormatError, match="tensors.safetensors is not a valid safetensors"):
        load(path)
    assert not marker.exists()


def test_pickle_in_place_of_program_json_is_not_executed(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = write_ember(tmp_path / "evil.ember", doc=pickle.dumps(_CreatesMarker(marker)))
    with pytest.raises(IRFormatError, match="program.json is not valid JSON"):
        load(path)
    assert not marker.exists()


def test_torch_save_checkpoint_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "model.ember"
    torch.save({"w": torch.ones(2), "evil": _CreatesMarker(marker)}, path)
    with pytest.raises(IRFormatError, match="has no program.json: not an Ember program"):
        load(path)
    assert not marker.exists()


def test_unknown_operator(tmp_path: Path) -> None:
    doc = mlp_doc()
    doc["graphs"]["forward"]["nodes"][3]["target"] = "aten::nonexistent_op.default"
    with pytest.raises(IRFormatError, match=r"graph 'forward', node 3 \(%mm\): unknown "
                                            r"operator 'aten::nonexistent_op.default'"):
        load(write_ember(tmp_path / "p.ember", doc))


def test_unknown_major_version(tmp_path: Path) -> None:
    doc = mlp_doc()
    doc["schema_version"] = "2.0"
    doc["producer"] = {"package": "ember-frontend", "version": "9.0"}
    doc["graphs"] = "a format this reader cannot know"
    with pytest.raises(IRFormatError, match=r"unsupported schema major version 2\.0 "
                                            r"\(written by ember-frontend 9\.0\)"):
        load(write_ember(tmp_path / "p.ember", doc))


def test_truncated_zip(tmp_path: Path) -> None:
    path = tmp_path / "p.ember"
    save(mlp(), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(IRFormatError, match="not a valid .ember zip archive"):
        load(path)


def test_not_a_zip(tmp_path: Path) -> None:
    path = tmp_path / "p.ember"
    path.write_text("program dialect=aten\n")
    with pytest.raises(IRFormatError, match="p.ember: not a valid .ember zip archive"):
        load(path)


def test_missing_program_json(tmp_path: Path) -> None:
    with pytest.raises(IRFormatError, match="the archive has no program.json"):
        load(write_ember(tmp_path / "p.ember", doc=...))


def test_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="absent.ember"):
        load(tmp_path / "absent.ember")


def test_malformed_json(tmp_path: Path) -> None:
    path = write_ember(tmp_path / "p.ember", doc=b'{"format": "ember-program", ')
    with pytest.raises(IRFormatError, match="program.json is not valid JSON: Expecting"):
        load(path)


def test_not_an_ember_document(tmp_path: Path) -> None:
    with pytest.raises(IRFormatError, match="'format' is None, not 'ember-program'"):
        load(write_ember(tmp_path / "p.ember", doc={"graphs": {}}))


@pytest.mark.parametrize(("dtype", "shape", "message"), [
    (torch.float64, (8, 8), (r"tensor 'fc.weight' in tensors.safetensors is float64\[8, 8\] "
                            r"but program.json declares float32\[8, 8\]")),
    (torch.float32, (8, 9), r"is float32\[8, 9\] but program.json declares float32\[8, 8\]"),
])
def test_tensor_differs_from_declaration(tmp_path: Path, dtype: torch.dtype,
                                         shape: tuple[int, ...], message: str) -> None:
    tensors = safetensors.torch.save({"fc.weight": torch.randn(shape).to(dtype)})
    with pytest.raises(IRFormatError, match=message):
        load(write_ember(tmp_path / "p.ember", tensors=tensors))


def test_integer_tensor_declared_requiring_grad(tmp_path: Path) -> None:
    doc = mlp_doc()
    doc["tensors"]["fc.weight"].update(dtype="int64", requires_grad=True)
    tensors = safetensors.torch.save({"fc.weight": torch.zeros(8, 8, dtype=torch.int64)})
    with pytest.raises(IRFormatError, match=r"tensor 'fc.weight': program.json declares "
                                            r"requires_grad for a int64\[8, 8\] tensor"):
        load(write_ember(tmp_path / "p.ember", doc=doc, tensors=tensors))


def test_declared_tensor_absent(tmp_path: Path) -> None:
    tensors = safetensors.torch.save({})
    with pytest.raises(IRFormatError, match=r"tensor\(s\) \['fc.weight'\] are declared but "
                                            "their values are absent"):
        load(write_ember(tmp_path / "p.ember", tensors=tensors))


def test_undeclared_tensor_present(tmp_path: Path) -> None:
    tensors = safetensors.torch.save({"fc.weight": torch.randn(8, 8), "x": torch.ones(1)})
    with pytest.raises(IRFormatError, match="holds tensor 'x', which program.json does "
                                            "not declare"):
        load(write_ember(tmp_path / "p.ember", tensors=tensors))


def test_declared_file_absent_and_unexpected_member(tmp_path: Path) -> None:
    doc = mlp_doc()
    doc["files"] = ["k.cpp"]
    with pytest.raises(IRFormatError, match=r"file\(s\) \['k.cpp'\] are declared"):
        load(write_ember(tmp_path / "a.ember", doc))
    with pytest.raises(IRFormatError, match=r"unexpected member 'notes.txt'"):
        load(write_ember(tmp_path / "b.ember", members={"notes.txt": b"hi"}))


@pytest.mark.parametrize("name", ["../escape.py", "a/../../b", "/etc/x", "a//b", "./a",
                                  "a\\b", "dir/", ""])
def test_file_member_names_are_plain_relative_paths(tmp_path: Path, name: str) -> None:
    doc = mlp_doc()
    doc["files"] = [name]
    path = write_ember(tmp_path / "a.ember", doc, members={"files/" + name: b"x = 1"})
    with pytest.raises(IRFormatError, match=r"member 'files/.*': file name .*relative path"):
        load(path)
    program = mlp()
    program.files[name] = b"x = 1"
    with pytest.raises(IRFormatError, match=r"file name .*relative path"):
        save(program, tmp_path / "b.ember")
    program.files = {"kernels/k.py": b"x = 1"}  # a plain nested name is fine
    save(program, tmp_path / "c.ember")
    assert load(tmp_path / "c.ember").files == {"kernels/k.py": b"x = 1"}


@pytest.mark.parametrize(("encoding", "message"), [
    ({"tuple": 3}, r"args\[0\]\.tuple: expected a JSON array, got int 3"),
    ([1, 2], r"args\[0\]: bad argument encoding: a bare JSON array"),
    ({"dtype": "__class__"}, r"args\[0\]: unknown dtype '__class__'"),
    ({"dtype": "Tensor"}, r"args\[0\]: unknown dtype 'Tensor'"),
    ({"device": "cuda:x"}, r"args\[0\]: unknown device 'cuda:x'"),
    ({"memory_format": "os.system"}, r"args\[0\]: unknown memory format 'os.system'"),
    ({"float": "1e400"}, r"args\[0\]: expected a float encoding"),
    ({"ref": 3}, r"args\[0\]\.ref: expected a string, got int 3"),
    ({"ref": "w", "index": "0"}, r"args\[0\]\.index: expected an integer"),
    ({"ref": "w", "idx": 0}, r"args\[0\]: unexpected key\(s\) \['idx'\]"),
    ({"pickle": "gASV"}, r"args\[0\]: bad argument encoding: unknown kind 'pickle'"),
    ({"complex": [1.0]}, r"args\[0\]\.complex: expected \[real, imag\]"),
    ({}, r"args\[0\]: bad argument encoding dict \{\}"),
])
def test_bad_argument_encoding(tmp_path: Path, encoding: Any, message: str) -> None:
    doc = mlp_doc()
    doc["graphs"]["forward"]["nodes"][2]["args"] = [encoding]
    with pytest.raises(IRFormatError, match=r"graphs\.forward\.nodes\[2\]\." + message):
        load(write_ember(tmp_path / "p.ember", doc))


@pytest.mark.parametrize(("edit", "message"), [
    (lambda n: n[2].update(meta={"tensor": {"dtype": "float32"}}),
     r"nodes\[2\]\.meta\.tensor: missing key\(s\)"),
    (lambda n: n[2].update(meta={"scalar": "SymInt"}),
     r"nodes\[2\]\.meta\.scalar: unknown scalar type 'SymInt'"),
    (lambda n: n[2].update(source={"file": "a.py", "line": "12", "function": "",
                                   "text": ""}),
     r"nodes\[2\]\.source\.line: expected an integer"),
    (lambda n: n[2].update(op="call_function"),
     r"node 2 \(%t\): unknown opcode 'call_function'"),
    (lambda n: n[2].pop("kwargs"), r"nodes\[2\]: missing key\(s\) \['kwargs'\]"),
])
def test_bad_node_encoding(tmp_path: Path, edit: Any, message: str) -> None:
    doc = mlp_doc()
    edit(doc["graphs"]["forward"]["nodes"])
    with pytest.raises(IRFormatError, match=message):
        load(write_ember(tmp_path / "p.ember", doc))


def test_use_before_definition(tmp_path: Path) -> None:
    doc = mlp_doc()
    nodes = doc["graphs"]["forward"]["nodes"]
    nodes[2], nodes[3] = nodes[3], nodes[2]  # %mm now reads %t before %t is defined
    with pytest.raises(IRFormatError, match=r"node 2 \(%mm\): uses %t, a value defined "
                                            "later"):
        load(write_ember(tmp_path / "p.ember", doc))


def test_cycle(tmp_path: Path) -> None:
    doc = mlp_doc()
    nodes = doc["graphs"]["forward"]["nodes"]
    nodes[2]["args"] = [{"ref": "mm"}]  # %t reads %mm, which reads %t
    with pytest.raises(IRFormatError, match=r"node 2 \(%t\): uses %mm, a value defined later"):
        load(write_ember(tmp_path / "p.ember", doc))
    nodes[2]["args"] = [{"ref": "t"}]  # %t reads itself
    with pytest.raises(IRFormatError, match=r"node 2 \(%t\): uses %t, itself"):
        load(write_ember(tmp_path / "q.ember", doc))


def test_name_defined_twice(tmp_path: Path) -> None:
    doc = mlp_doc()
    doc["graphs"]["forward"]["nodes"][3]["name"] = "t"
    with pytest.raises(IRFormatError, match=r"node 3 \(%t\): the name %t is defined twice"):
        load(write_ember(tmp_path / "p.ember", doc))


def test_undefined_value_and_dangling_get_attr(tmp_path: Path) -> None:
    doc = mlp_doc()
    doc["graphs"]["forward"]["nodes"][3]["args"] = [{"ref": "nowhere"}]
    with pytest.raises(IRFormatError, match="uses %nowhere, an undefined value"):
        load(write_ember(tmp_path / "p.ember", doc))
    doc = mlp_doc()
    doc["graphs"]["forward"]["nodes"][2].update(op="get_attr", target="missing.weight",
                                                args=[])
    with pytest.raises(IRFormatError, match="get_attr reads tensor 'missing.weight', which "
                                            "the program does not carry"):
        load(write_ember(tmp_path / "q.ember", doc))


def test_unknown_dialect_and_kind(tmp_path: Path) -> None:
    doc = mlp_doc()
    doc["dialect"] = "torchscript"
    with pytest.raises(IRFormatError, match="unknown dialect 'torchscript'"):
        load(write_ember(tmp_path / "p.ember", doc))
    doc = mlp_doc()
    doc["signature"]["inputs"]["forward"][1]["kind"] = "weight"
    with pytest.raises(IRFormatError, match=r"signature\.inputs\.forward\[1\]\.kind: unknown "
                                            "kind 'weight'"):
        load(write_ember(tmp_path / "q.ember", doc))


@pytest.mark.parametrize(("where", "text"), [
    ("guard", "__import__('os').system('touch {marker}') == 0"),
    ("sym", "__import__('os').system('touch {marker}')"),
    ("size", "(lambda: __import__('os').system('touch {marker}'))()"),
])
def test_crafted_size_text_never_runs(tmp_path: Path, where: str, text: str) -> None:
    """Size expressions and guards are checked against the grammar before anything
    evaluates them: loading, verifying, binding and interpreting refuse the text."""
    from ember.runtime.interpreter import run_program
    from ember.runtime.ir import VerificationError, verify
    from ember.runtime.ir.symbolic import SymbolBinder
    from ir_samples import symbolic

    marker = tmp_path / "pwned"
    text = text.format(marker=marker)
    program = symbolic()
    graph = program.forward
    if where == "guard":
        graph.guards[1] = dataclasses.replace(graph.guards[1], expr=text)
    elif where == "sym":
        graph.node("v").args = (graph.node("v").args[0], (SymExpr(text),))
    else:
        meta = graph.node("y").meta
        graph.node("y").meta = dataclasses.replace(meta, sizes=(text, 4))
    path = tmp_path / "p.ember"
    save(program, path)
    loaded = load(path, trusted=True)
    with pytest.raises(VerificationError, match="not allowed|only calls allowed"):
        verify(loaded)
    with pytest.raises(IRFormatError):
        if where == "guard":
            SymbolBinder(loaded.forward)
        else:
            run_program(loaded, [torch.zeros(32, 4), torch.zeros(64, 4)])
    assert not marker.exists()
