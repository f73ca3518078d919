"""Benchmark rows, failure isolation, the report and the command line."""

from __future__ import annotations

import json
from pathlib import Path

import bench
import pytest
import torch
from benchlib import accuracy_table, coldstart, compilers, report, runner

CPU = torch.device("cpu")


def _config(train: bool = False) -> runner.BenchConfig:
    return runner.BenchConfig(CPU, torch.float32, "test", train=train, cold=False)


def test_eager_row_is_the_baseline() -> None:
    (row,) = runner.bench_model("mlp", _config(), ["eager"])
    assert row.status == "ok" and row.accuracy == "pass"
    assert row.speedup == pytest.approx(1.0) and row.time_ms and row.time_ms > 0
    assert row.compile_s is None and row.peak_memory_mb is None


def test_a_failing_compiler_is_recorded_and_the_run_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = compilers.compile_fn

    def broken(compiler, fn, *args):  # type: ignore[no-untyped-def]
        if compiler == "ember":
            raise RuntimeError("boom\nsecond line")
        return real(compiler, fn, *args)

    monkeypatch.setattr(compilers, "compile_fn", broken)
    rows = runner.bench_model("pointwise", _config(), ["eager", "ember"])
    assert [r.status for r in rows] == ["ok", "fail_to_run"]
    assert rows[1].error == "compile: RuntimeError: boom"
    assert rows[1].compiler == "ember[inductor]"
    text = report.table(rows)
    assert "FAILED" in text
    assert "pointwise float32 / ember[inductor]: compile: RuntimeError: boom" in text


def test_a_wrong_compiler_fails_accuracy_but_is_still_timed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def off_by_one(compiler, fn, *args):  # type: ignore[no-untyped-def]
        return lambda *args: fn(*args) + 1.0

    monkeypatch.setattr(compilers, "compile_fn", off_by_one)
    (row,) = runner.bench_model("rms_norm", _config(), ["ember"])
    assert row.status == "fail_accuracy" and row.accuracy == "fail_accuracy"
    assert row.time_ms is not None and "rmse vs fp64" in row.accuracy_detail


def test_training_rows_step_the_optimizer() -> None:
    (row,) = runner.bench_model("mlp", _config(train=True), ["eager"])
    assert row.status == "ok" and row.accuracy == "pass"
    module, inputs = torch.nn.Linear(3, 3), (torch.randn(2, 3),)
    before = module.weight.detach().clone()
    step = runner.Step(module, module, inputs, train=True)
    step()
    assert not torch.equal(before, module.weight)


def test_parameter_free_models_train_on_input_gradients() -> None:
    (row,) = runner.bench_model("pointwise", _config(train=True), ["eager"])
    assert row.status == "ok"


def test_cold_compile_runs_in_a_fresh_process() -> None:
    job = coldstart.ColdJob("pointwise", "eager", "eager", "cpu", "float32", "test", False)
    result = coldstart.measure(job)
    assert set(result) == {"cold_s", "warm_s", "warm_cpu_s", "run_s", "cold_phases"}
    assert 0 < float(result["cold_s"]) < 60  # type: ignore[arg-type]
    broken = coldstart.ColdJob("pointwise", "nope", "eager", "cpu", "float32", "test", False)
    assert "ValueError: unknown compiler 'nope'" in str(coldstart.measure(broken)["error"])


def test_json_is_strict_and_complete(tmp_path: Path) -> None:
    rows = [runner.Row("m", "float32", "torch", time_ms=1.0, rmse_ratio=float("inf"))]
    out = tmp_path / "r.json"
    report.write_json(out, {"suite": "test"}, rows, {"torch": 12.5})
    data = json.loads(out.read_text())  # strict: inf written as a string
    assert data["rows"][0]["rmse_ratio"] == "inf"
    assert data["overhead_us"] == {"torch": 12.5} and data["meta"]["suite"] == "test"
    assert "| m | float32 | torch | 1.00ms |" in report.markdown_table(rows)


def test_command_line_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    status = bench.main(["--device", "cpu", "--suite", "test", "--models", "rms_norm",
                         "--compilers", "eager", "--no-cold", "--json", str(out)])
    assert status == 0
    printed = capsys.readouterr().out
    assert "rms_norm" in printed and "per-call overhead" in printed
    data = json.loads(out.read_text())
    assert [r["compiler"] for r in data["rows"]] == ["eager"]
    assert data["meta"]["mode"] == "inference" and data["meta"]["torch"] == torch.__version__
    assert isinstance(data["overhead_us"]["eager"], float)


