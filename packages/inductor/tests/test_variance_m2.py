"""Variance in one pass: the loop IR's ``m2`` reduction (the sum of squared deviations
from the mean; Triton: ``codegen/triton/welford.py``, C++: ``codegen/cpp/accumulators.py``)
and the device table that chooses it (``lowering/reductions.VARIANCE_FORMS``: a GPU's
variances reduce in one pass, a CPU's in two).

Numerics against eager in float64 with the CPU switched to ``m2``, on C++ and through
Triton's interpreter, at sizes that take each Triton form (a persistent row, a looped
row, a split reduction, column reductions), with large means (where a naive sum of
squares loses every digit: float32 itself limits both forms at a mean 4000 times the
deviation), corrections, keepdim, NaN and infinity, one element and no
element. The generated code: a batch norm's statistics on CUDA are one split reduction
(the sum and the ``m2`` beside it: four workspaces) where two passes took two, and the
``m2`` kernels pass Triton's compiler for sm_90.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.lowering import reductions
from helpers import compile_and_load, trace, triton_specs
from test_norm_kernels import cuda_training_sources

aten = torch.ops.aten


@pytest.fixture
def one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU's variances in the GPU's form (``m2``), short rows too (so that Triton's
    persistent form of ``m2``, which a GPU takes only for rows of symbolic length, runs)."""
    monkeypatch.setitem(reductions.VARIANCE_FORMS, "cpu", "m2")
    monkeypatch.setattr(reductions, "TWO_PASS_ROWS", 0)


def _run(fn: Any, inputs: list[torch.Tensor], backend: str) -> tuple[Any, list[torch.Tensor]]:
    compiled, run = compile_and_load(trace(fn, inputs), precompile=backend == "cpp")
    return compiled, run(*inputs)


def _sources(compiled: Any) -> str:
    return "\n".join(v.decode() if isinstance(v, bytes) else v
                     for k, v in compiled.files.items() if k.endswith(".py"))


def _statistics(x: torch.Tensor, rows: torch.Tensor, big: torch.Tensor) -> list[torch.Tensor]:
    return [
        *aten.var_mean.correction(x, [0, 2, 3], correction=0, keepdim=True),  # batch norm
        aten.var.correction(rows, [1], correction=1),  # long rows
        aten.var.correction(rows[:, :48], [1], correction=1, keepdim=True),  # two passes
        aten.std.correction(big, None, correction=1),  # one split row
        aten.var.correction(big.view(100, 700), [0], correction=0),  # columns
    ]


def test_statistics_match_eager(backend: str, one_pass: None) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 5, 29, 31, generator=g) * 3 + 1000  # a mean 300x the deviation
    rows = torch.randn(4, 5000, generator=g) + 4e3
    big = torch.randn(70000, generator=g) * 0.5 - 20
    compiled, got = _run(_statistics, [x, rows, big], backend)
    assert compiled.metadata["fallbacks"] == {}
    if backend == "triton":
        assert "_ember_welford" in _sources(compiled)
    want = _statistics(x.double(), rows.double(), big.double())
    for k, (gv, w) in enumerate(zip(got, want)):
        assert gv.dtype == torch.float32 and gv.shape == w.shape, k
        # float32's own limit at a mean 4000x the deviation (two passes do no better)
        torch.testing.assert_close(gv.double(), w, rtol=3e-4, atol=1e-6, msg=str(k))


def test_layer_norm_and_group_norm_match_eager(backend: str, one_pass: None) -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 6, 9, 11, generator=g) * 2 + 50
    w, b = torch.randn(6, generator=g), torch.randn(6, generator=g)
    h = torch.randn(5, 7, 4500, generator=g) + 10

    def fn(a: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, c: torch.Tensor
           ) -> list[torch.Tensor]:
        return [*aten.native_group_norm(a, weight, bias, 8, 6, 99, 3, 1e-5),
                *aten.native_layer_norm(c, [4500], None, None, 1e-5)]

    _, got = _run(fn, [x, w, b, h], backend)
    want = fn(x.double(), w.double(), b.double(), h.double())
    for k, (gv, wv) in enumerate(zip(got, want)):
        torch.testing.assert_close(gv.double(), wv, rtol=1e-4, atol=1e-4, msg=str(k))


def test_nan_inf_one_element_and_empty(backend: str, one_pass: None) -> None:
    x = torch.randn(3, 5000)
    x[1, 17] = float("nan")
    x[2, 5] = float("inf")
    one, empty = torch.randn(4, 1), torch.randn(4, 0)

    def fn(a: torch.Tensor, o: torch.Tensor, e: torch.Tensor) -> list[torch.Tensor]:
        return [aten.var.correction(a, [1], correction=0),
                aten.var.correction(o, [1], correction=0),
                aten.var.correction(o[0, 0], None, correction=0),
                aten.var.correction(e, [1], correction=1)]

    _, got = _run(fn, [x, one, empty], backend)
    for k, (gv, w) in enumerate(zip(got, fn(x, one, empty))):
        torch.testing.assert_close(gv, w, equal_nan=True, msg=str(k))


