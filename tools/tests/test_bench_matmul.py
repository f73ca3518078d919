"""The matmul suite (issue #16): workloads, a CPU run's table, the accuracy check, the
``n/a (mode not implemented)`` cell, speeds and targets, the warm-autotune subprocess."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import bench
import bench_matmul
import pytest
import torch
from benchlib import compilers, matmul, matmul_report, matmul_runner, matmul_warm
from benchlib.matmul_runner import MatmulConfig, MatmulRow

CPU = torch.device("cpu")
GEMM = matmul.workloads("test", ["gemm"])[0]


def _config(*variants: str) -> MatmulConfig:
    return MatmulConfig(CPU, torch.float32, variants, time_limit_s=300, warm=False)


def test_full_scale_is_the_issue_s_workloads() -> None:
    names = [w.name for w in matmul.workloads("full")]
    assert names == [
        "gemm 1024x1024x1024", "gemm 2048x2048x2048", "gemm 4096x4096x4096",
        "gemm 8192x8192x8192", "gemm_bias_gelu 4096x4096x4096", "gemm_bias_gelu 8192x3072x768",
        "mlp 8192x768", "mlp 8192x1024", "attention 8x16x1024x64",
        "attention_causal 8x16x1024x64",
    ]
    meta = torch.device("meta")
    for work in matmul.workloads("full"):
        module, inputs = work.make(meta, torch.bfloat16)
        assert module(*inputs).dtype == torch.bfloat16
    mlp = matmul.workloads("full", ["mlp"])[0]
    module, (x,) = mlp.make(meta, torch.bfloat16)
    assert x.shape == (8192, 768) and module.fc1.weight.shape == (3072, 768)
    assert mlp.flops == 16.0 * 8192 * 768 * 768
    with pytest.raises(KeyError, match="no matmul family 'conv'"):
        matmul.workloads("full", ["conv"])
    picked = matmul.workloads("test", ["mlp:64x16", "gemm"])
    assert [w.name for w in picked] == ["mlp 64x16", "gemm 32x32x32"]
    for bad in ("gemm:4x4", "gemm:4x4xk", "mlp:0x8"):
        with pytest.raises(ValueError, match=f"'{bad}': expected {bad.split(':')[0]}:"):
            matmul.workloads("test", [bad])


def test_cpu_run_prints_the_table_and_writes_json_and_markdown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_json, out_md = tmp_path / "m.json", tmp_path / "m.md"
    assert bench.main(["--suite", "matmul", "--device", "cpu", "--scale", "test",
                       "--families", "gemm", "--compilers", "ember,torch,eager", "--no-warm",
                       "--json", str(out_json), "--markdown", str(out_md)]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("workload"))
    assert [c.strip() for c in lines[header].split("  ") if c.strip()] == [
        "workload", "dtype", "compiler", "time", "TFLOP/s", "vs eager", "vs torch",
        "compile", "warm autotune", "accuracy", "kernels"]
    body = [line.split() for line in lines[header + 2:header + 5]]
    assert [row[0:3] for row in body[:1]] == [["gemm", "32x32x32", "float32"]]
    assert [body[0][3], body[1][0], body[2][0]] == ["eager", "torch", "ember"]
    assert all(row[-2] == "pass" for row in body[1:])
    assert "gemm 32x32x32  float32  ember  template GEMM >= 90% of cuBLAS (eager)" in text
    payload = json.loads(out_json.read_text())
    assert [r["variant"] for r in payload["rows"]] == ["eager", "torch", "ember"]
    assert all(r["status"] == "ok" and r["time_ms"] > 0 for r in payload["rows"])
    assert payload["rows"][0]["compile_s"] is None and payload["rows"][2]["compile_s"] > 0
    assert [t["ember"] for t in payload["targets"]] == ["ember"]
    assert payload["meta"]["scale"] == "test"
    markdown = out_md.read_text()
    assert ("| workload | dtype | compiler | time | TFLOP/s | vs eager | vs torch | compile "
            "| warm autotune | accuracy | kernels |") in markdown
    assert "| gemm 32x32x32 | float32 | ember | template GEMM >= 90% of cuBLAS (eager) |" \
        in markdown


def test_a_wrong_compiler_fails_the_accuracy_check(monkeypatch: pytest.MonkeyPatch) -> None:
    real = compilers.compile_fn

    def off_by_a_bit(compiler: str, fn: Any, *args: Any) -> Any:
        if compiler == "ember":
            return lambda *xs: fn(*xs) + 0.01
        return real(compiler, fn, *args)

    monkeypatch.setattr(compilers, "compile_fn", off_by_a_bit)
    rows = matmul_runner.bench_workload(GEMM, _config("eager", "ember"))
    assert [r.status for r in rows] == ["ok", "fail_accuracy"]
    assert rows[1].time_ms is not None and "rmse vs fp64" in rows[1].accuracy_detail
    text = matmul_report.table(rows)
    assert text.splitlines()[3].split()[-2] == "fail_accuracy"
    assert "gemm 32x32x32 float32 / ember: result 0: rmse vs fp64" in text
    (target,) = matmul_report.targets(rows)
    assert target.verdict == "NOT met (wrong result)"


def test_a_mode_ember_does_not_implement_is_a_cell_not_a_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ember.runtime import pipeline

    monkeypatch.setattr(pipeline, "IMPLEMENTED_FEATURES", set())
    rows = matmul_runner.bench_workload(GEMM, _config("eager", "ember-max-autotune"))
    assert [r.status for r in rows] == ["ok", matmul_runner.NOT_IMPLEMENTED]
    assert rows[1].error.startswith("NotImplementedError: mode='max-autotune-no-cudagraphs'")
    text = matmul_report.table(rows)
    assert text.splitlines()[3].split(None, 1) == [
        "ember-max-autotune", "n/a (mode not implemented)"]
    assert "notes:" not in text
    (target,) = matmul_report.targets(rows)
    assert (target.speed, target.verdict) == (None, "n/a (mode not implemented)")

    def unsupported_op(compiler: str, fn: Any, *args: Any) -> Any:
        raise NotImplementedError("no lowering for aten::frobnicate")

    monkeypatch.setattr(compilers, "compile_fn", unsupported_op)
    (row,) = matmul_runner.bench_workload(GEMM, _config("ember-max-autotune"))
    assert (row.status, row.error) == (
        "fail_to_run", "compile: NotImplementedError: no lowering for aten::frobnicate")


def _row(workload: str, variant: str, ms: float | None, status: str = "ok") -> MatmulRow:
    family = workload.split()[0]
    return MatmulRow(workload, family, "bfloat16", variant, status=status, time_ms=ms,
                     accuracy="pass" if ms else None, error="" if ms else "boom")


def test_speeds_and_targets() -> None:
    rows = [
        _row("gemm 8192x8192x8192", "eager", 1.0),
        _row("gemm 8192x8192x8192", "ember", 1.25),
        _row("gemm 8192x8192x8192", "ember-max-autotune", 1.0),
        _row("mlp 8192x768", "torch", 2.2),
        _row("mlp 8192x768", "torch-max-autotune", 1.9),
        _row("mlp 8192x768", "ember", 2.0),
        _row("mlp 8192x768", "ember-max-autotune", None, "fail_to_run"),
    ]
    assert matmul_report.speed(rows, rows[1], "eager") == pytest.approx(0.8)
    assert matmul_report.speed(rows, rows[0], "eager") is None
    results = matmul_report.targets(rows)
    assert matmul_report.target_table(results, markdown=True).splitlines() == [
        "| workload | dtype | ember | target | speed | verdict |",
        "|---|---|---|---|---|---|",
        ("| gemm 8192x8192x8192 | bfloat16 | ember | template GEMM >= 90% of cuBLAS (eager) "
         "| 0.80x | NOT met |"),
        ("| gemm 8192x8192x8192 | bfloat16 | ember-max-autotune | template GEMM >= 90% of "
         "cuBLAS (eager) | 1.00x | met |"),
        "| mlp 8192x768 | bfloat16 | ember | >= 1.1x torch.compile default | 1.10x | met |",
        ("| mlp 8192x768 | bfloat16 | ember | within 5% of torch.compile max-autotune "
         "| 0.95x | met |"),
        ("| mlp 8192x768 | bfloat16 | ember-max-autotune | >= 1.1x torch.compile default "
         "| - | not measured (ember-max-autotune FAILED) |"),
        ("| mlp 8192x768 | bfloat16 | ember-max-autotune | within 5% of torch.compile "
         "max-autotune | - | not measured (ember-max-autotune FAILED) |"),
        "",
        "3 of 6 targets met (2 not measured)",
    ]
    lines = matmul_report.table(rows).splitlines()
    assert lines[0].split("  ")[0:1] == ["workload"] and "vs torch-max-autotune" in lines[0]
    assert lines[4].split() == ["ember-max-autotune", "1.00ms", "-", "1.00x", "-", "-", "-",
                                "-", "pass", "-"]
    assert lines[-1] == "  mlp 8192x768 bfloat16 / ember-max-autotune: boom"
    assert matmul_report.target_table(matmul_report.targets(rows[3:5])) == (
        "no target measured: the run has no Ember variant beside a target's baseline")


def test_bench_forwards_only_the_matmul_suite() -> None:
    assert bench._matmul_suite_argv(["--device", "cpu", "--suite", "matmul", "--no-warm"]) == [
        "--device", "cpu", "--no-warm"]
    assert bench._matmul_suite_argv(["--suite=matmul"]) == []
    assert bench._matmul_suite_argv(["--suite", "quick"]) is None
    args = bench_matmul.parse_args(["--device", "cpu", "--compilers", "ember,eager"])
    assert args.variant_list == ("eager", "ember") and args.scale == "quick"
    assert args.torch_dtype == torch.float32
    with pytest.raises(SystemExit):
        bench_matmul.parse_args(["--device", "cpu", "--compilers", "ember-fast"])


def test_warm_autotune_runs_in_a_fresh_process_with_the_run_s_autotune_cache(
    tmp_path: Path,
) -> None:
    run = matmul_warm.CacheDirs.under(tmp_path / "run")
    (run.ember / matmul_warm.EMBER_AUTOTUNE_FOLDER).mkdir(mode=0o700)
    job = matmul_warm.WarmJob("gemm", [8, 8, 8], "eager", None, "cpu", "float32")
    measured = matmul_warm.measure(job, run, timeout_s=120)
    assert isinstance(measured, float) and measured > 0
    # The worker's failure report (run in this process: one subprocess is enough).
    bad = matmul_warm.WarmJob("conv", [8], "eager", None, "cpu", "float32")
    assert matmul_warm._worker(bad) == {
        "error": "KeyError: \"no matmul family 'conv'; known: gemm, gemm_bias_gelu, mlp, "
                 "attention, attention_causal\""}


def test_using_caches_moves_only_the_cache_directories_and_puts_them_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from ember.runtime.config import config, patch

    monkeypatch.setenv("TRITON_CACHE_DIR", "/somewhere/triton")
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    before = config.cache_dir
    dirs = matmul_warm.CacheDirs.under(tmp_path)
    with patch(recompile_limit=3):
        with matmul_warm.using_caches(dirs):
            assert config.cache_dir == dirs.ember and config.recompile_limit == 3
            assert os.environ["TRITON_CACHE_DIR"] == str(dirs.triton)
            assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(dirs.inductor)
        assert config.cache_dir == before and config.recompile_limit == 3
    assert os.environ["TRITON_CACHE_DIR"] == "/somewhere/triton"
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_cuda_run_of_every_variant_with_warm_autotune_times(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "m.json"
    assert bench_matmul.main(["--device", "cuda", "--scale", "test", "--families",
                              "gemm,gemm_bias_gelu", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["workload"], r["variant"]) for r in rows[:5]] == [
        ("gemm 32x32x32", v.name) for v in matmul_runner.VARIANTS]
    assert all(r["dtype"] == "bfloat16" and r["status"] == "ok" and r["time_ms"] > 0
               for r in rows), capsys.readouterr().out
    autotuned = [r for r in rows if "max-autotune" in r["variant"]]
    assert all(r["warm_autotune_s"] and r["warm_autotune_s"] > 0 for r in autotuned), \
        [r["error"] for r in autotuned]
