"""What each stage writes in ``Program.metadata`` is exactly the keys of the typed stage
contracts (``ember.runtime.ir.contracts.METADATA_KEYS``), and every value decodes through
its dataclass and encodes back to the same JSON (issue 13, item 3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from ember.aot.config import AotConfig
from ember.aot.pipeline import aot_compile
from ember.inductor.compile import compile_program
from ember.runtime.compiled import load_artifact
from ember.runtime.ir import InputSpec, Program, save
from ember.runtime.ir.contracts import (
    METADATA_KEYS,
    AotMetadata,
    CompiledMetadata,
    CompileReport,
    InputAliases,
)
from ember.runtime.tracing import GraphRecorder


def _record(fn: Any, inputs: list[torch.Tensor]) -> Program:
    rec = GraphRecorder()
    fakes = [rec.add_input(t, InputSpec(f"in{i}")) for i, t in enumerate(inputs)]
    with rec:
        out = fn(*fakes)
    return rec.finish(list(out))


def _check_contracts(program: Program, keys: set[str]) -> None:
    """``program`` carries exactly ``keys``, each decoding and re-encoding unchanged."""
    assert set(program.metadata) == keys
    assert keys <= set(METADATA_KEYS)
    for key in keys:
        kind = METADATA_KEYS[key]
        if kind is CompileReport:
            assert CompileReport.from_program(program).to_json()[key] == program.metadata[key]
        else:
            assert kind.from_json(program.metadata[key]).to_json() == program.metadata[key]


def _inference(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    b.mul_(2)  # b is a view of a: the write reaches a
    return a.view(-1), torch.median(a), (a + 1).sin()


def test_inference_stages_write_their_contracts(tmp_path: Path) -> None:
    base = torch.randn(4, 3)
    aten = _record(_inference, [base, base[1:]])
    _check_contracts(aten, {"input_aliases"})
    assert InputAliases.from_program(aten).by_input["in1"].base == "in0"

    functional = aot_compile(aten, AotConfig(training=False))
    _check_contracts(functional, {"input_aliases", "aot"})
    aot = AotMetadata.from_program(functional)
    assert aot is not None and aot.partition is None
    assert aot.extern_ops == ("aten::median.default",)
    assert [(a.output, a.kind, a.base) for a in aot.aliased_outputs] == [(0, "input", "in0")]

    compiled = compile_program(functional, {"strict": True})
    _check_contracts(compiled, {"input_aliases", "aot", "compiled", "kernels", "fallbacks",
                                "memory"})
    report = CompileReport.from_program(compiled)
    assert report.memory is not None and report.memory["forward"]["peak_bytes"] > 0
    assert report.fallbacks is not None and report.fallbacks["aten::median.default"] == 1
    assert report.kernels
    entry = CompiledMetadata.from_program(compiled).graphs["forward"]
    assert entry.device == torch.device("cpu") and len(entry.kernels) == report.kernels

    save(compiled, tmp_path / "inference.ember")
    fn = load_artifact(tmp_path / "inference.ember", trusted=True)
    x = torch.randn(4, 3)
    expected_base = x.clone()
    expected = _inference(expected_base, expected_base[1:])
    got = fn(x, x[1:])
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e)
    torch.testing.assert_close(x, expected_base)
    assert got[0].data_ptr() == x.data_ptr()  # rebuilt as a view of the input


def test_training_stages_write_the_partition() -> None:
    x, w = torch.randn(5, 4), torch.randn(4, 3, requires_grad=True)
    aten = _record(lambda x, w: ((x @ w).relu().sum(),), [x, w])
    _check_contracts(aten, set())
    training = aot_compile(aten, AotConfig(training=True))
    _check_contracts(training, {"aot"})
    aot = AotMetadata.from_program(training)
    assert aot is not None and aot.differentiable_outputs == (0,)
    assert aot.partition is not None and aot.partition.saved_bytes > 0
    compiled = compile_program(training, {"strict": True})
    _check_contracts(compiled, {"aot", "compiled", "kernels", "fallbacks", "memory"})
    assert set(CompiledMetadata.from_program(compiled).graphs) == {"forward", "backward"}
    assert set(CompileReport.from_program(compiled).memory or {}) == {"forward", "backward"}
