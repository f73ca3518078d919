"""Autotuning the block sizes of Triton kernels (max-autotune): the candidate sets, every
candidate computing what the heuristic's configuration computes (Triton's interpreter)
and compiling for sm_90, the hook in code generation, and whole programs compiled with
``mode="max-autotune-no-cudagraphs"`` (warm cache: nothing timed again; symbolic sizes;
torch's random state untouched; the frontend end to end)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from ember.inductor.autotune import Candidate, autotuning
from ember.inductor.codegen.triton import block_tuning, heuristics
from ember.inductor.codegen.triton.block_tuning import kernel_arguments, load_code
from ember.inductor.codegen.triton.generate import generate_triton_kernel, launch_config
from ember.inductor.codegen.triton.heuristics import (
    LaunchConfig,
    candidate_configs,
    choose_config,
    config_name,
    forced_config,
)
from ember.inductor.codegen.triton.sizes import SizeFacts
from ember.inductor.codegen.triton.testing import triton_for_cpu
from ember.inductor.compile import compile_graph, compile_program
from ember.inductor.loop_ir import Kernel
from ember.runtime.compiled import load_executor
from ember.runtime.config import patch
from ember.runtime.ir import Program, parse_program

sys.path.insert(0, str(Path(__file__).parent))

from helpers import trace

pytest.importorskip("triton")

MODE = "max-autotune-no-cudagraphs"


MIN_TUNED_ELEMENTS = heuristics.MIN_TUNED_ELEMENTS


@pytest.fixture(autouse=True)
def cache_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty cache; the tiny kernels of these tests tuned like large ones."""
    monkeypatch.setattr(heuristics, "MIN_TUNED_ELEMENTS", 0)
    with patch(cache_dir=tmp_path / "cache", cache_enabled=True):
        yield tmp_path / "cache"


def test_small_kernels_keep_the_heuristic(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heuristics, "MIN_TUNED_ELEMENTS", MIN_TUNED_ELEMENTS)
    assert MIN_TUNED_ELEMENTS == 65536
    for numel, rnumel in [(65535, 0), (255, 257), (1, 65535)]:
        default = choose_config(numel, rnumel)
        assert candidate_configs(default, numel, rnumel) == [default]
    for numel, rnumel in [(65536, 0), (256, 256), (1, 65536)]:
        default = choose_config(numel, rnumel)
        assert len(candidate_configs(default, numel, rnumel)) > 1


@pytest.mark.parametrize(("numel", "rnumel", "columns", "names"), [
    (600, 0, False, ["x1024_w4", "x256_w2", "x512_w4", "x1024_w8"]),
    (100, 0, False, ["x128_w1"]),  # smaller than every candidate block: nothing to time
    (6, 40, False, ["x8_r64_w2_persistent", "x4_r64_w1_persistent", "x8_r64_w1_persistent",
                    "x8_r64_w4_persistent"]),
    (2, 2100, False, ["x1_r4096_w4_persistent", "x2_r4096_w16_persistent",
                      "x1_r4096_w2_persistent", "x1_r4096_w8_persistent",
                      "x1_r1024_w8_looped"]),
    (2, 5000, False, ["x1_r4096_w16_looped", "x1_r1024_w4_looped", "x1_r2048_w8_looped",
                      "x1_r4096_w8_looped", "x1_r8192_w16_looped"]),
    (1, 70000, False, ["x1_r4096_w16_looped_split5", "x1_r1024_w4_looped_split5",
                       "x1_r2048_w8_looped_split5", "x1_r4096_w8_looped_split5",
                       "x1_r8192_w16_looped_split5"]),
    (20, 300, True, ["x32_r64_w8_looped", "x32_r32_w4_looped", "x32_r128_w16_looped",
                     "x32_r64_w4_looped", "x32_r64_w16_looped"]),
    (20, 40, True, ["x32_r64_w8_persistent", "x16_r64_w4_persistent",
                    "x32_r64_w4_persistent", "x32_r64_w16_persistent"]),
])
def test_candidate_sets(numel: int, rnumel: int, columns: bool, names: list[str]) -> None:
    default = choose_config(numel, rnumel, columns=columns)
    assert [config_name(c) for c in candidate_configs(default, numel, rnumel)] == names


