"""Regressions from the OpInfo sweep (issue #11): ``out=`` ops, outputs that eager returns
requiring grad, ``resize_``."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from aot_capture import capture, compile_fn
from ember.aot.op_effects import out_variant_of
from ember.runtime.stages import StageDeclined

# ---- out= ops: the functional overload, its result written into ``out`` ----------------


def _mm_out(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    out = torch.empty(a.shape[0], b.shape[1])
    torch.mm(a, b, out=out)
    return (out * 2,)


def _mm_out_resized(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    out = torch.empty(0)  # the op resizes it
    r = torch.mm(a, b, out=out)
    return out + 1, r


def _max_out(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    values, indices = torch.empty(3), torch.empty(3, dtype=torch.int64)
    torch.max(a, 1, out=(values, indices))  # two out= arguments
    return values + b.sum(), indices


def _add_out_on_view(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    buf = torch.zeros(3, 8)
    torch.add(a, 1, out=buf[:, :4])  # written through a view
    return buf, b


@pytest.mark.parametrize("fn", [_mm_out, _mm_out_resized, _max_out, _add_out_on_view])
def test_out_ops_are_functionalized(fn: Any) -> None:
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    program, run = compile_fn(fn, a, b)
    assert not any(n.target.endswith(".out") for n in program.forward.calls())
    for got, want in zip(run([a, b]), fn(a, b)):
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want)


def test_out_op_under_training_matches_eager() -> None:
    """The sweep's crash: an out= op in a program that needs a backward."""

    def fn(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = torch.empty(3, 5)
        with torch.no_grad():
            torch.mm(a.detach(), b, out=out)
        return (a.sum(1, keepdim=True) * out,)

    a = torch.randn(3, 4, requires_grad=True)
    b = torch.randn(4, 5)
    _, run = compile_fn(fn, a, b)
    got = run([a, b])[0]
    want = fn(a, b)[0]
    torch.testing.assert_close(got, want)
    (g,) = torch.autograd.grad(got.sum(), a)
    (w,) = torch.autograd.grad(want.sum(), a)
    torch.testing.assert_close(g, w)


def test_out_variant_table() -> None:
    assert out_variant_of("aten::mm.out").functional == "aten::mm.default"
    variant = out_variant_of("aten::max.dim_max")
    assert variant.functional == "aten::max.dim"
    assert variant.outs == (("max", 0), ("max_values", 1))


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
def test_resizing_an_input_through_out_is_refused_clearly() -> None:
    def fn(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        torch.mm(a, a.t(), out=b)  # b is (4, 5): mm resizes it to (3, 3)
        return (b,)

    # declined (the graph runs eagerly, resizing b as eager does), not an error
    with pytest.raises(StageDeclined, match="resizes its out= argument"):
        compile_fn(fn, torch.randn(3, 4), torch.randn(4, 5))


# ---- outputs eager returns requiring grad come back differentiable ---------------------


@pytest.mark.parametrize("fn", [
    lambda a: torch.fft.hfft(a),  # conjugate materialized below autograd (a clone)
    lambda a: torch.fft.hfftn(a.reshape(2, 3)),
    lambda a: torch.linalg.matrix_power(a.reshape(2, 3)[:, :2], 0),  # copy_ into a grad tensor
])
def test_outputs_keep_requires_grad(fn: Any) -> None:
    a = torch.randn(6, requires_grad=True)
    _, run = compile_fn(lambda x: (fn(x),), a)
    got = run([a])[0]
    want = fn(a)
    assert want.requires_grad and got.requires_grad
    torch.testing.assert_close(got, want)
    cot = torch.randn_like(want)
    (g,) = torch.autograd.grad(got, a, cot)
    (w,) = torch.autograd.grad(want, a, cot)
    torch.testing.assert_close(g, w)


def _z_times_conj(x: torch.Tensor) -> torch.Tensor:
    z = torch.complex(x, x * 3)
    return (z * z.conj()).real


def _z_times_conj_no_grad(x: torch.Tensor) -> torch.Tensor:
    z = torch.complex(x, x * 3)
    with torch.no_grad():
        c = z.conj().clone()
    return (z * c).real


@pytest.mark.parametrize("fn", [_z_times_conj, _z_times_conj_no_grad])
def test_a_materialized_conjugate_beside_a_grad_argument_keeps_its_gradient(fn: Any) -> None:
    """``mul(z, z.conj())``: the conjugate fallback records ``clone(_conj(z))`` below
    autograd, without ``requires_grad``, beside ``z`` which has it; the gradient through
    the clone was dropped (half of ``d|z|²/dx``). Under ``no_grad`` it stays a constant."""
    a = torch.randn(2, 4, requires_grad=True)
    _, run = compile_fn(lambda x: (fn(x),), a)
    got = run([a])[0]
    torch.testing.assert_close(got, fn(a))
    (g,) = torch.autograd.grad(got.sum(), a)
    (w,) = torch.autograd.grad(fn(a).sum(), a)
    torch.testing.assert_close(g, w)


def test_recorder_marks_the_clone_below_autograd() -> None:
    program = capture(lambda a: torch.fft.hfft(a), torch.randn(5, requires_grad=True))
    clone = next(n for n in program.forward.calls() if n.target == "aten::clone.default")
    assert clone.meta.requires_grad


# ---- resize_: a view when the new size fits the storage, else a fresh tensor ------------


def _resize_shrink(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (x.clone().resize_((25, 5)),)  # the OpInfo sample: (5, 5, 5) -> (25, 5)


def _resize_smaller_then_write(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x.clone()
    y.resize_((2, 3))
    y.add_(1)
    return y, x


def _resize_grow(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x.clone()
    y.resize_((200,))
    return (y[: x.numel()],)  # the grown tail is uninitialized, as in eager


@pytest.mark.parametrize("fn", [_resize_shrink, _resize_smaller_then_write, _resize_grow])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_resize_matches_eager(fn: Any, dtype: torch.dtype) -> None:
    x = torch.arange(125).reshape(5, 5, 5).to(dtype)
    _, run = compile_fn(fn, x)
    for got, want in zip(run([x]), fn(x)):
        assert got.shape == want.shape
        assert torch.equal(got, want)


def test_resizing_an_input_to_another_shape_is_declined() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x.resize_((2, 2))
        return (x + 1,)

    with pytest.raises(StageDeclined, match=r"resize_ changes the shape of \(a view of\) graph"):
        compile_fn(fn, torch.randn(3, 4))


# ---- multilabel_margin_loss: the targets end at the first -1 -----------------------------


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss_ignores_the_slots_after_the_first_end(reduction: str) -> None:
    """torch's registered decomposition counted the entries after a row's ``-1`` as
    targets of class 0 (the third row's loss was 3.79 instead of 0.77)."""
    x = torch.randn(3, 4, requires_grad=True)
    target = torch.tensor([[3, 0, -1, 1], [0, 1, 2, 3], [1, -1, 0, 0]])

    def fn(a: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.nn.functional.multilabel_margin_loss(a, t, reduction=reduction),)

    _, run = compile_fn(fn, x, target)
    got, want = run([x, target])[0], fn(x, target)[0]
    torch.testing.assert_close(got, want)
    (g,) = torch.autograd.grad(got.sum(), x)
    (w,) = torch.autograd.grad(want.sum(), x)
    torch.testing.assert_close(g, w)


# ---- symbols the joint graph's re-trace unifies ------------------------------------------


def test_guards_follow_symbols_the_backward_unified() -> None:
    """scatter_add's backward gathers the gradient by ``index`` for ``src``, so the
    re-trace makes their sizes one symbol; the carried guards still named the replaced
    symbols and the program failed verification ("uses symbol 's3', which is not in
    graph.symbols")."""

    def fn(x: torch.Tensor, i: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return ((x + 0).scatter_add_(0, i, s) * 2,)

    x = torch.randn(4, 3, requires_grad=True)
    i = torch.tensor([[0, 1, 3], [0, 0, 0]])
    s = torch.randn(2, 3, requires_grad=True)
    every = {0: (2, None), 1: (2, None)}
    program, run = compile_fn(fn, x, i, s, dynamic={0: every, 1: every, 2: every})
    assert program.forward.guards  # the capture's, renamed
    got, want = run([x, i, s])[0], fn(x, i, s)[0]
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(torch.autograd.grad(got.sum(), (x, s)),
                               torch.autograd.grad(want.sum(), (x, s)))


# ---- backward ops without a kernel for symbolic sizes ---------------------------------


@pytest.mark.parametrize("fn", [torch.nn.functional.hardshrink,
                                torch.nn.functional.softshrink])
def test_shrink_backward_over_symbolic_sizes(fn: Any) -> None:
    """hardshrink_backward/softshrink_backward have no symbolic meta kernel: training
    them with ``dynamic=True`` crashed ("TensorIterator does not support symbolic
    shapes"); they are decomposed now."""
    x = torch.tensor([[0.5, -0.5, 0.2], [float("nan"), -1.0, 0.0]], requires_grad=True)
    _, run = compile_fn(lambda a: (fn(a) * 3,), x, dynamic={0: {0: (2, None), 1: (2, None)}})
    got, want = run([x])[0], fn(x) * 3
    torch.testing.assert_close(got, want, equal_nan=True)
    torch.testing.assert_close(torch.autograd.grad(got.sum(), x),
                               torch.autograd.grad(want.sum(), x), equal_nan=True)


def test_a_backward_op_without_a_symbolic_kernel_declines() -> None:
    """multi_margin_loss_backward has no meta kernel for symbolic sizes: the stage
    declines (the graph runs eagerly) instead of raising UnsupportedOperatorException."""
    from ember.runtime.stages import StageDeclined

    def fn(a: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.nn.functional.multi_margin_loss(a, t),)

    x, t = torch.randn(6, 5, requires_grad=True), torch.tensor([1, 0, 4, 2, 1, 3])
    with pytest.raises(StageDeclined, match="no kernel for them"):
        compile_fn(fn, x, t, dynamic={0: {0: (2, None), 1: (2, None)}, 1: {0: (2, None)}})


# ---- in-place view ops on inputs -------------------------------------------------------


def test_an_in_place_view_op_on_an_input_declines() -> None:
    """``x.unsqueeze_(0)`` changes the caller's tensor's shape, which a compiled
    program cannot do: it returned the right value and left the input (4, 3) where eager
    leaves it (1, 4, 3). The stage declines (the graph runs eagerly, as eager does)."""
    from ember.runtime.stages import StageDeclined

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x.unsqueeze_(0)
        return (x * 2,)

    with pytest.raises(StageDeclined, match=r"changes the sizes or strides of graph input"):
        compile_fn(fn, torch.randn(4, 3))


def test_an_in_place_view_op_on_a_view_of_an_input_compiles() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        v = x[0]
        v.unsqueeze_(0)  # v's own shape: nothing the caller sees
        return (v * 2,)

    x = torch.randn(4, 3)
    _, run = compile_fn(fn, x)
    torch.testing.assert_close(run([x])[0], fn(x.clone())[0])
