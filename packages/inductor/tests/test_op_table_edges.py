"""Every op of the op table with edge-shaped inputs: 0-d, empty (a zero-size dim) and
size-1, derived from each case's shapes (``op_table.EDGE_VARIANTS``), against eager
(sizes, dtype, values, and strides over dims of more than one element), on CPU (C++)
and through Triton's interpreter. A lowering rule that raises on such an input is a
bug (strict lowering raises it), and none may fall back unless listed below (a batch
with fallbacks is lowered again case by case to name them).

Cases whose derived inputs eager refuses are not applicable and skipped. All cases of a
dtype run as one graph; a batch that fails is bisected to name the failing cases.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.lowering.graph_lowering import GraphLowering
from helpers import compile_and_load, trace
from op_table import EDGE_TABLE, Batch, OpCase, case_inputs, compare, flatten, layout_problem

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool)
BACKENDS = ("cpp", "triton")

# Edge cases allowed to fall back, with the reason.
EXPECTED_FALLBACKS: dict[str, str] = {}

# Edge cases known to differ from eager, with the reason.
KNOWN_GAPS: dict[str, str] = {
    "index_add@empty_last": "eager skips the index check when the result is empty; "
                            "Ember checks the indexes (out of range for a size-0 dim)",
}
# Where Triton's interpreter, not the generated code, is the problem (as in
# test_triton_ops.py): it has no bfloat16 atomic add.
INTERPRETER_GAPS: dict[tuple[str, torch.dtype], str] = {
    (name, torch.bfloat16): "the interpreter has no bfloat16 atomic add"
    for name in ("index_put_acc", "index_put_cols", "scatter_add", "scatter_reduce_sum",
                 "index_add", "max_pool2d_backward", "avg_pool2d_backward",
                 "adaptive_avg_pool2d_backward", "max_pool3d_backward", "avg_pool3d_backward",
                 "adaptive_avg_pool3d_backward")}

Runner = Callable[[list[OpCase], dict[str, list[torch.Tensor]]],
                  tuple[dict[str, list[torch.Tensor]], dict[str, int]]]


def _run_cpp(cases: list[OpCase], inputs: dict[str, list[torch.Tensor]]
             ) -> tuple[dict[str, list[torch.Tensor]], dict[str, int]]:
    batch = Batch(cases, inputs)
    compiled, run = compile_and_load(trace(batch.fn, batch.inputs))
    results: dict[str, list[torch.Tensor]] = batch.split(run(*[x.clone() for x in batch.inputs]))
    return results, dict(compiled.metadata["fallbacks"])


def _run_triton(cases: list[OpCase], inputs: dict[str, list[torch.Tensor]]
                ) -> tuple[dict[str, list[torch.Tensor]], dict[str, int]]:
    from ember.inductor.codegen.triton.testing import triton_for_cpu

    batch = Batch(cases, inputs)
    with triton_for_cpu():
        compiled, run = compile_and_load(trace(batch.fn, batch.inputs), precompile=False)
    results: dict[str, list[torch.Tensor]] = batch.split(run(*[x.clone() for x in batch.inputs]))
    return results, dict(compiled.metadata["fallbacks"])


def _run_bisecting(run: Runner, cases: list[OpCase], inputs: dict[str, list[torch.Tensor]],
                   errors: dict[str, str], fell_back: list[OpCase]
                   ) -> dict[str, list[torch.Tensor]]:
    """Results of ``cases`` run together; a failing batch is split in halves until the
    failing cases are alone (their errors go to ``errors``); the cases of a batch with
    fallbacks go to ``fell_back``."""
    try:
        results, fallbacks = run(cases, inputs)
        if fallbacks:
            fell_back.extend(cases)
        return results
    except Exception as e:  # noqa: BLE001 - narrowed down below
        if len(cases) == 1:
            errors[cases[0].name] = f"{type(e).__name__}: {str(e)[:400]}"
            return {}
    half = len(cases) // 2
    return {**_run_bisecting(run, cases[:half], inputs, errors, fell_back),
            **_run_bisecting(run, cases[half:], inputs, errors, fell_back)}


def _lowering_problem(case: OpCase, xs: list[torch.Tensor]) -> str | None:
    """None when the case lowers without fallbacks (or is an extern case), else why."""
    try:
        lowered = GraphLowering(trace(case.fn, xs)).run()
    except Exception as e:  # noqa: BLE001 - reported by the test
        return f"lowering raised {type(e).__name__}: {str(e)[:400]}"
    fallbacks = dict(lowered.fallbacks)
    if fallbacks and not case.extern and case.name not in EXPECTED_FALLBACKS:
        return f"fell back: {fallbacks}"
    return None


@functools.cache
def run_edges(backend: str, dtype: torch.dtype) -> dict[str, str | None]:
    """case name -> None when it matches eager, else the problem (cases eager refuses
    are absent)."""
    inputs: dict[str, list[torch.Tensor]] = {}
    expected: dict[str, list[torch.Tensor]] = {}
    for c in (c for c in EDGE_TABLE if dtype in c.dtypes):
        xs = case_inputs(c, dtype, True)
        try:
            expected[c.name] = flatten(c.fn(*[x.clone() for x in xs]))
        except (RuntimeError, IndexError, ValueError):
            continue  # eager refuses these inputs: not applicable
        inputs[c.name] = xs
    cases = [c for c in EDGE_TABLE if c.name in inputs]
    errors: dict[str, str] = {}
    fell_back: list[OpCase] = []
    actual = _run_bisecting(_run_cpp if backend == "cpp" else _run_triton, cases, inputs,
                            errors, fell_back)
    results: dict[str, str | None] = dict(errors)
    for c in cases:
        if c.name in actual:
            results[c.name] = (layout_problem(actual[c.name], expected[c.name])
                               or compare(actual[c.name], expected[c.name], dtype))
    for c in fell_back:  # which of them fell back
        results[c.name] = results[c.name] or _lowering_problem(c, inputs[c.name])
    return results


PARAMS = [
    pytest.param(backend, c.name, d, id=f"{backend}-{c.name}-{str(d)[6:]}")
    for backend in BACKENDS for d in DTYPES for c in EDGE_TABLE if d in c.dtypes
]


@pytest.mark.parametrize("backend,name,dtype", PARAMS)
def test_edge_shapes_match_eager(backend: str, name: str, dtype: torch.dtype) -> None:
    if backend == "triton":
        pytest.importorskip("triton")
    if name in KNOWN_GAPS:
        pytest.xfail(KNOWN_GAPS[name])
    if backend == "triton" and (name.split("@")[0], dtype) in INTERPRETER_GAPS:
        pytest.xfail(INTERPRETER_GAPS[name.split("@")[0], dtype])
    results = run_edges(backend, dtype)
    if name not in results:
        pytest.skip(f"eager refuses the inputs of {name} on {dtype}")
    assert results[name] is None, f"{name} {dtype}: {results[name]}"


def test_edge_variants_cover_the_table() -> None:
    from op_table import OP_TABLE

    variants = {c.name.split("@")[1] for c in EDGE_TABLE}
    assert variants == {"0d", "empty", "empty_last", "size1", "ones"}
    assert {c.name.split("@")[0] for c in EDGE_TABLE} == {c.name for c in OP_TABLE}


if __name__ == "__main__":
    for backend in sys.argv[1:] or ["cpp"]:
        for d in DTYPES:
            res = run_edges(backend, d)
            bad = {k: v for k, v in res.items() if v}
            print(f"{backend} {d}: {len(res)} runs, {len(bad)} failing")
            for k, v in sorted(bad.items()):
                print(f"  {k}: {v}")
