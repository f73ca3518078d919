"""Diagnose a failed CUDA-graph re-recording (a parameter moved to new storage): runs the
scenario of integration_tests/test_cuda_graphs_replay.py::
test_a_parameter_in_new_storage_is_recorded_again with the capture error's traceback
printed. ``python3 tools/gpu/debug_rerecord.py [direct|runner]``."""

from __future__ import annotations

import sys
import traceback

import torch
from ember.runtime import cudagraphs_replay
from ember.runtime.compiled import triton_kernel
from ember.runtime.ir import InputKind, InputSpec
from ember.runtime.pipeline import compile_program
from ember.runtime.tracing import GraphRecorder


def mlp(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x @ w1 + b1) @ w2


def main() -> None:
    if sys.argv[1:] == ["runner"]:
        triton_kernel._runner_is_direct = lambda kernel_type: False  # type: ignore[assignment]
    original = cudagraphs_replay.CudaCapture.record

    def record(self, run, pool):  # type: ignore[no-untyped-def]
        try:
            return original(self, run, pool)
        except BaseException:
            traceback.print_exc()
            raise

    cudagraphs_replay.CudaCapture.record = record  # type: ignore[method-assign]
    torch.manual_seed(0)
    params = {n: torch.randn(*s, device="cuda").div_(8)
              for n, s in (("w1", (32, 64)), ("b1", (64,)), ("w2", (64, 16)))}
    rec = GraphRecorder()
    fakes = [rec.add_input(torch.randn(8, 32, device="cuda"), InputSpec("x0"))]
    fakes += [rec.add_input(p, InputSpec(n, InputKind.PARAMETER, n)) for n, p in params.items()]
    with rec:
        out = mlp(*fakes)
    fn = compile_program(rec.finish([out]), "inductor", mode="reduce-overhead")
    x = torch.randn(8, 32, device="cuda")
    with torch.no_grad():
        fn([x, *params.values()])
        fn([x, *params.values()])
        moved = {k: v.clone() * 2 for k, v in params.items()}
        for _ in range(2):
            torch.testing.assert_close(fn([x, *moved.values()])[0], mlp(x, *moved.values()))
    assert fn.cuda_graphs is not None
    print("stats", fn.cuda_graphs.stats)
    torch.randn(4, device="cuda")
    print("random after: ok")


if __name__ == "__main__":
    main()
