"""The op table of ``packages/inductor/tests/test_cuda_triton.py`` on the GPU, with every
mismatch printed in full (values, positions), then each failing case compiled alone:
whether a failure belongs to the op or to the batch it was fused into.
``python3 tools/gpu/debug_op_table.py [float32] [contiguous|strided]``."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "packages" / "inductor" / "tests"))

from helpers import compile_and_load, trace
from op_table import Batch, table_batch

TOL = {torch.float32: 1e-4, torch.bfloat16: 5e-2, torch.float16: 1e-2}


def _check(batch: Batch, expected: dict[str, list[torch.Tensor]], dtype: torch.dtype
           ) -> list[str]:
    _, run = compile_and_load(trace(batch.fn, batch.inputs))
    outs = batch.split(run(*[x.clone() for x in batch.inputs]))
    failed = []
    for name, got in outs.items():
        for n, (a, e) in enumerate(zip(got, expected[name])):
            tol = TOL.get(e.dtype, TOL.get(dtype, 0.0))
            try:
                torch.testing.assert_close(a, e, rtol=tol, atol=tol, equal_nan=True,
                                           check_stride=False)
            except AssertionError as err:
                failed.append(name)
                print(f"--- {name} output {n}: {err}")
                print("inputs:", [x.cpu() for x in batch.inputs_of(name)])
                print("ember:", a.cpu(), "\neager:", e.cpu())
    return failed


def main() -> None:
    dtype = getattr(torch, sys.argv[1]) if len(sys.argv) > 1 else torch.float32
    contiguous = (sys.argv[2] if len(sys.argv) > 2 else "contiguous") == "contiguous"
    batch, expected = table_batch(dtype, contiguous, "cuda")
    failed = _check(batch, expected, dtype)
    print("===== batched: failing", failed)
    for name in dict.fromkeys(failed):
        (case,) = [c for c in batch.cases if c.name == name]
        alone = Batch([case], {name: batch.inputs_of(name)})
        print(f"===== {name} alone: failing", _check(alone, expected, dtype))


if __name__ == "__main__":
    main()
