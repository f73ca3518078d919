"""save/load of the .ember container and program.json: round trips, versions, golden."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

import pytest
import torch
from ember.runtime.ir import (
    SCHEMA_VERSION,
    IRFormatError,
    Program,
    load,
    program_from_json,
    program_to_json,
    save,
    schema,
)
from ir_samples import SAMPLES, assert_same_program, mlp, training

GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize("name", list(SAMPLES))
def test_save_load_round_trip(name: str, tmp_path: Path) -> None:
    program = SAMPLES[name]()
    path = tmp_path / f"{name}.ember"
    save(program, path)
    assert_same_program(program, load(path))


def test_save_load_through_file_objects() -> None:
    program = training()
    buf = io.BytesIO()
    save(program, buf)
    buf.seek(0)
    assert_same_program(program, load(buf))


def test_container_members_and_stamp(tmp_path: Path) -> None:
    path = tmp_path / "p.ember"
    save(training(), path, producer=("ember-aot", "0.3.1"))
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        doc = json.loads(zf.read("program.json"))
        manifest = json.loads(zf.read("manifest.json"))
        data = {n: zf.read(n) for n in names - {"manifest.json"}}
    assert names == {"program.json", "tensors.safetensors", "files/kernels/k0.cpp",
                     "files/bin/k0.so", "files/empty.txt", "manifest.json"}
    assert manifest == {"format": "ember-manifest",
                        "sha256": {n: hashlib.sha256(d).hexdigest() for n, d in data.items()}}
    assert doc["schema_version"] == "1.3" == f"{SCHEMA_VERSION[0]}.{SCHEMA_VERSION[1]}"
    assert doc["producer"] == {"package": "ember-aot", "version": "0.3.1"}
    assert doc["format"] == "ember-program"
    assert doc["tensors"]["c128"] == {"dtype": "complex128", "shape": [3], "device": "cpu",
                                      "requires_grad": False}


def test_default_producer_is_ember_runtime() -> None:
    doc = program_to_json(mlp())
    assert doc["producer"] == {"package": "ember-runtime",
                               "version": schema.default_producer()[1]}
    assert doc["producer"]["version"] != "unknown"  # type: ignore[index]


def test_tensor_values_dtypes_and_flags_survive(tmp_path: Path) -> None:
    program = training()
    path = tmp_path / "t.ember"
    save(program, path)
    loaded = load(path).tensors
    assert loaded["mask"].dtype == torch.bool and torch.equal(loaded["mask"],
                                                              program.tensors["mask"])
    assert loaded["bf"].dtype == torch.bfloat16
    assert torch.equal(loaded["bf"].float(), program.tensors["bf"].float())
    assert loaded["c128"].dtype == torch.complex128
    assert torch.equal(loaded["c128"], program.tensors["c128"])
    assert loaded["fc.weight"].requires_grad and not loaded["mask"].requires_grad
    assert loaded["scalar"].shape == () and loaded["scalar"].item() == 7
    # non-contiguous tensors come back as contiguous copies with the same values
    assert not program.tensors["strided"].is_contiguous()
    assert loaded["strided"].is_contiguous()
    assert torch.equal(loaded["strided"], program.tensors["strided"])


def test_tensors_sharing_storage_are_saved(tmp_path: Path) -> None:
    base = torch.randn(4, 4)
    program = mlp()
    program.tensors = {"fc.weight": base.repeat(2, 2), "tied": base, "view": base[1]}
    save(program, tmp_path / "s.ember")
    loaded = load(tmp_path / "s.ember")
    assert torch.equal(loaded.tensors["view"], base[1])
    assert torch.equal(loaded.tensors["tied"], base)


def test_map_location_moves_tensors(tmp_path: Path) -> None:
    save(mlp(), tmp_path / "m.ember")
    loaded = load(tmp_path / "m.ember", map_location="meta")
    assert loaded.tensors["fc.weight"].device.type == "meta"


def test_a_map_location_that_is_no_device_is_named(tmp_path: Path) -> None:
    """It said a tensor 'was saved from cpu, where it cannot be put back here'."""
    save(mlp(), tmp_path / "m.ember")
    with pytest.raises(ValueError, match="map_location='bogus' is not a device"):
        load(tmp_path / "m.ember", map_location="bogus")


def test_program_json_is_plain_json_and_deterministic() -> None:
    doc = program_to_json(training(), producer=("p", "1"))
    text = json.dumps(doc, allow_nan=False)
    assert json.dumps(program_to_json(training(), producer=("p", "1")), allow_nan=False) == text
    program = training()
    again = program_from_json(json.loads(text), program.tensors, program.files)
    assert_same_program(program, again)


def test_program_from_json_without_tensors_gives_meta_stand_ins() -> None:
    program = training()
    doc = program_to_json(program)
    again = program_from_json(doc, files=program.files)
    t = again.tensors["c128"]
    assert (t.device.type, t.dtype, tuple(t.shape)) == ("meta", torch.complex128, (3,))
    with pytest.raises(IRFormatError, match="meta device"):
        save(again, io.BytesIO())


def test_argument_encodings_are_the_documented_ones() -> None:
    doc = program_to_json(SAMPLES["every_argument"]())
    values = doc["graphs"]["forward"]["nodes"][2]["args"]  # type: ignore[index]
    assert values[:6] == [None, True, False, 0, -7, 2**70]
    assert values[12:15] == [{"float": "inf"}, {"float": "-inf"}, {"float": "nan"}]
    assert {"complex": [{"float": "inf"}, {"float": "nan"}]} in values
    assert {"dtype": "bfloat16"} in values and {"device": "cuda:1"} in values
    assert {"memory_format": "channels_last"} in values and {"layout": "strided"} in values
    refs = doc["graphs"]["forward"]["nodes"][3]["args"][0]  # type: ignore[index]
    assert refs == {"tuple": [{"ref": "max", "index": 0}, {"ref": "max", "index": 1},
                              {"ref": "x"}]}


def test_metadata_must_be_json_data() -> None:
    program = mlp()
    program.metadata = {"spec": (1, 2)}
    with pytest.raises(IRFormatError, match=r"metadata\.spec: a tuple is not JSON data"):
        save(program, io.BytesIO())


def test_argument_outside_the_closed_set_is_refused() -> None:
    program = mlp()
    program.graphs["forward"].nodes[2].args = (object(),)  # type: ignore[assignment]
    with pytest.raises(IRFormatError, match="object .* is not an Ember IR argument"):
        save(program, io.BytesIO())


# ---- versions ---------------------------------------------------------------------------


def test_golden_schema_1_0_file_loads() -> None:
    loaded = load(GOLDEN / "training_v1_0.ember")
    assert_same_program(training(), loaded)


def test_golden_schema_1_2_file_loads() -> None:
    # the last release before 1.3 (symbols unbounded below, aliased outputs' dtype)
    loaded = load(GOLDEN / "training_v1_2.ember")
    assert_same_program(training(), loaded)


def _doc_with_version(version: str) -> dict[str, object]:
    doc = program_to_json(mlp())
    doc["schema_version"] = version
    return doc


def test_older_minor_is_upgraded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A synthetic schema 1.1 renames metadata key 'model' to 'model_name'; a 1.0
    document goes through the registered upgrader."""
    def rename_model(doc: dict[str, object]) -> dict[str, object]:
        meta = dict(doc["metadata"])  # type: ignore[call-overload]
        meta["model_name"] = meta.pop("model")
        return {**doc, "metadata": meta}

    monkeypatch.setattr(schema, "SCHEMA_VERSION", (1, 1))
    monkeypatch.setitem(schema.UPGRADERS, (1, 0), rename_model)
    program = mlp()
    loaded = program_from_json(_doc_with_version("1.0"), program.tensors)
    assert loaded.metadata == {"model_name": "mlp"}
    # a document of the current minor is not upgraded
    current = program_from_json(_doc_with_version("1.1"), program.tensors)
    assert current.metadata == {"model": "mlp"}
    # and the upgraded document is stamped with the current version
    assert program_to_json(loaded)["schema_version"] == "1.1"