def test_command_line_rejects_unknown_names() -> None:
    with pytest.raises(SystemExit):
        bench.parse_args(["--models", "nope"])
    with pytest.raises(SystemExit):
        bench.parse_args(["--compilers", "eager,jax"])
    args = bench.parse_args(["--compilers", "ember,eager", "--dtype", "float32,bfloat16",
                             "--mode", "reduce-overhead", "--ember-option", "capture=strict"])
    assert args.compiler_list == ["eager", "ember"] and args.mode == "reduce-overhead"
    assert args.ember_options == {"capture": "strict"}
    with pytest.raises(SystemExit):
        bench.parse_args(["--ember-option", "capture"])
    args = bench.parse_args(["--ember-option", "precompile_triton=true", "--ember-option",
                             "emulate_precision_casts=False", "--ember-option", "n=3"])
    assert args.ember_options == {"precompile_triton": True,
                                  "emulate_precision_casts": False, "n": 3}
    args = bench.parse_args(["--compilers", "ember,eager", "--dtype", "float32,bfloat16"])
    assert args.dtype_list == [torch.float32, torch.bfloat16]


def test_accuracy_table_round_trip_and_messages(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    rows = [accuracy_table.Outcome("mlp", "inductor", "fail_to_run"),
            accuracy_table.Outcome("mlp", "eager", "pass", "0")]
    accuracy_table.write(rows, path)
    assert path.read_text().splitlines() == [
        "model,backend,result,graph_breaks", "mlp,eager,pass,0", "mlp,inductor,fail_to_run,"]
    table = accuracy_table.read(path)
    assert table[("mlp", "eager")].same_as(rows[1])
    better = accuracy_table.Outcome("mlp", "inductor", "pass", "0")
    message = accuracy_table.mismatch_message(table[("mlp", "inductor")], better, path)
    assert "improved" in message and "'mlp,inductor,pass,0'" in message
    worse = accuracy_table.Outcome("mlp", "eager", "fail_accuracy", "0", "result 0: ...")
    assert "regressed" in accuracy_table.mismatch_message(table[("mlp", "eager")], worse, path)
    path.write_text("model,backend,result,graph_breaks\nmlp,eager,great,0\n")
    with pytest.raises(ValueError, match="not in"):
        accuracy_table.read(path)


def test_markdown_section_names_command_versions_and_overhead(tmp_path: Path) -> None:
    rows = [runner.Row("mlp", "float32", "eager", time_ms=2.0, speedup=1.0, accuracy="pass")]
    meta = report.environment(CPU)
    meta.update(suite="quick", mode="inference", wall_s="5")
    out = tmp_path / "t.md"
    report.write_markdown(out, meta, rows, {"eager": 3.0, "torch": "RuntimeError: x"})
    text = out.read_text()
    assert f"torch {torch.__version__}" in text and "suite quick, inference" in text
    assert "| mlp | float32 | eager | 2.00ms | 1.00x |" in text
    assert "- eager: 3.0 us" in text and "- torch: FAILED RuntimeError: x" in text


def test_a_hanging_compile_is_cut_off_and_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    import time as time_module

    def hangs(compiler, fn, *args):  # type: ignore[no-untyped-def]
        def compiled(*args):  # type: ignore[no-untyped-def]
            while True:
                time_module.sleep(0.01)

        return compiled

    monkeypatch.setattr(compilers, "compile_fn", hangs)
    config = runner.BenchConfig(CPU, torch.float32, "test", cold=False, time_limit_s=0.3)
    (row,) = runner.bench_model("rms_norm", config, ["ember"])
    assert row.status == "fail_to_run"
    assert row.error == ("compile: PhaseTimeout: compiling rms_norm with ember[inductor] "
                         "took longer than 0.3 s")


def test_cuda_without_a_gpu_is_refused_clearly(capsys: pytest.CaptureFixture[str]) -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(SystemExit):
        bench.parse_args(["--device", "cuda", "--suite", "full"])
    assert "no CUDA device is available" in capsys.readouterr().err