# Every candidate runs in Triton's interpreter, whose reductions cost per element of the
# block: the kernels are tiny and the heuristic's tables scaled down with them
# (``small_blocks``), so that each kernel class (persistent, wide, looped, split, column)
# arises at a few hundred elements. The writers take any power-of-two block, so what
# holds at RBLOCK 64 holds at 4096; test_every_candidate_compiles_for_sm90 compiles
# the real tables' candidates.
KERNELS: dict[str, tuple[Callable[..., Any], tuple[tuple[int, ...], ...]]] = {
    "pointwise": (lambda x, y: (x * y).sigmoid() + x, ((10, 30), (10, 30))),
    "softmax": (lambda x: torch.softmax(x, -1), ((6, 20),)),
    "wide_rows": (lambda x: x - x.mean(-1, keepdim=True), ((2, 50),)),
    "looped_var": (lambda x: x.var(-1), ((2, 300),)),
    "split_sum": (lambda x: x.sum(), ((2000,),)),
    "column_sum": (lambda x: x.sum(0), ((300, 20),)),
    "column_split": (lambda x: x.sum(0), ((1000, 20),)),
    "column_amax": (lambda x: x.amax(0), ((12, 20),)),
    "in_place_scatter": (lambda x, i, v: x.index_add(0, i, v), ((300,), (400,), (400,))),
}

SMALL_TABLES = {
    "POINTWISE_BLOCK": 128, "POINTWISE_CANDIDATES": ((32, 1), (64, 2), (128, 4)),
    "PERSISTENT_MAX": 64, "TILE": 128, "WIDE_ROW": 64, "LOOPED_RBLOCK": 64,
    "LOOPED_WARPS": 4, "LOOPED_CANDIDATES": ((16, 1), (32, 2), (128, 4)),
    "COLUMN_RBLOCK": 16, "COLUMN_MIN_ROWS": 256, "LOOPED_VARIANT_ROW": 32,
}


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SMALL_TABLES.items():
        assert hasattr(heuristics, name)
        monkeypatch.setattr(heuristics, name, value)


def _kernels(fn: Callable[..., Any], shapes: Sequence[tuple[int, ...]]) -> list[Kernel]:
    inputs = [torch.randn(s) if len(shapes) < 3 or k != 1
              else torch.randint(0, shapes[0][0], s) for k, s in enumerate(shapes)]
    with triton_for_cpu():
        compiled = compile_graph(trace(fn, inputs), "forward")
    return [k for k, _ in compiled.kernels]


def _outputs(kernel: Kernel, config: LaunchConfig) -> list[torch.Tensor]:
    facts = SizeFacts()
    launch = load_code(kernel, generate_triton_kernel(kernel, config, facts))
    args = kernel_arguments(kernel, facts, torch.device("cpu"))
    launch(*args)
    stored = set(kernel.stored_buffers())
    return [a for a, b in zip(args, kernel.buffers) if b.name in stored
            and isinstance(a, torch.Tensor)]


@pytest.mark.parametrize(("name", "classes"), [
    ("pointwise", {"x128_w1"}),
    ("softmax", {"x4_r32_w1_persistent"}),
    ("wide_rows", {"x1_r64_w2_persistent"}),
    ("looped_var", {"x1_r64_w4_looped"}),
    ("split_sum", {"x1_r64_w4_looped_split8"}),
    ("column_sum", {"x32_r16_w2_looped"}),
    ("column_split", {"x32_r16_w2_looped_split4"}),
    ("column_amax", {"x32_r16_w2_persistent"}),
    ("in_place_scatter", {"x128_w1"}),
])
@pytest.mark.usefixtures("small_blocks")
def test_every_candidate_computes_what_the_default_computes(name: str, classes: set[str]
                                                            ) -> None:
    fn, shapes = KERNELS[name]
    tuned = 0
    kernels = _kernels(fn, shapes)
    assert {config_name(launch_config(k)) for k in kernels} == classes
    for kernel in kernels:
        default = launch_config(kernel)
        configs = candidate_configs(default, SizeFacts().hint(kernel.numel),
                                    SizeFacts().hint(kernel.reduction_numel)
                                    if kernel.is_reduction else 0)
        expected = _outputs(kernel, default)
        for config in configs[1:]:
            tuned += 1
            for a, e in zip(_outputs(kernel, config), expected, strict=True):
                assert torch.allclose(a, e, rtol=1e-4, atol=1e-4, equal_nan=True), (
                    config_name(config), a, e)
    assert tuned >= 2


