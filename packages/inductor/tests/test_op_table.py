"""Every op in the op table against eager on CPU (C++ kernels), for float32, float16,
bfloat16, int64 and bool where the op allows, with contiguous and non-contiguous inputs.

To keep C++ compile time down, all cases of one (dtype, layout) are traced into ONE
graph and compiled together (one g++ run); a batch that fails to compile is retried
case by case so a failure names its op. Per-case fallback status comes from lowering
each case's graph alone.

``python packages/inductor/tests/test_op_table.py`` prints the counts kept in
packages/inductor/README.md.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.inductor.lowering.random import RANDOM_LOWERINGS
from ember.inductor.lowering.scans import SCANS
from helpers import compile_and_load, trace
from op_table import OP_TABLE, Batch, OpCase, case_inputs, compare, flatten

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool)


def _lowering_status(case: OpCase, xs: list[torch.Tensor]) -> tuple[str, dict[str, int]]:
    program = trace(case.fn, xs)
    lowered = GraphLowering(program).run()
    fallbacks = dict(lowered.fallbacks)
    return ("fallback" if fallbacks else "lowered"), fallbacks


@functools.cache
def run_batch(dtype: torch.dtype, contiguous: bool) -> dict[str, tuple[str, str]]:
    """case name -> (status, detail): status in lowered / fallback / failing."""
    cases = [c for c in OP_TABLE if dtype in c.dtypes]
    inputs: dict[str, list[torch.Tensor]] = {}
    expected: dict[str, list[torch.Tensor]] = {}
    results: dict[str, tuple[str, str]] = {}
    for c in cases:
        xs = case_inputs(c, dtype, contiguous)
        try:
            expected[c.name] = flatten(c.fn(*[x.clone() for x in xs]))
        except RuntimeError:
            continue  # eager does not support this dtype: not applicable
        inputs[c.name] = xs
    runnable = [c for c in cases if c.name in inputs]
    for c in runnable:
        status, fallbacks = _lowering_status(c, inputs[c.name])
        results[c.name] = (status, str(fallbacks) if fallbacks else "")
    try:
        actual = _run_together(runnable, inputs)
    except Exception:  # noqa: BLE001 - find the case that breaks the batch
        actual = {}
        for c in runnable:
            try:
                actual.update(_run_together([c], inputs))
            except Exception as e:  # noqa: BLE001
                results[c.name] = ("failing", f"{type(e).__name__}: {str(e)[:300]}")
    for c in runnable:
        if c.name not in actual:
            continue
        problem = compare(actual[c.name], expected[c.name], dtype)
        if problem:
            results[c.name] = ("failing", problem)
    return results


def _run_together(cases: list[OpCase], inputs: dict[str, list[torch.Tensor]]
                  ) -> dict[str, list[torch.Tensor]]:
    batch = Batch(cases, inputs)
    _, run = compile_and_load(trace(batch.fn, batch.inputs))
    return batch.split(run(*[x.clone() for x in batch.inputs]))


PARAMS = [
    pytest.param(c.name, d, contig, id=f"{c.name}-{str(d)[6:]}-{'contig' if contig else 'strided'}")
    for c in OP_TABLE for d in c.dtypes for contig in (True, False)
]

# Known gaps: (case, dtype) pairs expected to fall back instead of lowering.
EXPECTED_FALLBACKS: set[tuple[str, torch.dtype]] = set()


@pytest.mark.parametrize("name,dtype,contiguous", PARAMS)
def test_op_matches_eager(name: str, dtype: torch.dtype, contiguous: bool) -> None:
    results = run_batch(dtype, contiguous)
    if name not in results:
        pytest.skip(f"eager does not support {name} on {dtype}")
    status, detail = results[name]
    assert status != "failing", f"{name} {dtype}: {detail}"
    case = next(c for c in OP_TABLE if c.name == name)
    if not case.extern and (name, dtype) not in EXPECTED_FALLBACKS:
        assert status == "lowered", f"{name} {dtype} fell back: {detail}"


def summary() -> dict[str, int]:
    """Counts over every (case, dtype, layout) of the table."""
    counts = {"lowered": 0, "fallback": 0, "failing": 0, "extern": 0}
    for d in DTYPES:
        for contig in (True, False):
            for name, (status, _) in run_batch(d, contig).items():
                case = next(c for c in OP_TABLE if c.name == name)
                counts["extern" if case.extern and status != "failing" else status] += 1
    return counts


if __name__ == "__main__":
    c = summary()
    print(f"op table: {len(OP_TABLE)} cases; runs: {sum(c.values())}; " +
          ", ".join(f"{k} {v}" for k, v in c.items()))
    for d in DTYPES:
        for contig in (True, False):
            for name, (status, detail) in sorted(run_batch(d, contig).items()):
                if status != "lowered":
                    print(f"  {name} {d} {'contig' if contig else 'strided'}: {status} {detail}")


# Lowered ops the table does not call, with the reason.
NOT_IN_TABLE = {
    "aten::_assert_tensor_metadata.default": "an assertion, no value",
    "aten::empty.memory_format": "uninitialized values",
    "aten::empty_like.default": "uninitialized values",
    "aten::empty_strided.default": "uninitialized values",
    "aten::new_empty.default": "uninitialized values",
    "aten::new_empty_strided.default": "uninitialized values",
    "aten::take.default": "test_index_bounds.py runs it (traced frontend graphs decompose "
                          "take into index)",
    "aten::_fused_rms_norm.default": "CompositeImplicit on CPU (traces decompose it); "
                                     "test_graphs.py builds the node by hand",
    **{f"aten::{op}.default": "test_grid_sampler.py (and its Triton and CUDA twins) runs "
                              "every mode, padding and dtype; the cudnn ops have no CPU "
                              "kernel, it builds their nodes by hand"
       for op in ("grid_sampler_2d", "grid_sampler_2d_backward", "cudnn_grid_sampler",
                  "cudnn_grid_sampler_backward")},
    **{op: "lowered on backends with a max_scan_length only (Triton; the C++ backend "
           "runs eager's scan): test_scans.py" for op in SCANS},
    **{op: "random values differ from eager's: test_random.py checks them"
       for op in RANDOM_LOWERINGS},
}


def test_table_calls_every_lowered_op() -> None:
    from ember.inductor.lowering import lowered_ops
    from helpers import trace

    called: set[str] = set()
    for case in OP_TABLE:
        for dtype in case.dtypes:
            xs = case_inputs(case, dtype, True)
            try:
                case.fn(*[x.clone() for x in xs])
            except RuntimeError:
                continue
            program = trace(case.fn, xs)
            called |= {n.target for n in program.forward.nodes if n.op == "call"}
    missing = set(lowered_ops()) - called - set(NOT_IN_TABLE)
    assert not missing, f"lowered ops without an op-table case: {sorted(missing)}"
