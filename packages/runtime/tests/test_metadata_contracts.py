"""Typed stage contracts (issue 13, item 3): every ``Program.metadata`` key a stage writes
has a dataclass that round-trips through JSON, and malformed metadata is a
``MetadataError`` naming the key's path (and the file it came from) before anything runs.

The test that runs the stages and checks what they write is
``integration_tests/test_stage_contracts.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from ember.runtime.callable import ProgramCallable
from ember.runtime.compiled import LAUNCHERS, load_artifact
from ember.runtime.compiled.triton_kernel import TritonKernelSpec
from ember.runtime.compiled.triton_launcher import split_from_entry
from ember.runtime.ir import IRFormatError, OutputKind, OutputSpec, Program, save
from ember.runtime.ir.contracts import (
    KERNEL_LANGS,
    METADATA_KEYS,
    AliasedOutput,
    AotMetadata,
    CompiledGraphEntry,
    CompiledMetadata,
    CompileReport,
    CppLaunchMeta,
    InputAlias,
    InputAliases,
    KernelEntry,
    MetadataError,
    PartitionSummary,
    TritonLaunchMeta,
    TritonSplitMeta,
)
from handbuilt import ProgramBuilder

ALIASED = AliasedOutput(output=1, kind="input", base="x", identity=False, sizes=(2, 3),
                        strides=(3, 1), storage_offset=4, base_strides=(3, 1))
AOT = AotMetadata(
    aliased_outputs=(ALIASED, AliasedOutput(2, "output", "0", False, (6,), (1,), 0, (3, 1))),
    differentiable_outputs=(0, 2),
    extern_ops=("aten::median.default",),
    partition=PartitionSummary(saved_bytes=96, recomputed=("relu",), save_everything=False),
)
INPUT_ALIASES = InputAliases({"y": InputAlias("x", (4,), (2,), 1)})
SPLIT = TritonSplitMeta(entry="k_partial", constexprs={"RBLOCK": 1024}, grid=(8, 1, 1),
                        workspace_dtypes=(torch.float32, torch.int64), workspace_numel=8)
TRITON = TritonLaunchMeta(signature={"in_ptr0": "*fp32", "xnumel": "i32"},
                          constexprs={"XBLOCK": 64, "EVEN": True}, grid=(4, 1, 1),
                          num_warps=4, num_stages=1, split=SPLIT)
COMPILED = CompiledMetadata({
    "forward": CompiledGraphEntry(
        "forward/wrapper.py",
        (KernelEntry("kernel0", "cpp", "kernel0", "forward/cpp_0.cpp",
                     CppLaunchMeta((torch.float32, torch.bfloat16, torch.bool))),
         KernelEntry("kernel1", "triton", "kernel1", "forward/triton_1.py", TRITON)),
        {"c0": "_tensor_constant0"}, torch.device("cpu")),
    "backward": CompiledGraphEntry("backward/wrapper.py", (), {}, torch.device("cuda", 0)),
})
REPORT = CompileReport(kernels=2, fallbacks={"aten::sort.default": 1})

# One sample per contract: (dataclass, instance, the JSON a stage writes for it).
SAMPLES: list[tuple[Any, Any]] = [
    (InputAliases, INPUT_ALIASES), (InputAlias, InputAlias("x", (4,), (2,), 1)),
    (AotMetadata, AOT), (AotMetadata, AotMetadata()), (AliasedOutput, ALIASED),
    (AliasedOutput, AliasedOutput(0, "input", "a", False, (2, 3), (6, 2), 1, (3, 1),
                                  dtype=torch.float32)),  # a complex input's imag
    (CompiledMetadata, COMPILED), (CompiledGraphEntry, COMPILED.graphs["forward"]),
    (KernelEntry, COMPILED.graphs["forward"].kernels[0]), (CppLaunchMeta, CppLaunchMeta(())),
    (TritonLaunchMeta, TRITON), (TritonSplitMeta, SPLIT), (CompileReport, REPORT),
    (CompileReport, CompileReport()),
]


def test_every_key_a_stage_writes_has_its_dataclass() -> None:
    assert METADATA_KEYS == {"input_aliases": InputAliases, "aot": AotMetadata,
                             "compiled": CompiledMetadata, "kernels": CompileReport,
                             "fallbacks": CompileReport, "memory": CompileReport}
    assert set(LAUNCHERS) == set(KERNEL_LANGS)


@pytest.mark.parametrize(("kind", "value"), SAMPLES, ids=lambda x: type(x).__name__)
def test_dataclass_round_trips_through_json(kind: Any, value: Any) -> None:
    data = value.to_json()
    text = json.dumps(data)  # plain JSON data: lists, dicts, strings, numbers
    decoded = kind.from_json(json.loads(text))
    assert decoded == value
    assert decoded.to_json() == data


def test_the_on_disk_form_is_the_documented_one() -> None:
    # compiled/README.md: metadata["compiled"] of artifact format 1, unchanged
    assert COMPILED.to_json()["format"] == 1
    assert COMPILED.graphs["forward"].to_json() == {
        "wrapper": "forward/wrapper.py",
        "kernels": [
            {"name": "kernel0", "lang": "cpp", "entry": "kernel0", "source": "forward/cpp_0.cpp",
             "meta": {"arg_dtypes": ["float32", "bfloat16", "bool"]}},
            {"name": "kernel1", "lang": "triton", "entry": "kernel1",
             "source": "forward/triton_1.py",
             "meta": {"signature": {"in_ptr0": "*fp32", "xnumel": "i32"},
                      "constexprs": {"XBLOCK": 64, "EVEN": True}, "grid": [4, 1, 1],
                      "num_warps": 4, "num_stages": 1,
                      "split": {"entry": "k_partial", "constexprs": {"RBLOCK": 1024},
                                "grid": [8, 1, 1], "workspace_dtypes": ["float32", "int64"],
                                "workspace_numel": 8}}}],
        "constants": {"c0": "_tensor_constant0"}, "device": "cpu"}
    assert list(AOT.to_json()) == ["aliased_outputs", "differentiable_outputs", "saved_bytes",
                                   "recomputed", "save_everything", "extern_ops"]
    assert REPORT.to_json() == {"fallbacks": {"aten::sort.default": 1}, "kernels": 2}


def test_aot_metadata_of_ember_aot_0_1_0_has_no_extern_ops() -> None:
    old = {"aliased_outputs": [], "differentiable_outputs": [0]}
    assert AotMetadata.from_json(old) == AotMetadata(differentiable_outputs=(0,))


def _error(kind: Any, value: object) -> str:
    with pytest.raises(MetadataError) as info:
        kind.from_json(value)
    assert isinstance(info.value, IRFormatError) and isinstance(info.value, ValueError)
    return str(info.value)


def test_crafted_metadata_names_the_key() -> None:
    compiled = COMPILED.to_json()
    kernel = compiled["graphs"]["forward"]["kernels"][1]  # type: ignore[index]
    kernel["meta"]["grid"] = [4, "1", 1]
    assert "metadata['compiled']['graphs']['forward']['kernels'][1] (kernel 'kernel1')" \
           "['meta']['grid'][1]: expected an integer, got str '1'" in _error(CompiledMetadata,
                                                                             compiled)
    kernel["meta"]["grid"] = [4, 1, 1]
    kernel["meta"]["launcher"] = "os.system"
    assert "['meta']: unknown key(s) 'launcher'" in _error(CompiledMetadata, compiled)
    del kernel["meta"]["launcher"], kernel["meta"]["num_warps"]
    assert "['meta']: missing key(s) 'num_warps'" in _error(CompiledMetadata, compiled)
    assert "['format']: artifact format 2 is not the one this ember-runtime reads (1)" in \
           _error(CompiledMetadata, {**COMPILED.to_json(), "format": 2})
    bad_entry = {**COMPILED.graphs["forward"].kernels[0].to_json(), "entry": "f(); g"}
    assert "['entry']: expected an identifier" in _error(KernelEntry, bad_entry)
    aliased = {**ALIASED.to_json(), "kind": "sideways"}
    assert "['kind']: expected 'input' or 'output', got 'sideways'" in _error(AliasedOutput,
                                                                               aliased)
    partial = {"aliased_outputs": [], "differentiable_outputs": [], "saved_bytes": 1}
    assert "has 'saved_bytes' but not 'recomputed', 'save_everything'" in _error(AotMetadata,
                                                                                 partial)
    assert "metadata['fallbacks']: expected a JSON object, got list" in _error(
        CompileReport, {"fallbacks": ["aten::sort.default"]})
    assert "metadata['kernels']: expected an integer, got bool True" in _error(
        CompileReport, {"kernels": True})
    assert "metadata['memory']['forward']['peak_bytes']: expected an integer" in _error(
        CompileReport, {"memory": {"forward": {"peak_bytes": "1 GiB"}}})


def test_symbolic_sizes_in_aot_metadata_round_trip_and_are_checked() -> None:
    symbolic = AliasedOutput(1, "input", "x", False, ("s0", 4), (4, 1), "4*s0", ("4*s0", 1))
    meta = AotMetadata(aliased_outputs=(symbolic,),
                       partition=PartitionSummary("16*s0+8", (), False))
    assert AotMetadata.from_json(json.loads(json.dumps(meta.to_json()))) == meta
    crafted = {**symbolic.to_json(), "sizes": ["__import__('os')", 4]}
    assert "['sizes'][0]: size expression" in _error(AliasedOutput, crafted)
    assert "['storage_offset']: expected an integer or a size expression, got float" in \
        _error(AliasedOutput, {**symbolic.to_json(), "storage_offset": 1.5})


@pytest.mark.parametrize("name", ["__class__", "load", "float", "torch.float32", 7])
def test_dtype_names_decode_only_through_the_runtime_table(name: object) -> None:
    # getattr(torch, "float") is torch.float32 and getattr(torch, "load") a function:
    # the launcher looked workspace dtypes up that way; now only canonical names decode
    split = {**SPLIT.to_json(), "workspace_dtypes": ["float32", name]}
    message = _error(TritonSplitMeta, split)
    assert "['workspace_dtypes'][1]" in message
    assert (f"unknown dtype {name!r}" in message) or "expected a string" in message
    spec = TritonKernelSpec("k", "", {}, {})
    with pytest.raises(MetadataError, match=r"meta\['split'\]\['workspace_dtypes'\]\[1\]"):
        split_from_entry(spec, split)
    with pytest.raises(MetadataError, match=r"\['arg_dtypes'\]\[0\]"):
        CppLaunchMeta.from_json({"arg_dtypes": [name]})


@pytest.mark.parametrize("device", ["__class__", "cuda:x", "cpu; rm -rf /", "mps:0:1"])
def test_device_names_decode_only_through_the_runtime_table(device: str) -> None:
    entry = {**COMPILED.graphs["forward"].to_json(), "device": device}
    assert f"['device']: unknown device {device!r}" in _error(CompiledGraphEntry, entry)


def _artifact(marker: Path, compiled: dict[str, object]) -> Program:
    """A compiled program whose wrapper would create ``marker`` when executed."""
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3), name="x")
    program: Program = pb.finish(pb.call("aten::mul.Tensor", x, 2.0))
    program.dialect = "compiled"
    program.metadata.update({"compiled": compiled, "kernels": 0, "fallbacks": {}})
    program.files = {"forward/wrapper.py": (f"open({str(marker)!r}, 'w').close()\n"
                                            "def call(args):\n"
                                            "    return [args[0] * 2]\n").encode()}
    return program


def test_crafted_artifact_metadata_is_refused_before_its_code_runs(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    graph = {"wrapper": "forward/wrapper.py", "kernels": [], "constants": {}, "device": "cpu"}
    path = tmp_path / "a.ember"
    # a format this runtime does not know; a device outside the table; an unknown key
    for compiled, message in (
            ({"format": 2, "graphs": {"forward": graph}}, r"\['format'\]: artifact format 2"),
            ({"format": 1, "graphs": {"forward": {**graph, "device": "__class__"}}},
             r"\['device'\]: unknown device '__class__'"),
            ({"format": 1, "graphs": {"forward": {**graph, "hook": "x"}}},
             r"\['forward'\]: unknown key\(s\) 'hook'")):
        save(_artifact(marker, compiled), path)
        with pytest.raises(MetadataError, match=message) as e:
            load_artifact(path, trusted=True)
        assert f"(read from {str(path)!r})" in str(e.value)
        assert not marker.exists()
    with pytest.raises(MetadataError, match=rf"program {str(path)!r}: metadata\['compiled'\]"):
        load_artifact(path)  # untrusted: the program knows its file
    assert not marker.exists()
    # control: the well-formed artifact runs its wrapper
    save(_artifact(marker, {"format": 1, "graphs": {"forward": graph}}), path)
    (out,) = load_artifact(path, trusted=True)(torch.ones(3))
    assert torch.equal(out, torch.full((3,), 2.0)) and marker.exists()


def _aliasing_program() -> Program:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(6), name="x")
    program: Program = pb.finish(pb.call("aten::mul.Tensor", x, 2.0))
    program.signature.outputs["forward"] = [OutputSpec(OutputKind.ALIASED_OUTPUT, "x")]
    return program


def test_program_callable_reads_aliased_outputs_through_the_contract() -> None:
    program = _aliasing_program()
    view = AliasedOutput(0, "input", "x", False, (2, 3), (3, 1), 0, (1,))
    AotMetadata(aliased_outputs=(view,)).write_to(program)
    x = torch.arange(6.0)
    (out,) = ProgramCallable(program)([x])
    assert out.shape == (2, 3) and out.data_ptr() == x.data_ptr()
    # a kind the contract does not know was a crash at call time (outputs[None])
    program.metadata["aot"]["aliased_outputs"][0]["kind"] = "sideways"  # type: ignore[index]
    with pytest.raises(MetadataError, match=r"program: metadata\['aot'\]\['aliased_outputs'\]"
                                            r"\[0\]\['kind'\]: expected 'input' or 'output'"):
        ProgramCallable(program)
    program.metadata["aot"] = {"aliased_outputs": [], "differentiable_outputs": "0"}
    with pytest.raises(MetadataError, match=r"\['differentiable_outputs'\]: expected a JSON "
                                            "array"):
        ProgramCallable(program)


def test_program_callable_reads_input_aliases_through_the_contract() -> None:
    program = _aliasing_program()
    program.signature.outputs["forward"] = [OutputSpec()]
    program.metadata["input_aliases"] = {"x": {"base": "x", "sizes": [6], "strides": [1]}}
    with pytest.raises(MetadataError, match=r"metadata\['input_aliases'\]\['x'\]: missing "
                                            r"key\(s\) 'storage_offset'"):
        ProgramCallable(program)
    program.metadata["input_aliases"] = ["x"]
    with pytest.raises(MetadataError, match=r"metadata\['input_aliases'\]: expected a JSON "
                                            "object"):
        ProgramCallable(program)


def test_an_aliased_output_of_the_base_dtype_writes_no_dtype() -> None:
    # so that the entries earlier runtimes read are written as before
    assert "dtype" not in ALIASED.to_json()
    with pytest.raises(MetadataError, match="not a dtype name"):
        AliasedOutput.from_json({**ALIASED.to_json(), "dtype": "float99"})
