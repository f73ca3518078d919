"""``bench.py --dynamic`` and ``--sizes``: dynamic rows beside static ones, their ratios,
the batch-size sweep and its compile counts (compilers faked: fast and independent of
what the compilers can do today)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import bench
import pytest
import torch
from benchlib import coldstart, compilers, report, runner, sweep

CPU = torch.device("cpu")


class ShapeCountingCompiler:
    """A fake compiled callable: runs the module, reports ``stats.compiles`` as a
    compiler that recompiles per input shape (static) or once (dynamic) would."""

    def __init__(self, fn: Any, dynamic: bool | None) -> None:
        self.fn = fn
        self.dynamic = dynamic
        self.shapes: set[tuple[int, ...]] = set()
        self.stats = self

    @property
    def compiles(self) -> int:
        return min(len(self.shapes), 1) if self.dynamic else len(self.shapes)

    def __call__(self, *args: Any) -> Any:
        self.shapes.add(tuple(args[0].shape))
        return self.fn(*args)


def _fake_compile_fn(seen: list[tuple[str, bool | None]]) -> Any:
    def compile_fn(compiler: str, fn: Any, ember_backend: str = "inductor",
                   mode: str | None = None, ember_options: Any = None,
                   dynamic: bool | None = None) -> Any:
        seen.append((compiler, dynamic))
        return ShapeCountingCompiler(fn, dynamic)

    return compile_fn


def test_labels_and_variants() -> None:
    assert compilers.label("torch", "inductor", dynamic=True) == "torch[dynamic]"
    assert compilers.label("ember", "aot_eager", dynamic=True) == "ember[aot_eager,dynamic]"
    assert compilers.label("ember", "inductor") == "ember[inductor]"
    assert compilers.label("eager", "inductor") == "eager"
    assert runner.variants(["eager", "torch", "ember"], dynamic=True) == [
        ("eager", False), ("torch", False), ("torch", True), ("ember", False), ("ember", True)]
    assert runner.variants(["eager", "ember"], dynamic=False) == [
        ("eager", False), ("ember", False)]


def test_dynamic_rows_compile_with_dynamic_true_and_report_their_ratio(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[str, bool | None]] = []
    monkeypatch.setattr(compilers, "compile_fn", _fake_compile_fn(seen))
    config = runner.BenchConfig(CPU, torch.float32, "test", cold=False, dynamic=True)
    rows = runner.bench_model("mlp", config, ["eager", "ember"])
    # the static variant keeps the compiler's default (None), as without --dynamic
    assert seen == [("eager", None), ("ember", None), ("ember", True)]
    assert [(r.compiler, r.dynamic, r.status) for r in rows] == [
        ("eager", False, "ok"), ("ember[inductor]", False, "ok"),
        ("ember[inductor,dynamic]", True, "ok")]
    static, dynamic = rows[1], rows[2]
    assert static.dynamic_ratio is None and static.time_ms and dynamic.time_ms
    assert dynamic.dynamic_ratio == pytest.approx(dynamic.time_ms / static.time_ms)
    text = report.dynamic_table(rows)
    header, _, line, summary = text.splitlines()
    assert header.split() == ["model", "dtype", "compiler", "static", "dynamic",
                              "dynamic/static", "target"]
    assert line.split()[:3] == ["mlp", "float32", "ember[inductor,dynamic]"]
    assert line.split()[5] == f"{dynamic.dynamic_ratio:.2f}x"
    met = dynamic.dynamic_ratio is not None and dynamic.dynamic_ratio <= report.DYNAMIC_TARGET
    assert summary == (f"{int(met)} of 1 dynamic compiles within 10% of the static compile "
                       "(0 not measured)")


def test_a_failed_dynamic_compile_is_a_row_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    real = _fake_compile_fn([])

    def no_dynamic(compiler: str, fn: Any, *args: Any) -> Any:
        if args[-1]:
            raise NotImplementedError("dynamic=True: not yet\nmore")
        return real(compiler, fn, *args)

    monkeypatch.setattr(compilers, "compile_fn", no_dynamic)
    config = runner.BenchConfig(CPU, torch.float32, "test", cold=False, dynamic=True)
    rows = runner.bench_model("rms_norm", config, ["ember"])
    assert [(r.compiler, r.status) for r in rows] == [
        ("ember[inductor]", "ok"), ("ember[inductor,dynamic]", "fail_to_run")]
    assert rows[1].error == "compile: NotImplementedError: dynamic=True: not yet"
    lines = report.dynamic_table(rows).splitlines()
    assert lines[2].split()[-2:] == ["FAILED", "(compile)"]
    assert lines[3] == "0 of 1 dynamic compiles within 10% of the static compile (1 not measured)"


def test_resize_batch_repeats_the_example_along_dim_0() -> None:
    tokens = torch.tensor([[1, 2], [3, 4]])
    (three, scalar, flag) = sweep.resize_batch((tokens, torch.tensor(5.0), True), 3)
    assert three.tolist() == [[1, 2], [3, 4], [1, 2]]
    assert scalar.item() == 5.0 and flag is True
    (one,) = sweep.resize_batch((tokens,), 1)
    assert one.tolist() == [[1, 2]]
    with pytest.raises(ValueError, match="batch size 0"):
        sweep.resize_batch((tokens,), 0)


def test_size_sweep_times_every_size_and_counts_compiles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(compilers, "compile_fn", _fake_compile_fn([]))
    config = runner.BenchConfig(CPU, torch.float32, "test", cold=False, dynamic=True,
                                sizes=(1, 5, 8))
    rows = runner.bench_model("mlp", config, ["eager", "ember"])
    eager, static, dynamic = rows
    assert sorted(static.sweep_ms) == [1, 5, 8]
    assert all(isinstance(v, float) and v > 0 for v in dynamic.sweep_ms.values())
    # the example batch (8) compiled before the sweep: 1 and 5 are new shapes
    assert (eager.sweep_compiles, static.sweep_compiles, dynamic.sweep_compiles) == (None, 2, 0)
    header, _, *lines = report.sweep_table(rows).splitlines()
    assert header.split() == ["model", "dtype", "compiler", "batch", "1", "batch", "5",
                              "batch", "8", "compiles"]
    assert [line.split()[2] for line in lines] == [
        "eager", "ember[inductor]", "ember[inductor,dynamic]"]
    assert [line.split()[-1] for line in lines] == ["-", "2", "0"]


def test_a_size_that_fails_is_recorded_for_that_size(monkeypatch: pytest.MonkeyPatch) -> None:
    def batch_of_five_fails(compiler: str, fn: Any, *args: Any) -> Any:
        def compiled(x: torch.Tensor) -> Any:
            if x.shape[0] == 5:
                raise RuntimeError("size 5 is not supported")
            return fn(x)

        return compiled

    monkeypatch.setattr(compilers, "compile_fn", batch_of_five_fails)
    config = runner.BenchConfig(CPU, torch.float32, "test", cold=False, sizes=(5, 2))
    (row,) = runner.bench_model("mlp", config, ["ember"])
    assert row.status == "ok" and row.sweep_ms[5] == "RuntimeError: size 5 is not supported"
    assert isinstance(row.sweep_ms[2], float)
    table = report.sweep_table([row])
    assert "FAILED" in table
    assert "mlp float32 / ember[inductor] at batch 5: RuntimeError: size 5" in table


def test_command_line_dynamic_and_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    args = bench.parse_args(["--dynamic", "--sizes", "1, 8,32"])
    assert args.dynamic and args.size_list == (1, 8, 32)
    assert bench.parse_args([]).size_list == () and not bench.parse_args([]).dynamic
    for bad in ("1,x", "0,4"):
        with pytest.raises(SystemExit):
            bench.parse_args(["--sizes", bad])
    assert "batch sizes must be at least 1" in capsys.readouterr().err


def test_markdown_has_the_dynamic_and_sweep_sections(tmp_path: Any) -> None:
    rows = [runner.Row("mlp", "float32", "torch", time_ms=2.0, sweep_ms={1: 1.5, 4: 2.5},
                       sweep_compiles=2),
            runner.Row("mlp", "float32", "torch[dynamic]", time_ms=2.1, dynamic=True,
                       dynamic_ratio=1.05, sweep_ms={1: 1.6, 4: 2.4}, sweep_compiles=0)]
    out = tmp_path / "t.md"
    report.write_markdown(out, {"suite": "quick"}, rows, {})
    text = out.read_text()
    assert "| mlp | float32 | torch[dynamic] | 2.00ms | 2.10ms | 1.05x | met |" in text
    assert "1 of 1 dynamic compiles within 10% of the static compile" in text
    assert "| mlp | float32 | torch | 1.50ms | 2.50ms | 2 |" in text
    assert "| mlp | float32 | torch[dynamic] | 1.60ms | 2.40ms | 0 |" in text


def test_cold_compile_of_a_dynamic_row_compiles_with_dynamic_true(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[str, bool | None]] = []
    monkeypatch.setattr(compilers, "compile_fn", _fake_compile_fn(seen))
    job = coldstart.ColdJob("mlp", "ember", "inductor", "cpu", "float32", "test", False,
                            dynamic=True)
    assert coldstart.ColdJob(**json.loads(json.dumps(dataclasses.asdict(job)))) == job
    assert coldstart._first_call_seconds(job)[0] > 0
    static = dataclasses.replace(job, dynamic=False)
    assert coldstart._first_call_seconds(static)[0] > 0
    # each job runs the model eagerly once before its timer (coldstart's docstring)
    assert [s for s in seen if s[0] != "eager"] == [("ember", True), ("ember", None)]
