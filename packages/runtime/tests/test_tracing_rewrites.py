"""The recorder's rewrite table (:mod:`ember.runtime.tracing_rewrites`): GPU batch-norm
ops whose schemas hide their running-statistics writes are recorded as
``native_batch_norm``, which declares them; run on CPU by calling the ops directly under
the recorder (the rewrite never runs the vendor kernel)."""

from __future__ import annotations

import pytest
import torch
from ember.runtime.interpreter import run_program
from ember.runtime.ir import InputSpec, print_graph, verify
from ember.runtime.tracing import GraphRecorder
from ember.runtime.tracing_rewrites import RECORD_REWRITES

OPS = {"cudnn": torch.ops.aten.cudnn_batch_norm.default,
       "miopen": torch.ops.aten.miopen_batch_norm.default}


def test_the_table_holds_the_vendor_ops_whose_schemas_hide_their_writes() -> None:
    assert set(RECORD_REWRITES) == set(OPS.values())
    for op in RECORD_REWRITES:
        assert "running_mean" in str(op._schema) and "!" not in str(op._schema), op


@pytest.mark.parametrize("vendor", sorted(OPS))
def test_a_vendor_batch_norm_is_recorded_as_native_batch_norm(vendor: str) -> None:
    op = OPS[vendor]
    rec = GraphRecorder()
    example = [torch.randn(4, 3, 5, 5), torch.rand(3) + 0.5, torch.randn(3),
               torch.zeros(3), torch.ones(3)]
    names = ["x", "w", "b", "running_mean", "running_var"]
    fakes = [rec.add_input(t, InputSpec(n)) for t, n in zip(example, names)]
    with rec:
        out = op(*fakes, True, 0.1, 1e-5)[0]
    program = rec.finish([out])
    verify(program)
    text = print_graph(program.forward)
    assert "aten::native_batch_norm.default(%x, %w, %b, %running_mean, %running_var, True, 0.1" \
        in text, text
    assert vendor not in text, text
    # the recorded program updates the running statistics as batch_norm does
    ours = [t.clone() for t in example]
    (got,) = run_program(program, ours)
    want_stats = [torch.zeros(3), torch.ones(3)]
    want = torch.nn.functional.batch_norm(example[0], want_stats[0], want_stats[1], example[1],
                                          example[2], training=True, momentum=0.1, eps=1e-5)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(ours[3:], want_stats)