def test_older_minor_without_upgrader_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schema, "SCHEMA_VERSION", (1, 4))
    monkeypatch.setitem(schema.UPGRADERS, (1, 0), lambda d: d)
    with pytest.raises(IRFormatError, match="no upgrader from schema 1.3 to 1.4"):
        program_from_json(_doc_with_version("1.0"), mlp().tensors)


def test_newer_minor_is_refused() -> None:
    with pytest.raises(IRFormatError, match=r"schema version 1\.7 .* is newer"):
        program_from_json(_doc_with_version("1.7"), mlp().tensors)


@pytest.mark.parametrize("version", ["one", "01.1", "1.01", "\u0661.1", "1.\u0661", "1.1 "])
def test_malformed_version_is_refused(version: str) -> None:
    # ("01.1" and Arabic-Indic digits read as 1.1 through int())
    with pytest.raises(IRFormatError, match="is not 'MAJOR.MINOR'"):
        program_from_json(_doc_with_version(version), mlp().tensors)


@pytest.mark.parametrize("size", [-4, 10**39])
def test_a_static_size_no_tensor_can_have_is_refused(size: int) -> None:
    doc = program_to_json(mlp())
    node = next(n for n in doc["graphs"]["forward"]["nodes"]  # type: ignore[index]
                if n["op"] == "placeholder")
    node["meta"]["tensor"]["sizes"][0] = size
    with pytest.raises(IRFormatError, match=rf"size {size} is not in \[0, 2\*\*63\)"):
        program_from_json(doc, mlp().tensors)


