"""Every op eager runs leaves the aot stage as Core ATen or as a declared extern op.

Ops outside Core ATen are decomposed with torch's full decomposition table (not only its
Core ATen one), Ember's own decompositions and CompositeImplicitAutograd kernels; a
decomposition written with ``prims`` ops keeps its op whole; ops nothing decomposes are
declared in ``metadata["aot"]["extern_ops"]``, which the core-functional verifier then
accepts. The interpreter (the ``aot_eager`` backend) runs the result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from aot_capture import capture, compile_fn
from ember.aot.config import AotConfig
from ember.aot.pipeline import aot_compile
from ember.runtime.config import patch
from ember.runtime.ir import VerificationError, verify

X = torch.randn(4, 6)
Y = torch.randn(4, 6)
IMAGE = torch.randn(1, 2, 5, 5)
WEIGHT = torch.randn(3, 6, 6)

# name -> (function, inputs, extern ops the stage must declare)
CASES: dict[str, tuple[Callable[..., Any], tuple[torch.Tensor, ...], list[str]]] = {
    "norm": (lambda a: a.norm(), (X,), []),
    "vector_norm": (lambda a: torch.linalg.vector_norm(a, 3), (X,), []),
    "normalize": (lambda a: F.normalize(a, dim=1), (X,), []),
    "cosine_similarity": (lambda a, b: F.cosine_similarity(a, b), (X, Y), []),
    "dist": (lambda a, b: torch.dist(a, b), (X, Y), []),
    "erfinv": (lambda a: torch.erfinv(a.tanh()), (X,), ["aten::erfinv.default"]),
    "fmax": (lambda a, b: torch.fmax(a, b.log()), (X, Y), []),
    "fmin": (lambda a, b: torch.fmin(a.log(), b), (X, Y), []),
    "copysign": (lambda a, b: torch.copysign(a, b), (X, Y), ["aten::copysign.Tensor"]),
    "ldexp": (lambda a, b: torch.ldexp(a, b.round()), (X, Y), []),
    "cumprod": (lambda a: torch.cumprod(a, 1), (X,), ["aten::cumprod.default"]),
    "cummax": (lambda a: torch.cummax(a, 1), (X,), ["aten::cummax.default"]),
    "median": (lambda a: torch.median(a), (X,), ["aten::median.default"]),
    "median_dim": (lambda a: torch.median(a, 1), (X,), ["aten::median.dim"]),
    "kthvalue": (lambda a: torch.kthvalue(a, 2, 1), (X,), ["aten::kthvalue.default"]),
    "isin": (lambda a, b: torch.isin(a.round(), b.round()), (X, Y),
             ["aten::searchsorted.Tensor"]),
    "addmv": (lambda a, b: torch.addmv(a[:, 0], a, b[0]), (X, Y), []),
    "addbmm": (lambda a, b: torch.addbmm(a[:2, :4], a.reshape(2, 2, 6), b.reshape(2, 6, 2)
                                         .repeat(1, 1, 2)), (X, Y), []),
    "interpolate_bilinear": (lambda i: F.interpolate(i, scale_factor=2, mode="bilinear"),
                             (IMAGE,), []),
    "interpolate_bicubic": (lambda i: F.interpolate(i, scale_factor=2, mode="bicubic"),
                            (IMAGE,), []),
    # torch decomposes adaptive max pooling only when the sizes divide evenly
    "adaptive_max_pool2d": (lambda i: F.adaptive_max_pool2d(i, 2), (IMAGE[..., :4, :4],), []),
    "adaptive_max_pool2d_uneven": (lambda i: F.adaptive_max_pool2d(i, 2), (IMAGE,),
                                   ["aten::adaptive_max_pool2d.default"]),
    "bilinear": (lambda a, b: F.bilinear(a, b, WEIGHT), (X, Y), ["aten::_trilinear.default"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_decomposed_or_declared_extern(name: str) -> None:
    fn, inputs, extern = CASES[name]
    program, run = compile_fn(fn, *inputs)
    assert program.metadata["aot"]["extern_ops"] == extern
    expected = fn(*inputs)
    got = run(list(inputs))
    expected = list(expected) if isinstance(expected, tuple) else [expected]
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, equal_nan=True)


@pytest.mark.parametrize("name", ["median", "kthvalue", "cummax", "erfinv", "dist", "bilinear"])
def test_gradients_through_extern_and_decomposed_ops(name: str) -> None:
    fn, inputs, extern = CASES[name]
    leaves = [t.clone().requires_grad_(True) for t in inputs]
    program, run = compile_fn(fn, *leaves, config=AotConfig(training=True))
    assert "backward" in program.graphs
    assert set(extern) <= set(program.metadata["aot"]["extern_ops"])
    got = run(leaves)[0]
    grads = torch.autograd.grad(got.sum(), leaves)
    eager_leaves = [t.clone().requires_grad_(True) for t in inputs]
    expected = fn(*eager_leaves)
    expected = expected[0] if isinstance(expected, tuple) else expected
    torch.testing.assert_close(got, expected)
    for g, e in zip(grads, torch.autograd.grad(expected.sum(), eager_leaves)):
        torch.testing.assert_close(g, e)


def test_prims_decomposition_keeps_the_op_whole() -> None:
    # torch's registered decomposition of cumprod is written with prims ops: the op stays
    # one call instead of leaving prims in the program.
    program = aot_compile(capture(lambda a: torch.cumprod(a, 0), X))
    targets = [n.target for n in program.forward.nodes if n.op == "call"]
    assert targets == ["aten::cumprod.default"]
    assert not any(t.startswith("prims::") for t in targets)


def test_extern_ops_are_logged_as_fallbacks(capsys: pytest.CaptureFixture[str]) -> None:
    with patch(logs="fallbacks"):
        aot_compile(capture(lambda a: torch.median(a, 1).values + 1, X))
    err = capsys.readouterr().err
    assert "aten::median.dim has no decomposition to Core ATen" in err


def test_verifier_refuses_undeclared_non_core_op() -> None:
    program = aot_compile(capture(lambda a: torch.median(a), X))
    verify(program, "core-functional")
    program.metadata["aot"] = {**program.metadata["aot"], "extern_ops": []}
    with pytest.raises(VerificationError, match=r"median.default.*not in the Core ATen opset"):
        verify(program, "core-functional")


def test_verifier_refuses_malformed_declaration() -> None:
    program = aot_compile(capture(lambda a: torch.median(a), X))
    program.metadata["aot"] = {**program.metadata["aot"], "extern_ops": "aten::median.default"}
    with pytest.raises(VerificationError, match="must be a list of qualified operator names"):
        verify(program, "core-functional")


def test_declaration_does_not_admit_mutating_ops() -> None:
    program = aot_compile(capture(lambda a: a + 1, X))
    node = next(n for n in program.forward.nodes if n.op == "call")
    node.target = "aten::add_.Tensor"
    program.metadata["aot"] = {**program.metadata["aot"], "extern_ops": ["aten::add_.Tensor"]}
    with pytest.raises(VerificationError, match="mutates its argument"):
        verify(program, "core-functional")


def test_decomposition_writing_through_a_dtype_view_keeps_the_op_whole() -> None:
    # torch decomposes complex() into an empty complex tensor written through
    # view_as_real/real/imag, which functionalization cannot express.
    a, b = torch.randn(3), torch.randn(3)
    program, run = compile_fn(torch.complex, a, b)
    assert [n.target for n in program.forward.nodes if n.op == "call"] == [
        "aten::complex.default"]
    torch.testing.assert_close(run([a, b])[0], torch.complex(a, b))


def test_dtype_reinterpreting_view_output_keeps_its_dtype() -> None:
    x = torch.randn(5, 2)
    program, run = compile_fn(torch.view_as_complex, x)
    assert program.metadata["aot"]["aliased_outputs"] == []
    got = run([x])[0]
    assert got.dtype == torch.complex64
    torch.testing.assert_close(got, torch.view_as_complex(x))


def test_gradient_through_functional_copy() -> None:
    # diff with n=0 copies its input with copy_; functionalized, that is aten::copy,
    # which torch's autograd has no formula for.
    x = torch.randn(4, requires_grad=True)
    program, run = compile_fn(lambda a: torch.diff(a, 0) * 2, x, config=AotConfig(training=True))
    (grad,) = torch.autograd.grad(run([x])[0].sum(), [x])
    torch.testing.assert_close(grad, torch.full((4,), 2.0))


def test_decomposition_needing_data_keeps_the_op_whole() -> None:
    # torch's bucketize decomposition makes a tensor of the Python number with
    # torch.tensor, which fake tensors cannot compute
    boundaries = torch.tensor([-2.0, -1.0, 0.5, 3.0])
    program, run = compile_fn(lambda b: torch.bucketize(-1.5, b), boundaries)
    assert program.metadata["aot"]["extern_ops"] == ["aten::bucketize.Scalar"]
    torch.testing.assert_close(run([boundaries])[0], torch.bucketize(-1.5, boundaries))


@pytest.mark.parametrize("kw", [{"size": (7, 4), "align_corners": False},
                                {"size": (7, 4), "align_corners": True},
                                {"scale_factor": 0.5, "align_corners": False},
                                {"size": (1, 3), "align_corners": True}],
                         ids=["size", "corners", "scale", "one_row"])
def test_bilinear_upsampling_backward_is_decomposed(kw: dict[str, Any]) -> None:
    # upsample_bilinear2d_backward (HF BEiT's interpolated position bias in training)
    # was an extern op: its gradient is two matmuls with the interpolation weights
    def fn(a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (F.interpolate(a, mode="bilinear", **kw) * 3,)

    x = IMAGE.clone().requires_grad_(True)
    program, run = compile_fn(fn, x, config=AotConfig(training=True))
    assert program.metadata["aot"]["extern_ops"] == []
    got = run([x])[0]
    (g,) = torch.autograd.grad((got * got).sum(), x)
    want = fn(x)[0]
    (w,) = torch.autograd.grad((want * want).sum(), x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(g, w)
