"""The CI slice of the OpInfo sweep (the full sweep: ``python tools/opinfo_sweep.py``).

A fixed set of OpInfos that covers each way an op reaches the backend (lowered as is,
decomposed by the aot stage, left whole as an extern fallback, a data-dependent op that
is a graph break) and the ops issue #11 found crashing, one sample per (dtype, kind):
no sample may crash or mismatch, and each op lands in the category stated here.
"""

from __future__ import annotations

import pytest
from opinfo_harness import CATEGORIES, SampleResult, op_label, run_opinfo, select_ops, summarize

# OpInfo -> the categories its samples may take (lowered / decomposed / fallback)
SLICE: dict[str, set[str]] = {
    "add": {"lowered"},
    "softmax": {"lowered", "decomposed"},
    "linalg.vector_norm": {"decomposed"},
    "nn.functional.normalize": {"decomposed"},
    "nn.functional.cosine_similarity": {"decomposed"},
    "fmax": {"decomposed"},
    "addbmm": {"decomposed"},
    "nn.functional.interpolate.bilinear": {"decomposed", "fallback"},  # its backward op
    "median": {"fallback"},
    "kthvalue": {"fallback"},
    "cummax": {"fallback"},
    "erfinv": {"fallback"},
    "nonzero": {"fallback"},
    "complex": {"fallback"},
    "diff": {"decomposed", "fallback"},
}


@pytest.fixture(scope="module")
def results() -> dict[str, list[SampleResult]]:
    return {op_label(opinfo): list(run_opinfo(opinfo, max_samples=1))
            for opinfo in select_ops(sorted(SLICE), exact=True)}


@pytest.mark.parametrize("op", sorted(SLICE))
def test_op_compiles_correctly(op: str, results: dict[str, list[SampleResult]]) -> None:
    samples = [r for r in results[op] if r.category != "skipped"]
    assert samples, f"{op}: every sample was skipped"
    bad = [f"{r.dtype} {r.kind}: {r.category}: {r.detail}" for r in samples
           if r.category not in SLICE[op]]
    assert not bad, f"{op}: " + "; ".join(bad)


def test_slice_summary(results: dict[str, list[SampleResult]]) -> None:
    summary = summarize([r for rs in results.values() for r in rs])
    assert set(summary.counts) == set(CATEGORIES)
    assert summary.counts["crash"] == summary.counts["mismatch"] == 0
    assert summary.correct_fraction == 1.0
    assert "aten::median.default" in summary.fallback_ops
