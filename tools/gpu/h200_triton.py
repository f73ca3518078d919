"""Memory-bound kernels on the H200: Ember's Triton code against eager and torch.compile.

Run on the GPU machine from the repo root (the packages need not be installed)::

    PYTHONPATH=packages/runtime/src:packages/frontend/src:packages/aot/src:packages/inductor/src \\
        python tools/gpu/h200_triton.py --out results.json

For each model and dtype, in one process: the median time (``triton.testing.do_bench``)
of eager, torch.compile and Ember, the bytes each must move at least, the bandwidth that
gives, its fraction of the measured device-to-device copy bandwidth, and Ember's compile
time cold (empty Ember and Triton caches) and warm (both caches filled, fresh modules).
Ember's path: trace the function (the runtime's GraphRecorder) → inductor's
``compile_program`` → the runtime's loader, as the inductor tests do.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
_cache = tempfile.mkdtemp(prefix="ember-h200-")
os.environ.setdefault("EMBER_CACHE_DIR", os.path.join(_cache, "ember"))
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_cache, "triton"))

import torch
import torch.nn.functional as F
import triton
from triton.testing import do_bench

sys.path.insert(0, str(ROOT / "packages/inductor/tests"))
from ember.inductor.compile import compile_program
from ember.runtime.compiled import (
    load_executor,
    triton_kernel,
)
from helpers import trace


def pointwise_chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return ((x * y).sigmoid() + x).relu() * 2 - y.tanh()


def softmax_layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(torch.softmax(x, -1), (x.shape[-1],), w, b)


def rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w


def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), w, b)


def _rows(rows: int, cols: int, dtype: torch.dtype, n_vec: int) -> list[torch.Tensor]:
    x = torch.randn(rows, cols, device="cuda", dtype=dtype)
    return [x] + [torch.randn(cols, device="cuda", dtype=dtype) for _ in range(n_vec)]


# name -> (fn, inputs(dtype), bytes moved at least = inputs + output)
MODELS: dict[str, tuple[Callable[..., Any], Callable[[torch.dtype], list[torch.Tensor]]]] = {
    "pointwise_chain": (pointwise_chain, lambda d: [
        torch.randn(8192, 8192, device="cuda", dtype=d),
        torch.randn(8192, 8192, device="cuda", dtype=d)]),
    "softmax_layer_norm_4096": (softmax_layer_norm, lambda d: _rows(32768, 4096, d, 2)),
    "rms_norm_4096": (rms_norm, lambda d: _rows(32768, 4096, d, 1)),
    "layer_norm_4096": (layer_norm, lambda d: _rows(32768, 4096, d, 2)),
    "layer_norm_8192": (layer_norm, lambda d: _rows(16384, 8192, d, 2)),
    "softmax_1024": (lambda x: torch.softmax(x, -1), lambda d: _rows(131072, 1024, d, 0)),
    "sum_dim0": (lambda x: x.sum(0), lambda d: _rows(32768, 4096, d, 0)),
    "sum_all": (lambda x: x.sum(), lambda d: _rows(32768, 4096, d, 0)),
    "softmax_256": (lambda x: torch.softmax(x, -1), lambda d: _rows(524288, 256, d, 0)),
    "layer_norm_768": (layer_norm, lambda d: _rows(131072, 768, d, 2)),
}

DEFAULT_RUNS = ("pointwise_chain:bfloat16,pointwise_chain:float32,"
                "softmax_layer_norm_4096:bfloat16,softmax_layer_norm_4096:float32,"
                "rms_norm_4096:bfloat16,rms_norm_4096:float32,layer_norm_8192:bfloat16,"
                "softmax_1024:float32,sum_dim0:float32,sum_all:float32,softmax_256:float32,"
                "layer_norm_768:bfloat16")


def copy_bandwidth() -> float:
    """Device-to-device copy bandwidth, bytes read + written per second."""
    x = torch.empty(1 << 30, device="cuda", dtype=torch.uint8)
    y = torch.empty_like(x)
    ms = do_bench(lambda: y.copy_(x), warmup=25, rep=200, return_mode="median")
    return float(2 * x.numel() / (ms * 1e-3))


def ember_compile(fn: Callable[..., Any], xs: list[torch.Tensor]) -> tuple[Any, Callable[[], Any], Any]:
    program = trace(fn, xs)
    compiled = compile_program(program)
    run = load_executor(compiled, "forward")
    return compiled, lambda: run(list(xs)), program


def bench_model(name: str, dtype: torch.dtype, copy_bw: float) -> dict[str, Any]:
    fn, make = MODELS[name]
    xs = make(dtype)
    row: dict[str, Any] = {"model": name, "dtype": str(dtype).replace("torch.", "")}
    expected = fn(*xs)
    moved = sum(x.numel() * x.element_size() for x in xs)
    moved += expected.numel() * expected.element_size()
    row["bytes"] = moved

    t0 = time.perf_counter()
    compiled, ember_call, _ = ember_compile(fn, xs)
    out = ember_call()[0]
    torch.cuda.synchronize()
    row["ember_compile_cold_s"] = round(time.perf_counter() - t0, 3)
    row["ember_kernels"] = compiled.metadata.get("kernels")
    row["ember_fallbacks"] = compiled.metadata.get("fallbacks")
    tol = 2e-2 if dtype != torch.float32 else 1e-4
    row["ember_max_abs_err"] = float((out.float() - expected.float()).abs().max())
    row["ember_correct"] = bool(torch.allclose(out.float(), expected.float(), atol=tol, rtol=tol))

    triton_kernel._loaded.clear()  # fresh modules: warm = both disk caches hit
    t0 = time.perf_counter()
    _, warm_call, _ = ember_compile(fn, xs)
    warm_call()
    torch.cuda.synchronize()
    row["ember_compile_warm_s"] = round(time.perf_counter() - t0, 3)

    compiled_torch = torch.compile(fn)
    t0 = time.perf_counter()
    compiled_torch(*xs)
    torch.cuda.synchronize()
    row["torch_compile_s"] = round(time.perf_counter() - t0, 3)

    for label, call in (("eager", lambda: fn(*xs)), ("torch_compile", lambda: compiled_torch(*xs)),
                        ("ember", ember_call)):
        ms = do_bench(call, warmup=25, rep=100, return_mode="median")
        row[f"{label}_ms"] = round(ms, 4)
        row[f"{label}_tbps"] = round(moved / (ms * 1e-3) / 1e12, 3)
        row[f"{label}_of_copy_bw"] = round(moved / (ms * 1e-3) / copy_bw, 3)
    row["ember_vs_torch_compile"] = round(row["torch_compile_ms"] / row["ember_ms"], 3)
    return row


# model, dtype -> launch configs to try: (xblock, rblock, persistent, num_warps[, split])
SWEEP: dict[tuple[str, str], list[tuple[int, ...]]] = {
    ("softmax_256", "float32"): [(2, 256, 1, 2), (4, 256, 1, 4), (8, 256, 1, 4), (8, 256, 1, 8),
                                 (16, 256, 1, 8)],
    ("layer_norm_768", "bfloat16"): [(1, 1024, 1, 2), (1, 1024, 1, 4), (2, 1024, 1, 4),
                                     (2, 1024, 1, 8)],
    ("softmax_layer_norm_4096", "bfloat16"): [(1, 4096, 1, 2), (1, 4096, 1, 4)],
    ("sum_all", "float32"): [(1, 4096, 0, 16, 128), (1, 4096, 0, 16, 256), (1, 8192, 0, 16, 256)],
}


def sweep(copy_bw: float) -> list[dict[str, Any]]:
    """Time each model of :data:`SWEEP` under each launch config (for the heuristics)."""
    from ember.inductor.codegen.triton import heuristics

    rows = []
    for (name, d), configs in SWEEP.items():
        fn, make = MODELS[name]
        xs = make(getattr(torch, d))
        out = fn(*xs)
        moved = sum(x.numel() * x.element_size() for x in [*xs, out])
        for config in configs:
            xblock, rblock, persistent, warps = config[:4]
            split = config[4] if len(config) > 4 else 1
            cfg = heuristics.LaunchConfig(xblock, rblock, bool(persistent), warps, 1, split)
            try:
                with heuristics.forced_config(cfg):
                    _, call, _ = ember_compile(fn, xs)
                ms = do_bench(call, warmup=10, rep=50, return_mode="median")
                row = {"model": name, "dtype": d, "config": list(config),
                       "ms": round(ms, 4), "of_copy_bw": round(moved / (ms * 1e-3) / copy_bw, 3)}
            except Exception as e:  # noqa: BLE001
                row = {"model": name, "dtype": d, "config": list(config),
                       "error": f"{type(e).__name__}: {str(e)[:200]}"}
            print("sweep", json.dumps(row), flush=True)
            rows.append(row)
        del xs
        torch.cuda.empty_cache()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="h200_triton.json")
    parser.add_argument("--runs", default=DEFAULT_RUNS, help="model:dtype,...")
    parser.add_argument("--sweep", action="store_true", help="also time launch-config variants")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, triton {triton.__version__}, "
          f"{torch.cuda.get_device_name()}", flush=True)
    copy_bw = copy_bandwidth()
    print(f"copy bandwidth: {copy_bw / 1e12:.3f} TB/s", flush=True)
    rows: list[dict[str, Any]] = []
    for run in args.runs.split(","):
        name, d = run.split(":")
        try:
            row = bench_model(name, getattr(torch, d), copy_bw)
        except Exception as e:  # noqa: BLE001 - record and go on
            row = {"model": name, "dtype": d, "error": f"{type(e).__name__}: {e}",
                   "traceback": traceback.format_exc()[-3000:]}
        rows.append(row)
        print(json.dumps(row), flush=True)
        torch.cuda.empty_cache()
    sweep_rows = sweep(copy_bw) if args.sweep else []
    result = {"torch": torch.__version__, "sweep": sweep_rows, "triton": triton.__version__,
              "device": torch.cuda.get_device_name(), "copy_tbps": copy_bw / 1e12, "rows": rows}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print("\nmodel                      dtype     eager   torch.compile  ember   "
          "ember/copyBW  vs-torch.compile")
    for r in rows:
        if "error" in r:
            print(f"{r['model']:26s} {r['dtype']:9s} ERROR {r['error'][:100]}")
            continue
        print(f"{r['model']:26s} {r['dtype']:9s} {r['eager_ms']:7.3f} {r['torch_compile_ms']:9.3f} "
              f"{r['ember_ms']:11.3f}   {r['ember_of_copy_bw']:6.2f}       "
              f"{r['ember_vs_torch_compile']:.2f}x")


if __name__ == "__main__":
    main()