def test_empty_program(tmp_path: Path) -> None:
    save(Program(), tmp_path / "e.ember")
    loaded = load(tmp_path / "e.ember")
    assert loaded == Program() and loaded.tensors == {}


def test_recorded_program_round_trips(tmp_path: Path) -> None:
    """A program captured by the runtime's recorder: real ops, constants (one holding
    NaN), multi-result nodes, dtype and memory-format arguments, source locations."""
    from ember.runtime.ir import InputKind, InputSpec, parse_program, print_program
    from ember.runtime.tracing import GraphRecorder

    rec = GraphRecorder()
    x = rec.add_input(torch.randn(2, 3, 8, 8), InputSpec("x"))
    w = rec.add_input(torch.randn(4, 3, 3, 3), InputSpec("w", InputKind.PARAMETER, "c.weight"))
    with rec:
        y = torch.nn.functional.conv2d(x, w, padding=1)
        a, b = y.split(2, dim=1)
        m, i = a.max(dim=1)
        z = b.sum(dim=(2, 3), keepdim=True, dtype=torch.float64)
        z = z.to(memory_format=torch.channels_last).float().clamp(min=-1.5) * 1e-5
        q = torch.full((2,), float("-inf")) + torch.tensor([1.0, float("nan")])
    program = rec.finish([z, m, i, q])
    save(program, tmp_path / "r.ember")
    assert_same_program(program, load(tmp_path / "r.ember"))
    text = print_program(program)
    assert "aten::max.dim(%split.0, 1)" in text
    assert_same_program(program, parse_program(text, tensors=program.tensors))


@pytest.mark.parametrize(("tensor", "message"), [
    (torch.randn(3).to_sparse(), "a torch.sparse_coo tensor cannot be saved"),
    (torch.empty(3, device="meta"), "a tensor on the meta device has no values"),
])
def test_unsavable_tensors_are_refused(tensor: torch.Tensor, message: str) -> None:
    with pytest.raises(IRFormatError, match=f"tensor 'bad': {message}"):
        save(Program(tensors={"bad": tensor}), io.BytesIO())
