"""The op table of ``packages/inductor/tests/test_cuda_triton.py`` on the GPU, with every
mismatch printed in full (values, positions), then each failing case compiled alone:
whether a failure belongs to the op or to the batch it was fused into.
``python3 tools/gpu/debug_op_table.py [float32] [contiguous|strided]``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "packages" / "inductor" / "tests"))

from helpers import compile_and_load, trace
from op_table import OP_TABLE, make_input

TOL = {torch.float32: 1e-4, torch.bfloat16: 5e-2, torch.float16: 1e-2}


def _flat(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    return [t for item in x for t in _flat(item)]


def _check(cases: list[Any]) -> list[str]:
    def batched(*ys: torch.Tensor) -> list[torch.Tensor]:
        outs: list[torch.Tensor] = []
        i = 0
        for c, xs, _ in cases:
            outs += _flat(c.fn(*ys[i:i + len(xs)]))
            i += len(xs)
        return outs

    flat = [x for _, xs, _ in cases for x in xs]
    _, run = compile_and_load(trace(batched, flat))
    outs = run(*[x.clone() for x in flat])
    failed, k = [], 0
    for c, xs, expected in cases:
        for n, e in enumerate(expected):
            a = outs[k]
            k += 1
            tol = TOL.get(e.dtype, TOL.get(xs[0].dtype, 0.0))
            try:
                torch.testing.assert_close(a, e, rtol=tol, atol=tol, equal_nan=True,
                                           check_stride=False)
            except AssertionError as err:
                failed.append(c.name)
                print(f"--- {c.name} output {n}: {err}")
                print("inputs:", [x.cpu() for x in xs])
                print("ember:", a.cpu(), "\neager:", e.cpu())
    return failed


def main() -> None:
    dtype = getattr(torch, sys.argv[1]) if len(sys.argv) > 1 else torch.float32
    contiguous = (sys.argv[2] if len(sys.argv) > 2 else "contiguous") == "contiguous"
    gen = torch.Generator().manual_seed(0)
    cases = []
    for c in OP_TABLE:
        if dtype not in c.dtypes or c.extern:
            continue
        xs = [make_input(s, dtype, c.domain, contiguous, gen) for s in c.shapes]
        if c.extra is not None:
            torch.manual_seed(7)
            xs += list(c.extra())
        xs = [x.cuda() for x in xs]
        try:
            expected = _flat(c.fn(*[x.clone() for x in xs]))
        except RuntimeError:
            continue
        cases.append((c, xs, expected))
    failed = _check(cases)
    print("===== batched: failing", failed)
    for name in dict.fromkeys(failed):
        alone = [case for case in cases if case[0].name == name]
        print(f"===== {name} alone: failing", _check(alone))


if __name__ == "__main__":
    main()
