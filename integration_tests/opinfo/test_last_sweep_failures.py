"""Issue #11 item 2: the last OpInfo sweep failures compile and match eager (one sample
per (dtype, kind), as the sweep runs them): ``resize_`` (grows/shrinks the tensor),
``linear_cross_entropy`` (an ``out=`` op in its backward), ``embedding_bag`` in bfloat16
(an extern result left empty at run time) and the ``hfft`` / ``matrix_power(n=0)``
gradients (outputs that eager returns requiring grad)."""

from __future__ import annotations

import torch
from ember.runtime.compiled.wrapper_support import layout
from opinfo_harness import op_label, run_opinfo, select_ops

OPS = ["resize_", "nn.functional.linear_cross_entropy.chunked_none",
       "nn.functional.embedding_bag", "fft.hfft", "fft.hfft2", "fft.hfftn",
       "linalg.matrix_power"]


def test_last_sweep_failures_pass() -> None:
    bad = [f"{r.op} {r.dtype} {r.kind} #{r.index}: {r.category}: {r.detail}"
           for opinfo in select_ops(OPS, exact=True)
           for r in run_opinfo(opinfo, max_samples=1)
           if r.category in ("crash", "mismatch")]
    assert not bad, "\n".join(bad)
    assert {op_label(o) for o in select_ops(OPS, exact=True)} == set(OPS)


def test_an_extern_result_of_another_size_is_kept_as_eager_made_it() -> None:
    empty = torch.empty(0, dtype=torch.int64)  # embedding_bag's offset2bag, forward only
    assert layout(empty, (5,), (1,)) is empty
    strided = torch.arange(6.0).reshape(2, 3).t()
    relaid = layout(strided, (3, 2), (2, 1))
    assert relaid.stride() == (2, 1) and torch.equal(relaid, strided)
    row = torch.arange(3.0).expand(4, 3).contiguous()  # eager made it dense
    expanded = layout(row, (4, 3), (0, 1))
    assert expanded.stride() == (0, 1) and torch.equal(expanded, row)


# The --samples 3 sweep: the gradients of cummax/median/max(dim) on 0-dim inputs scatter
# into a 0-dim tensor, which the scatter lowering indexed as if it had a dim.
# index_fill / index_put: their backward calls _unique / nonzero (data-dependent shapes),
# so aot declines the graph and it runs eagerly (a counted fallback, it used to crash);
# index_copy: an extern gradient traced as expanded (stride 0) could not be copied into.
OPS_SAMPLE_3 = ["cummax", "median", "max.reduction_with_dim", "index_fill", "index_put",
                "index_copy"]


def test_scatter_into_0_dim_gradients_pass() -> None:
    results = [r for opinfo in select_ops(OPS_SAMPLE_3, exact=True)
               for r in run_opinfo(opinfo, max_samples=3, dtypes=[torch.float32])]
    bad = [f"{r.op} {r.dtype} {r.kind} #{r.index}: {r.category}: {r.detail}"
           for r in results if r.category in ("crash", "mismatch")]
    assert not bad, "\n".join(bad)
    assert sum(r.kind == "grad" and r.index == 2 for r in results) == len(OPS_SAMPLE_3)
