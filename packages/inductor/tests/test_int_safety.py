"""Integer division is safe (issue 11, item 4): ``//``, ``%``, ``fmod``, ``remainder`` and
``div(rounding_mode=...)`` by zero, and ``MIN // -1``, never kill the process (the C++
kernels used to die of SIGFPE) and follow eager.

Eager on CPU, for int8, int16, int32, int64 (and uint8, which has no -1):

| op                              | x / 0                              | MIN / -1              |
|---------------------------------|------------------------------------|-----------------------|
| ``//``, floor_divide, div floor | RuntimeError("ZeroDivisionError")  | MIN (wraps around)    |
| div trunc                       | RuntimeError("ZeroDivisionError")  | MIN (int8, int16); eager int32/int64 die of SIGFPE: Ember gives MIN |
| ``%``, remainder, fmod          | RuntimeError("ZeroDivisionError")  | 0                     |

``test_eager_matches_the_table`` checks every cell eager survives. CUDA eager never
raises (the GPU's division by zero gives some value); Ember's Triton kernels for CUDA
tensors do not check either (``test_cuda_int_safety`` in this file, on a GPU).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from helpers import compile_and_load, compile_for, trace

OPS: dict[str, Callable[[Any, Any], torch.Tensor]] = {
    "floordiv": lambda a, b: a // b,
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "mod": lambda a, b: a % b,
    "remainder": torch.remainder,
    "fmod": torch.fmod,
}
# eager's op(MIN, -1): "min" or 0
MIN_BY_MINUS_ONE: dict[str, str | int] = {
    "floordiv": "min", "div_floor": "min", "div_trunc": "min", "mod": 0, "remainder": 0,
    "fmod": 0,
}
# cells where eager itself dies of SIGFPE (not run in eager)
EAGER_CRASHES = {("div_trunc", torch.int32), ("div_trunc", torch.int64)}
SIGNED = (torch.int8, torch.int16, torch.int32, torch.int64)
DTYPES = SIGNED + (torch.uint8,)


def _min_by_minus_one(op: str, dtype: torch.dtype) -> int:
    expected = MIN_BY_MINUS_ONE[op]
    return torch.iinfo(dtype).min if expected == "min" else int(expected)


def _operands(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Dividends and nonzero divisors of every sign combination (and MIN / -1)."""
    info = torch.iinfo(dtype)
    if dtype == torch.uint8:
        return (torch.tensor([7, 200, 255, 0, 9], dtype=dtype),
                torch.tensor([2, 3, 255, 5, 1], dtype=dtype))
    return (torch.tensor([7, -7, 7, -7, info.min, info.max, 0, info.min], dtype=dtype),
            torch.tensor([2, 2, -2, -2, 3, -1, 5, -1], dtype=dtype))




@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", sorted(OPS))
def test_eager_matches_the_table(op: str, dtype: torch.dtype) -> None:
    fn = OPS[op]
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fn(torch.tensor([5], dtype=dtype), torch.tensor([0], dtype=dtype))
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fn(torch.tensor([5], dtype=dtype), 0)
    if dtype in SIGNED and (op, dtype) not in EAGER_CRASHES:
        low = torch.tensor([torch.iinfo(dtype).min], dtype=dtype)
        assert fn(low, torch.tensor([-1], dtype=dtype)).item() == _min_by_minus_one(op, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", sorted(OPS))
def test_compiled_integer_division_follows_eager(op: str, dtype: torch.dtype,
                                                 backend: str) -> None:
    fn = OPS[op]
    a, b = _operands(dtype)
    compiled, run = compile_for(fn, a, b, backend=backend)
    got = run(a, b)[0]
    expected = fn(a[:-1], b[:-1]) if dtype in SIGNED else fn(a, b)  # eager may trap on the last
    assert got.dtype == dtype
    assert got[:len(expected)].tolist() == expected.tolist()
    if dtype in SIGNED:
        assert got[-1].item() == _min_by_minus_one(op, dtype)  # MIN / -1
    zero = b.clone()
    zero[1] = 0
    with pytest.raises(RuntimeError, match=f"ZeroDivisionError: integer division by zero in aten::"):
        run(a, zero)
    assert run(a, b)[0].tolist() == got.tolist()  # the next call is fine again


@pytest.mark.parametrize("op", sorted(OPS))
def test_scalar_divisors(op: str, backend: str) -> None:
    fn = OPS[op]
    a = torch.tensor([7, -7, torch.iinfo(torch.int64).min, 0])
    compiled, run = compile_for(lambda x: fn(x, 0), a, backend=backend)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        run(a)
    # a literal nonzero divisor needs no check: none in the generated code
    compiled, run = compile_for(lambda x: fn(x, -3), a, backend=backend)
    assert run(a)[0].tolist() == fn(a, -3).tolist()
    text = "\n".join(f.decode() for f in compiled.files.values())
    assert "kernel_errors" not in text


def test_divisor_known_nonzero_from_arange_has_no_check(backend: str) -> None:
    a = torch.arange(-8, 8)
    compiled, run = compile_for(lambda x: x // (torch.arange(16) + 1), a, backend=backend)
    assert run(a)[0].tolist() == (a // (torch.arange(16) + 1)).tolist()
    assert "kernel_errors" not in "\n".join(f.decode() for f in compiled.files.values())


def test_float_division_by_zero_is_not_an_error(backend: str) -> None:
    a = torch.tensor([1.0, -1.0, 0.0])
    compiled, run = compile_for(lambda x, y: [x // y, x % y, torch.fmod(x, y)], a,
                             torch.zeros(3), backend=backend)
    for got, want in zip(run(a, torch.zeros(3)), [a // 0.0, a % 0.0, torch.fmod(a, 0.0)]):
        torch.testing.assert_close(got, want, equal_nan=True)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("dtype", (torch.int32, torch.int64), ids=str)
def test_cuda_int_safety(dtype: torch.dtype) -> None:
    """On CUDA nothing raises, as in eager: / 0 returns some value (the GPU's, not
    compared); nonzero divisors give eager's values."""
    a, b = (t.cuda() for t in _operands(dtype))
    fn = OPS["floordiv"]

    def all_ops(x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        return [f(x, y) for f in OPS.values()]

    compiled, run = compile_and_load(trace(all_ops, [a, b]))
    got = run(a, b)
    for f, g in zip(OPS.values(), got):
        assert g[:-1].tolist() == f(a[:-1], b[:-1]).tolist()  # MIN / -1 left out
    zero = torch.zeros_like(b)
    out = run(a, zero)  # no exception, no crash
    torch.cuda.synchronize()
    assert all(o.shape == a.shape and o.dtype == dtype for o in out)
    assert fn(a, b).shape == a.shape