def test_every_candidate_compiles_for_sm90() -> None:
    from ember.runtime.compiled.triton_aot import compile_for_target
    from ember.runtime.compiled.triton_kernel import TritonKernelSpec

    compiled = 0
    for fn, shape in [(KERNELS["wide_rows"][0], (2, 2100)), (torch.sigmoid, (20, 30)),
                      (KERNELS["looped_var"][0], (2, 5000))]:
        for kernel in _kernels(fn, [shape]):
            default = launch_config(kernel)
            rnumel = SizeFacts().hint(kernel.reduction_numel) if kernel.is_reduction else 0
            for config in candidate_configs(default, SizeFacts().hint(kernel.numel), rnumel):
                code = generate_triton_kernel(kernel, config)
                spec = TritonKernelSpec(code.name, code.source, code.signature,
                                        dict(code.constexprs), code.num_warps,
                                        code.num_stages)
                assert compile_for_target(spec).num_warps == config.num_warps
                compiled += 1
    assert compiled >= 13


def test_generation_asks_select_and_uses_its_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, dict[str, object], list[str], str]] = []

    def fake_select(kind: str, key: dict[str, object], candidates: list[Candidate],
                    default: str) -> str:
        asked.append((kind, key, [c.name for c in candidates], default))
        return candidates[-1].name

    monkeypatch.setattr(block_tuning, "select", fake_select)
    (kernel,) = _kernels(KERNELS["softmax"][0], [(6, 40)])
    assert generate_triton_kernel(kernel).constexprs == {"XBLOCK": 8, "RBLOCK": 64}
    assert asked == []  # autotuning off
    with autotuning(True):
        code = generate_triton_kernel(kernel)
        with forced_config(LaunchConfig(2, 64, True, 1)):
            forced = generate_triton_kernel(kernel)
    ((kind, key, names, default),) = asked  # not asked under forced_config
    assert (kind, names, default) == ("reduction", [
        "x8_r64_w2_persistent", "x4_r64_w1_persistent", "x8_r64_w1_persistent",
        "x8_r64_w4_persistent"], "x8_r64_w2_persistent")
    assert sorted(key) == ["kernel", "numel", "rnumel", "sizes"]
    assert (key["numel"], key["rnumel"], key["sizes"]) == (6, 40, {})
    assert (code.constexprs, code.num_warps) == ({"XBLOCK": 8, "RBLOCK": 64}, 4)
    assert forced.constexprs == {"XBLOCK": 2, "RBLOCK": 64}


def test_the_key_does_not_depend_on_the_kernel_name(monkeypatch: pytest.MonkeyPatch) -> None:
    keys: list[object] = []

    def keep_key(kind: str, key: object, candidates: object, default: str) -> str:
        keys.append(key)
        return default

    monkeypatch.setattr(block_tuning, "select", keep_key)
    (kernel,) = _kernels(KERNELS["softmax"][0], [(6, 40)])
    renamed = dataclasses.replace(kernel, name="k9")
    with autotuning(True):
        generate_triton_kernel(kernel)
        generate_triton_kernel(renamed)
    assert len(keys) == 2 and keys[0] == keys[1]


def _compile(program: Program, **options: Any) -> tuple[Program, Callable[..., list[Any]]]:
    with triton_for_cpu():
        compiled = compile_program(program, {"precompile": False, "strict": True, **options})
    run = load_executor(compiled, "forward")
    return compiled, lambda *xs: run(list(xs))


