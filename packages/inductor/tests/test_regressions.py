"""Regression tests for fixed wrong-result bugs of the CPU backend (each compares with
eager on fresh random inputs)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from ember.runtime.ir.graph import SymExpr
from helpers import compile_fn


def test_masked_scatter_value_is_not_reused_outside_its_mask() -> None:
    # x*2 is read under the slice_scatter's mask (loads give 0 outside it) and again as
    # the unmasked base: the two must be separate values.
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        y = torch.ops.aten.select_scatter(y, y[:, 0] + 1, 1, 0)
        return torch.ops.aten.slice_scatter(y, y[:, 1:3] * 3, 1, 1, 3)

    x = torch.randn(4, 5)
    _, run = compile_fn(f, x)
    torch.testing.assert_close(run(x)[0], f(x))


def test_masked_pad_value_is_not_reused_unmasked() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        e = x.exp()
        return torch.ops.aten.constant_pad_nd(e, [1, 1])[:, :-2] + e

    x = torch.randn(3, 6)
    _, run = compile_fn(f, x)
    torch.testing.assert_close(run(x)[0], f(x))


def test_select_on_relu_with_short_inner_dim() -> None:
    # ReLU backward over a last dim of 6 with a loaded scalar: GCC 12 turned this into
    # interleaved masked loads and miscompiled it (garbage conv+BatchNorm gradients).
    def f(x: torch.Tensor, g: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return torch.where(x.relu() <= 0, c, g)

    # (x is sliced so that the kernel keeps a loop over rows of 6)
    x, g, c = torch.randn(64, 8)[:, 1:7], torch.randn(64, 6), torch.randn(())
    _, run = compile_fn(f, x, g, c)
    torch.testing.assert_close(run(x, g, c)[0], f(x, g, c))


def test_batch_norm_backward_over_short_rows() -> None:
    # The fused BatchNorm + ReLU backward of the conv-bn training case: a reduction
    # kernel whose second pass stores the input gradient over 6-element rows.
    def f(x: torch.Tensor, g: torch.Tensor, w: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        mean = x.mean((0, 2, 3), keepdim=True)
        xc = x - mean
        rstd = ((xc * xc).mean((0, 2, 3), keepdim=True) + 1e-5).rsqrt()
        y = (xc * rstd * w.view(1, -1, 1, 1)).relu()
        gy = torch.where(y <= 0, c, g)
        gsum = gy.sum((0, 2, 3), keepdim=True)
        gdot = (gy * xc).sum((0, 2, 3), keepdim=True)
        n = x.numel() / x.shape[1]
        return (gy - xc * (gdot / n) * rstd * rstd - gsum / n) * rstd * w.view(1, -1, 1, 1)

    x, g = torch.randn(4, 8, 6, 6), torch.randn(4, 8, 6, 6)
    w, c = torch.randn(8), torch.zeros(())
    _, run = compile_fn(f, x, g, w, c)
    torch.testing.assert_close(run(x, g, w, c)[0], f(x, g, w, c), atol=1e-4, rtol=1e-4)


def test_exp_of_extreme_and_special_values() -> None:
    # ember_exp (exp(x/2)^2, kept off glibc's slow path) must keep exp's results at the
    # edges: 0 for -inf, inf for +inf, NaN for NaN, denormals and overflow.
    special = torch.tensor([float("-inf"), float("inf"), float("nan"), -200.0, -103.0,
                            -95.0, -87.5, -80.0, 0.0, 80.0, 88.5, 89.0, 200.0])
    x = torch.cat([special, torch.randn(51) * 30]).reshape(8, 8)
    _, run = compile_fn(lambda t: t.exp() * 2, x)
    torch.testing.assert_close(run(x)[0], x.exp() * 2, equal_nan=True, rtol=1e-6, atol=0)


def _arange_cases(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    n, m = x.shape
    return (x.flatten()[torch.arange(0, n * m, m)],  # EmbeddingBag's offsets
            torch.arange(n, 3 * n) * 1.0,
            torch.arange(1, n * m, n),
            torch.arange(m) + x[0])


def test_arange_with_symbolic_start_and_step() -> None:
    """The lowering kept only the Python-number arguments of ``arange``: a symbolic
    ``step`` was taken for 1 (``nn.EmbeddingBag(mode="max")`` under ``dynamic=True``
    read the wrong bags) and a symbolic ``start`` for 0."""
    from ember.inductor.compile import compile_program
    from ember.runtime.compiled import load_executor
    from ember.runtime.ir import InputSpec
    from ember.runtime.tracing import GraphRecorder

    rec = GraphRecorder(dynamic=True)
    fake = rec.add_input(torch.randn(3, 4), InputSpec("x"), dynamic_dims={0: (2, None),
                                                                          1: (2, None)})
    with rec:
        outs = _arange_cases(fake)
    program = rec.finish(list(outs))
    program.dialect = "core-functional"
    assert any(isinstance(a, SymExpr) for n in program.forward.calls()
               if n.target.startswith("aten::arange") for a in n.args)
    run = load_executor(compile_program(program, {"strict": True}), "forward")
    for shape in ((3, 4), (5, 2)):
        x = torch.randn(shape)
        for got, want in zip(run([x]), _arange_cases(x)):
            torch.testing.assert_close(got, want)


def test_extern_result_in_another_dtype_than_traced_is_converted() -> None:
    # native_group_norm of a bf16 input with f32 weight: torch's meta says bf16 mean and
    # rstd, the CPU kernel returns f32 (autocast-trained Wav2Vec2's GroupNorm). The
    # kernels read the extern result as the traced bf16: f32 bits read as bf16 gave
    # inf/nan gradients; the wrapper now converts the result to the traced dtype.
    def f(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        _, mean, rstd = torch.ops.aten.native_group_norm(x, w, b, 2, 16, 79, 16, 1e-5)
        return mean.float() + rstd.float() * 2

    x = torch.randn(2, 16, 79).bfloat16()
    w, b = torch.ones(16), torch.zeros(16)
    _, run = compile_fn(f, x, w, b)
    torch.testing.assert_close(run(x, w, b)[0], f(x, w, b), rtol=1e-2, atol=1e-2)
