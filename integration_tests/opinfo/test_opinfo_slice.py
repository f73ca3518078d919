"""The CI slice of the OpInfo sweep (the full sweep: ``python tools/opinfo_sweep.py``).

A fixed set of OpInfos that covers each way an op reaches the backend (lowered as is,
decomposed by the aot stage, left whole as an extern fallback, a data-dependent op that
is a graph break) and the ops issue #11 found crashing, one sample per (dtype, kind):
no sample may crash or mismatch, and each op lands in the category stated here.
"""

from __future__ import annotations

from opinfo_harness import CATEGORIES, op_label, run_opinfo, select_ops, summarize

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
    "erfinv": {"lowered"},
    "nonzero": {"fallback"},
    "complex": {"fallback"},
    "diff": {"decomposed", "fallback"},
}


# NOTE: one test, not one per op: under pytest-xdist a shared fixture would run once
# per worker, and each sample pays a g++ build.
def test_opinfo_slice() -> None:
    results = {op_label(opinfo): list(run_opinfo(opinfo, max_samples=1))
               for opinfo in select_ops(sorted(SLICE), exact=True)}
    assert sorted(results) == sorted(SLICE)
    bad: list[str] = []
    for op, samples in results.items():
        counted = [r for r in samples if r.category != "skipped"]
        if not counted:
            bad.append(f"{op}: every sample was skipped")
        bad += [f"{op} {r.dtype} {r.kind}: {r.category}: {r.detail}" for r in counted
                if r.category not in SLICE[op]]
    assert not bad, "\n".join(bad)
    summary = summarize([r for rs in results.values() for r in rs])
    assert set(summary.counts) == set(CATEGORIES)
    assert summary.counts["crash"] == summary.counts["mismatch"] == 0
    assert summary.correct_fraction == 1.0
    assert "aten::median.default" in summary.fallback_ops