def _layer(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return (y * 2).relu() + 1, torch.softmax(x, -1)  # two kernels: y is [24, 40]


def test_max_autotune_compiles_runs_and_a_warm_process_times_nothing(
        cache_root: Path) -> None:
    x, y = torch.randn(16, 40), torch.randn(24, 40)
    program = trace(_layer, [x, y])
    state = torch.get_rng_state()
    compiled, run = _compile(program, mode=MODE)
    assert torch.equal(torch.get_rng_state(), state)  # inputs drawn from their own generator
    assert compiled.metadata["autotune"] == {"benchmarked": 2, "cached": 0, "failed": 0,
                                             "defaulted": 0}
    for a, e in zip(run(x, y), _layer(x, y), strict=True):
        torch.testing.assert_close(a, e)
    assert sorted(p.name.split("-")[0] for p in (cache_root / "autotune").iterdir()) == [
        "pointwise", "reduction"]
    again, _ = _compile(program, mode=MODE)
    assert again.metadata["autotune"] == {"benchmarked": 0, "cached": 2, "failed": 0,
                                          "defaulted": 0}
    assert again.files == compiled.files  # the same choices: the same kernels


def test_a_program_with_nothing_to_tune_says_so(cache_root: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    # C++ kernels (CPU tensors) are not tuned: max-autotune changes nothing, and says so
    program = trace(_layer, [torch.randn(16, 40), torch.randn(24, 40)])
    capsys.readouterr()
    with patch(logs=frozenset({"autotune"})):
        compiled = compile_program(program, {"precompile": False, "mode": MODE})
    assert compiled.metadata["autotune"] == {"benchmarked": 0, "cached": 0, "failed": 0,
                                             "defaulted": 0}
    err = capsys.readouterr().err
    assert f"[ember.autotune] mode={MODE!r}: no kernel of this program has candidates" in err
    assert "compiled as the default mode would" in err


def test_the_default_mode_does_not_autotune(cache_root: Path) -> None:
    compiled, _ = _compile(trace(_layer, [torch.randn(16, 40), torch.randn(24, 40)]))
    assert "autotune" not in compiled.metadata
    assert not (cache_root / "autotune").exists()


SOFTMAX = '''program dialect=core-functional

graph forward(%x: f32[s0, s1]{s1,1} cpu):
  symbols s0 in [2, inf] hint=4, s1 in [2, 32] hint=16
  %y: f32[s0, s1]{s1,1} cpu = aten::_softmax.default(%x, -1, False)
  %s: f32[s0]{1} cpu = aten::sum.dim_IntList(%x, [-1])
  return (%y, %s)  [user_output, user_output]
'''


def test_symbolic_kernels_are_tuned_at_their_hints_and_correct_at_every_size() -> None:
    program = parse_program(SOFTMAX)
    program.untrusted_origin = None  # built here, not read from a file
    compiled, run = _compile(program, mode=MODE)
    assert compiled.metadata["autotune"] == {"benchmarked": 1, "cached": 0, "failed": 0,
                                             "defaulted": 0}
    for rows, cols in [(2, 2), (17, 17), (5, 32)]:
        x = torch.randn(rows, cols)
        y, s = run(x)
        torch.testing.assert_close(y, torch.softmax(x, -1))
        torch.testing.assert_close(s, x.sum(-1), rtol=1e-4, atol=1e-4)


def test_frontend_compile_with_max_autotune(cache_root: Path) -> None:
    import ember.frontend as ef

    x, y = torch.randn(4, 20), torch.randn(8, 40)
    with triton_for_cpu():
        fn = ef.compile(_layer, mode=MODE)
        out = fn(x, y)
    for a, e in zip(out, _layer(x, y), strict=True):
        torch.testing.assert_close(a, e)
    assert sorted(p.name.split("-")[0] for p in (cache_root / "autotune").iterdir()) == [
        "pointwise", "reduction"]