def test_the_device_table() -> None:
    from ember.inductor.codegen.triton.heuristics import PERSISTENT_MAX

    assert reductions.VARIANCE_FORMS == {"cpu": "two_pass", "cuda": "m2"}
    # rows a persistent reduction holds in registers keep two passes (no memory re-read)
    assert reductions.TWO_PASS_ROWS == PERSISTENT_MAX


def test_short_rows_keep_two_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(reductions.VARIANCE_FORMS, "cpu", "m2")
    x, long = torch.randn(8, 300), torch.randn(2, 5000)

    def fn(a: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
        return [aten.var.correction(a, [1], correction=1),
                aten.var.correction(b, [1], correction=1)]

    compiled, got = _run(fn, [x, long], "cpp")
    source = "\n".join(v.decode() if isinstance(v, bytes) else v
                       for k, v in compiled.files.items() if k.endswith(".cpp"))
    functions = source.split("extern \"C\" void kernel")[1:]
    assert len(functions) == 2, source
    two_pass = [f for f in functions if "pass 1 over the reduction ranges" in f]
    one_pass = [f for f in functions if "double mean_" in f]
    assert len(two_pass) == len(one_pass) == 1 and two_pass != one_pass, source
    for gv, w in zip(got, fn(x, long)):
        torch.testing.assert_close(gv, w)


def test_batch_norm_statistics_are_one_split_reduction_on_a_gpu() -> None:
    """A conv-BN-ReLU training step's forward on CUDA (generated here, nothing built):
    the statistics are one split reduction whose partial kernel stores the sum and the
    three parts of the ``m2``'s state; in two passes (the CPU's form) they took two
    split reductions (the loss's sum is the other split)."""
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())

    def forward_splits() -> list[list[str]]:
        sources = cuda_training_sources(model, (8, 3, 64, 64))
        return sorted(s.meta["split"]["workspace_dtypes"] for graph, _, s in sources
                      if graph == "forward" and s.meta.get("split"))

    assert forward_splits() == [["float32"], ["float32"] * 4]
    saved = reductions.VARIANCE_FORMS["cuda"]
    try:
        reductions.VARIANCE_FORMS["cuda"] = "two_pass"
        assert forward_splits() == [["float32"]] * 3
    finally:
        reductions.VARIANCE_FORMS["cuda"] = saved


def test_m2_kernels_compile_for_sm90(one_pass: None) -> None:
    """Persistent, looped, split and column ``m2`` reductions pass Triton's compiler for
    sm_90 (no GPU needed), not only its interpreter."""
    pytest.importorskip("triton")
    from ember.inductor.codegen.triton.testing import triton_for_cpu
    from ember.runtime.compiled.triton_aot import compile_for_target

    x, rows, big = torch.randn(6, 5, 29, 31), torch.randn(4, 5000), torch.randn(70000)
    with triton_for_cpu():
        compiled, _ = compile_and_load(trace(_statistics, [x, rows, big]), precompile=False)
    specs = triton_specs(compiled)
    sources = "\n".join(s.source for s in specs)
    assert "_partial" in sources and "for roffset" in sources and "_ember_welford" in sources
    assert "_mean = tl.reduce(" in sources  # the persistent form
    for spec in specs:
        assert ".target sm_90" in compile_for_target(spec).asm["ptx"]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_statistics_and_batch_norm_training(dtype: torch.dtype) -> None:
    """On a GPU (the ``m2`` form by default): the statistics against float64, and a
    conv-BN-ReLU training step's gradients and running statistics against eager's."""
    import ember.frontend as ef

    g = torch.Generator().manual_seed(2)
    x = (torch.randn(6, 5, 29, 31, generator=g) * 3 + 1000).cuda()
    rows = (torch.randn(4, 5000, generator=g) + 4e3).cuda()
    big = (torch.randn(70000, generator=g) * 0.5 - 20).cuda()
    compiled, got = _run(_statistics, [x, rows, big], "cuda")
    assert "_ember_welford" in _sources(compiled)
    want = _statistics(x.double(), rows.double(), big.double())
    for k, (gv, w) in enumerate(zip(got, want)):
        torch.testing.assert_close(gv.double(), w, rtol=3e-4, atol=1e-6, msg=str(k))

    # NOTE: the conv has no bias: before a batch norm its gradient is 0 but for rounding,
    # which no relative error can compare
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
                          nn.ReLU())
    model = model.cuda().to(dtype)
    twin = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
                         nn.ReLU())
    twin = twin.cuda().to(dtype)
    twin.load_state_dict(model.state_dict())
    inp = torch.randn(8, 3, 32, 32, device="cuda", dtype=dtype)
    ef.compile(model)(inp).float().sum().backward()
    twin(inp).float().sum().backward()
    limit = 3e-2 if dtype == torch.bfloat16 else 1e-4  # relative to the norm

    def close(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
        err = ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-12)).item()
        assert err < limit, (what, err)

    for (name, a), b in zip(model.named_parameters(), twin.parameters()):
        assert a.grad is not None and b.grad is not None
        close(a.grad, b.grad, name)
    for buffer in ("running_mean", "running_var"):
        close(getattr(model[1], buffer), getattr(twin[1], buffer), buffer)
