"""Autotuning on a CUDA GPU: timing with CUDA events, select() choosing the faster of
two real workloads, every block-size candidate of real-size kernels computing what the
heuristic's kernel computes, and whole programs compiled with max-autotune (values
against eager, the warm cache timing nothing). Skipped without CUDA; run on the H200
(``bash tools/gpu/h200_all.sh tests``)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from ember.inductor.autotune import Candidate, autotuning, select, tuning_report
from ember.inductor.autotune import cache as autotune_cache
from ember.inductor.autotune.timing import median_ms
from ember.inductor.codegen.triton.block_tuning import kernel_arguments, load_code
from ember.inductor.codegen.triton.generate import generate_triton_kernel, launch_config
from ember.inductor.codegen.triton.heuristics import candidate_configs, config_name
from ember.inductor.codegen.triton.sizes import SizeFacts
from ember.inductor.compile import compile_graph
from ember.inductor.loop_ir import Kernel
from ember.runtime.config import patch

sys.path.insert(0, str(Path(__file__).parent))

from helpers import compile_and_load, trace

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU"),
]

MODE = "max-autotune-no-cudagraphs"
CUDA = torch.device("cuda")


@pytest.fixture(autouse=True)
def cache_root(tmp_path: Path) -> Iterator[Path]:  # NOTE: the kernels here are large
    with patch(cache_dir=tmp_path / "cache", cache_enabled=True):
        yield tmp_path / "cache"


def _matmul_runner(n: int) -> Callable[[], Callable[[], None]]:
    def make() -> Callable[[], None]:
        a = torch.randn(n, n, device=CUDA)

        def run() -> None:
            torch.mm(a, a)

        return run

    return make


def test_cuda_event_timing_orders_workloads() -> None:
    small = median_ms(_matmul_runner(256)(), CUDA)
    large = median_ms(_matmul_runner(4096)(), CUDA)
    assert 0 < small < large


def test_select_on_the_gpu_picks_the_faster_and_caches_it(cache_root: Path) -> None:
    candidates = [Candidate("big", _matmul_runner(4096)),
                  Candidate("small", _matmul_runner(512))]
    with autotuning(True):
        assert select("mm", {"case": "gpu"}, candidates, default="big") == "small"
        assert select("mm", {"case": "gpu"}, candidates, default="big") == "small"
        assert (tuning_report().benchmarked, tuning_report().cached) == (1, 1)
    description = autotune_cache.device_description(CUDA)
    assert description["type"] == "cuda"
    assert description["capability"] == list(torch.cuda.get_device_capability())


def _kernels(fn: Callable[..., Any], *xs: torch.Tensor) -> list[Kernel]:
    return [k for k, _ in compile_graph(trace(fn, list(xs)), "forward").kernels]


def _outputs(kernel: Kernel, config: Any) -> list[torch.Tensor]:
    facts = SizeFacts()
    launch = load_code(kernel, generate_triton_kernel(kernel, config, facts))
    args = kernel_arguments(kernel, facts, CUDA)
    launch(*args)
    stored = set(kernel.stored_buffers())
    return [a for a, b in zip(args, kernel.buffers) if b.name in stored
            and isinstance(a, torch.Tensor)]


CASES: dict[str, tuple[Callable[..., Any], list[tuple[tuple[int, ...], torch.dtype]]]] = {
    "pointwise_bf16": (lambda x: torch.nn.functional.gelu(x) * 2,
                       [((4096, 4096), torch.bfloat16)]),
    "softmax_bf16": (lambda x: torch.softmax(x, -1), [((4096, 1024), torch.bfloat16)]),
    "layer_norm_wide": (lambda x: torch.nn.functional.layer_norm(x, (4096,)),
                        [((2048, 4096), torch.float32)]),
    "looped_rows": (lambda x: x.var(-1), [((512, 16384), torch.float32)]),
    "split_sum": (lambda x: x.sum(), [((1 << 24,), torch.float32)]),
    "column_sum": (lambda x: x.sum(0), [((8192, 1024), torch.float32)]),
}


@pytest.mark.parametrize("name", CASES)
def test_every_candidate_of_real_kernels_matches_the_default(name: str) -> None:
    fn, specs = CASES[name]
    xs = [torch.randn(shape, device=CUDA, dtype=dtype) for shape, dtype in specs]
    tuned = 0
    for kernel in _kernels(fn, *xs):
        default = launch_config(kernel)
        rnumel = SizeFacts().hint(kernel.reduction_numel) if kernel.is_reduction else 0
        expected = _outputs(kernel, default)
        for config in candidate_configs(default, SizeFacts().hint(kernel.numel), rnumel)[1:]:
            tuned += 1
            for a, e in zip(_outputs(kernel, config), expected, strict=True):
                tol = 2e-2 if a.dtype == torch.bfloat16 else 1e-3
                assert torch.allclose(a.float(), e.float(), rtol=tol, atol=tol,
                                      equal_nan=True), (config_name(config), a, e)
    assert tuned >= 2


def _block(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor, i: torch.Tensor
           ) -> torch.Tensor:
    h = torch.nn.functional.layer_norm(x, (x.shape[-1],)) * w
    return torch.softmax(h, -1) + r.index_add(0, i, x[:8])  # an accumulating scatter


def test_max_autotune_program_on_the_gpu(cache_root: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    x = torch.randn(2048, 1024, device=CUDA, dtype=torch.bfloat16)
    w = torch.randn(1024, device=CUDA, dtype=torch.bfloat16)
    r = torch.randn(2048, 1024, device=CUDA, dtype=torch.bfloat16)
    i = torch.arange(8, device=CUDA)
    program = trace(_block, [x, w, r, i])
    start = time.perf_counter()
    compiled, run = compile_and_load(program, mode=MODE)
    cold = time.perf_counter() - start
    report = compiled.metadata["autotune"]
    assert report["benchmarked"] >= 2 and report["defaulted"] == 0, report
    (out,) = run(x, w, r, i)
    torch.testing.assert_close(out.float(), _block(x, w, r, i).float(), rtol=3e-2, atol=3e-2)
    start = time.perf_counter()
    again, _ = compile_and_load(program, mode=MODE)
    warm = time.perf_counter() - start
    assert again.metadata["autotune"]["benchmarked"] == 0
    assert again.metadata["autotune"]["cached"] == report["benchmarked"]
    assert again.files == compiled.files
    with capsys.disabled():
        print(f"\nmax-autotune compile: cold {cold:.2f} s ({report['benchmarked']} kernels "
              f"timed), warm cache {warm:.2f} s")


@pytest.mark.parametrize("mode", [MODE, "max-autotune"])
def test_frontend_modes_on_the_gpu(mode: str, cache_root: Path) -> None:
    import ember.frontend as ef
    from ember.runtime import pipeline

    if mode not in pipeline.implemented_modes():
        pytest.skip(f"{mode} needs {sorted(pipeline.mode_features(mode))}")
    x = torch.randn(1024, 2048, device=CUDA, dtype=torch.bfloat16)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * 0.5, -1) + torch.nn.functional.gelu(x)

    compiled = ef.compile(fn, mode=mode)
    for _ in range(3):  # record, then replay where the mode records CUDA graphs
        out = compiled(x).clone()
        torch.testing.assert_close(out.float(), fn(x).float(), rtol=3e-2, atol=3e-2)
    assert any((cache_root / "autotune").iterdir())
