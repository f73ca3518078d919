"""Float Scalars computed from sizes (``SymFloat``) in a dynamic recorder: recorded as
0-dim float64 tensors built from ``aten::scalar_tensor`` of the sizes, the op as its
Tensor overload computing in eager's precision; what has no tensor form is still
refused by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from ember.runtime.interpreter import run_program
from ember.runtime.ir import InputSpec, Program, print_graph, verify
from ember.runtime.tracing import GraphRecorder, SymbolicValueError
from ember.runtime.tracing_size_floats import _RULES

aten = torch.ops.aten


def record(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> Program:
    rec = GraphRecorder(dynamic=True)
    fake = rec.add_input(x, InputSpec("x"), dynamic_dims={0: (2, None)})
    with rec:
        out = fn(fake)
    program = rec.finish([out])
    verify(program)
    return program


def scaled(x: torch.Tensor) -> torch.Tensor:  # var's backward scales by 2 / (N - 1)
    return aten.mul.Scalar(x, 2.0 / (x.shape[0] - 1))  # type: ignore[no-any-return]


def test_a_size_float_is_recorded_as_a_tensor_over_the_sizes() -> None:
    text = print_graph(record(scaled, torch.randn(6, 3)).forward)
    body = [line.split("  #")[0].strip() for line in text.splitlines()[2:]]
    assert body[0] == ("%scalar_tensor: f64[]{} cpu = aten::scalar_tensor.default(sym(s0-1), "
                       'dtype=torch.float64, device=device("cpu"))'), text
    assert "aten::mul.Tensor(%x, %_to_copy)" in body[-2], text
    assert not any("mul.Scalar" in line for line in body), text


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16,
                                   torch.float64])
def test_one_recording_serves_every_size_as_eager_computes(dtype: torch.dtype) -> None:
    program = record(scaled, torch.randn(6, 3, dtype=dtype))
    for n in (2, 7, 33):
        x = torch.randn(n, 3, dtype=dtype)
        (got,) = run_program(program, [x])
        assert got.dtype == dtype
        torch.testing.assert_close(got, scaled(x), atol=0, rtol=0, msg=f"n={n}")


def int_times_size_float(x: torch.Tensor) -> torch.Tensor:
    return aten.mul.Scalar(x, x.shape[0] / 4)  # type: ignore[no-any-return]


def test_an_integer_tensor_times_a_size_float_is_a_float_tensor() -> None:
    program = record(int_times_size_float, torch.arange(4))
    x = torch.arange(9)
    (got,) = run_program(program, [x])
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, int_times_size_float(x), atol=0, rtol=0)


@pytest.mark.parametrize("op", [
    lambda x: aten.add.Scalar(x, x.shape[0] / 4, alpha=0.5),
    lambda x: aten.sub.Scalar(x, 1.0 / x.shape[0]),
    lambda x: aten.rsub.Scalar(x, x.shape[0] / 3),
    lambda x: aten.div.Scalar(x, x.shape[0] * 0.5 + 1),
    lambda x: aten.pow.Tensor_Scalar(x.abs(), 1.0 / x.shape[0]),
    lambda x: aten.mul_.Scalar(x.clone(), x.shape[0] ** 0.5),
    lambda x: x * (1.0 / x.shape[0]) - x.shape[0] / 2,  # the Tensor overloads
    lambda x: x.clamp(-(x.shape[0] ** -0.5), 1.0 / x.shape[0]),
    lambda x: torch.arange(x.shape[0] * 3).clamp(max=x.shape[0] / 2),  # int: a float
])
def test_each_rule_matches_eager(op: Callable[[torch.Tensor], torch.Tensor]) -> None:
    program = record(op, torch.randn(6, 3))
    for n in (3, 10):
        x = torch.randn(n, 3)
        (got,) = run_program(program, [x])
        torch.testing.assert_close(got, op(x), msg=f"n={n}")


def _binary(op: Any) -> Callable[[torch.Tensor, float], torch.Tensor]:
    return lambda x, f: op(x.abs() + 1, f)  # type: ignore[no-any-return]


# each rule's op called with a float made from x's size (f = x.shape[0] / 4)
CALLS: dict[Any, Callable[[torch.Tensor, float], torch.Tensor]] = {
    **{op: _binary(op) for op in (
        aten.mul.Scalar, aten.div.Scalar, aten.add.Scalar, aten.sub.Scalar, aten.rsub.Scalar,
        aten.pow.Tensor_Scalar, aten.clamp.default, aten.clamp_min.default,
        aten.clamp_max.default, aten.mul.Tensor, aten.div.Tensor, aten.add.Tensor,
        aten.sub.Tensor, aten.mul_.Scalar, aten.div_.Scalar, aten.add_.Scalar,
        aten.sub_.Scalar, aten.mul_.Tensor, aten.div_.Tensor, aten.fill.Scalar,
        aten.fill_.Scalar)},
    aten.full.default: lambda x, f: aten.full.default([x.shape[0], 2], f),
    aten.masked_fill.Scalar: lambda x, f: aten.masked_fill.Scalar(x, x > 0, f),
    aten.masked_fill_.Scalar: lambda x, f: aten.masked_fill_.Scalar(x.clone(), x > 0, f),
    # torch.where wraps its Scalar with scalar_tensor
    aten.scalar_tensor.default: lambda x, f: torch.where(x > 0, x, f),
}


def test_every_rule_has_a_call_here() -> None:
    assert set(CALLS) == set(_RULES)


@pytest.mark.parametrize("op", list(CALLS), ids=str)
def test_every_rule_matches_eager(op: Any) -> None:
    def call(x: torch.Tensor) -> torch.Tensor:
        return CALLS[op](x, x.shape[0] / 4)

    program = record(call, torch.randn(6, 3))
    assert "aten::scalar_tensor.default(sym(s0)" in print_graph(program.forward), op
    for n in (3, 10):
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(n, 3, dtype=dtype)
            (got,) = run_program(program if dtype == torch.float32 else
                                 record(call, torch.randn(6, 3, dtype=dtype)), [x])
            torch.testing.assert_close(got, call(x), msg=f"n={n} {dtype}")


def test_where_with_a_size_float_promotes_an_integer_tensor() -> None:
    def call(x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 2, x, x.shape[0] / 4)

    program = record(call, torch.arange(6))
    x = torch.arange(9)
    (got,) = run_program(program, [x])
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, call(x), atol=0, rtol=0)


def test_a_size_float_in_an_op_without_a_rule_is_still_refused() -> None:
    def leaky(x: torch.Tensor) -> Any:
        return aten.leaky_relu.default(x, 1.0 / x.shape[0])

    with pytest.raises(SymbolicValueError, match=r"aten::leaky_relu.default got a symbolic "
                       r"value .*SymFloat"):
        record(leaky, torch.randn(6, 3))
