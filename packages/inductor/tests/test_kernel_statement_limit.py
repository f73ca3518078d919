"""Fusion stops where a kernel would grow past its backend's ``max_kernel_statements``
(Triton: ``codegen/triton/backend.py``, its compile time grows faster than a kernel):
a long chain of layer norms over a residual stream (a transformer backward's
recomputation) becomes several kernels, each within the limit, and still matches
eager."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.codegen.triton.backend import TritonBackend
from ember.inductor.codegen.triton.testing import TritonOnCpuBackend, triton_for_cpu
from ember.inductor.compile import compile_graph
from helpers import compile_and_load, trace

pytest.importorskip("triton")


def _chain(x: torch.Tensor, *ys: torch.Tensor) -> torch.Tensor:
    for y in ys:
        x = F.layer_norm(x + y, (x.shape[-1],))
    return x


def _inputs() -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(8, 32) for _ in range(9)]


def _kernel_sizes(limit: int | None, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    monkeypatch.setattr(TritonOnCpuBackend, "max_kernel_statements", limit)
    with triton_for_cpu():
        compiled = compile_graph(trace(_chain, _inputs()), "forward", torch.device("cpu"))
    return [len(kernel.body) for kernel, _ in compiled.kernels]


def test_a_chain_past_the_limit_becomes_several_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    whole = _kernel_sizes(None, monkeypatch)
    assert len(whole) == 1 and whole[0] > 80, whole  # the eight layer norms in one
    sizes = _kernel_sizes(80, monkeypatch)
    assert len(sizes) > 1 and all(s <= 80 for s in sizes), sizes
    inputs = _inputs()
    with triton_for_cpu():
        _, run = compile_and_load(trace(_chain, inputs), precompile=False)
    torch.testing.assert_close(run(*inputs)[0], _chain(*inputs), rtol=1e-5, atol=1e-5)


def test_the_triton_limit() -> None:
    # see the backend's note: 581 statements took 8.7 s to compile for sm_90
    assert TritonBackend.max_kernel_statements == 256
