"""Extern calls over symbolic sizes (issue 15 follow-up): the lowering passes that rewrite
an extern call's result meta keep it in the IR's terms (ints and size-expression text),
and a convolution + batch-norm training step over a symbolic batch compiles with its
convolutions in the compiled graph, none of its ops run eagerly as a fallback of the
whole graph, at two sizes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import torch
from ember.inductor.compile import compile_program
from ember.inductor.lowering import extern_passes
from ember.inductor.lowering.context import ExternRequest, LoweringContext
from ember.inductor.lowering.values import Stored
from ember.runtime.compiled import load_executor
from ember.runtime.ir import InputSpec, Program, TensorMeta
from ember.runtime.tracing import GraphRecorder

# the GPU's convolution layouts on CPU tensors (conftest.gpu_convolution_layouts)
pytestmark = pytest.mark.usefixtures("gpu_convolution_layouts")

aten = torch.ops.aten
BATCH_NORM = "aten::_native_batch_norm_legit_functional.default"


def _trace(fn: Any, inputs: Sequence[torch.Tensor], dims: dict[int, tuple[int, None]]) -> Program:
    """A core-functional program of ``fn`` with dims ``dims`` of the first input symbolic."""
    rec = GraphRecorder(dynamic=True)
    fakes = [rec.add_input(inputs[0], InputSpec("x"), dynamic_dims=dims)]
    fakes += [rec.add_input(t, InputSpec(f"in{i}")) for i, t in enumerate(inputs[1:], 1)]
    with rec:
        out = fn(*fakes)
    program = rec.finish(list(out) if isinstance(out, tuple) else [out])
    program.dialect = "core-functional"
    program.metadata = {"aot": {"extern_ops": [BATCH_NORM]}}
    return program


def _conv_bn_relu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, gamma: torch.Tensor,
                  beta: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> tuple[Any, ...]:
    """A convolution, training-mode batch norm (the functional op kept whole, an extern
    op: the aot stage decomposes it, other producers of core-functional programs may
    not) and a ReLU, then a second convolution."""
    y = aten.convolution.default(x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    out, saved_mean, saved_invstd, new_mean, new_var = (
        aten._native_batch_norm_legit_functional.default(y, gamma, beta, mean, var,
                                                          True, 0.1, 1e-5))
    z = aten.relu.default(out)
    w2 = aten.permute.default(w, [1, 0, 2, 3])
    return (aten.convolution.default(z, w2, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
            saved_mean, saved_invstd, new_mean, new_var)


def _inputs(n: int, width: int = 8) -> list[torch.Tensor]:
    return [torch.randn(n, 3, 8, width), torch.randn(8, 3, 3, 3), torch.randn(8),
            torch.rand(8) + 0.5, torch.randn(8), torch.randn(8), torch.rand(8) + 0.5]


@pytest.fixture
def conv_metas() -> Iterator[list[TensorMeta]]:
    """The result metas the channels-last pass gives the convolutions it rewrites."""
    seen: list[TensorMeta] = []
    index = [name for name, _ in extern_passes.EXTERN_PASSES].index(
        "channels_last_convolution")
    name, rewrite = extern_passes.EXTERN_PASSES[index]

    def spy(ctx: LoweringContext, call: ExternRequest) -> ExternRequest | Stored:
        result = rewrite(ctx, call)
        if isinstance(result, ExternRequest) and result is not call:
            seen.extend(m for m in result.metas if isinstance(m, TensorMeta))
        return result

    # NOTE: in place: the lowering holds the list itself
    extern_passes.EXTERN_PASSES[index] = (name, spy)
    try:
        yield seen
    finally:
        extern_passes.EXTERN_PASSES[index] = (name, rewrite)


@pytest.mark.parametrize("dims,expected", [
    ({0: (2, None)}, [(("s0", 8, 8, 8), (512, 1, 64, 8)), (("s0", 3, 8, 8), (192, 1, 24, 3))]),
    ({0: (2, None), 3: (2, None)},
     [(("s0", 8, 8, "s1"), ("64*s1", 1, "8*s1", 8)),
      (("s0", 3, 8, "s1"), ("24*s1", 1, "3*s1", 3))]),
], ids=["batch", "batch_and_width"])
def test_the_channels_last_pass_keeps_metas_in_ir_terms(
        conv_metas: list[TensorMeta], dims: dict[int, tuple[int, None]],
        expected: list[tuple[tuple[int | str, ...], tuple[int | str, ...]]]) -> None:
    compile_program(_trace(_conv_bn_relu, _inputs(4), dims), {"strict": True})
    assert [(m.sizes, m.strides) for m in conv_metas] == expected


def test_a_conv_batch_norm_step_over_a_symbolic_batch_compiles_once() -> None:
    compiled = compile_program(_trace(_conv_bn_relu, _inputs(4), {0: (2, None)}),
                               {"strict": True})
    # the convolutions are compiled extern calls; only batch norm (declared an extern
    # op) runs as a fallback
    assert compiled.metadata["fallbacks"] == {BATCH_NORM: 1}
    run = load_executor(compiled, "forward")
    for n in (3, 6):
        inputs = _inputs(n)
        expected = _conv_bn_relu(*inputs)
        actual = run(list(inputs))
        for a, e in zip(actual, expected):
            torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)


def test_a_fallback_gets_its_operand_in_the_traced_layout_over_symbolic_sizes() -> None:
    """A fallback reads ``clone(permute(x))``: the lowering elides the clone, so the
    operand must be copied into the dense layout the program traced (an LSTM's
    ``mkldnn_rnn_layer`` read the permuted view as memory and returned wrong values)."""
    from ember.inductor.lowering.extern_args import TensorArg
    from ember.inductor.lowering.graph_lowering import GraphLowering
    from ember.inductor.lowering.layout import same_layout
    from ember.inductor.lowering.values import contiguous_strides

    def f(x: torch.Tensor) -> torch.Tensor:
        pairs = aten.clone.default(aten.permute.default(x, [1, 0, 2]),
                                   memory_format=torch.contiguous_format)
        return aten.view_as_real.default(aten.view_as_complex.default(pairs))

    program = _trace(f, [torch.randn(6, 5, 2)], {0: (2, None), 1: (2, None)})
    program.metadata = {}
    lowered = GraphLowering(program).run()
    (call,) = [n for n in lowered.extern_nodes if "view_as_complex" in n.target]
    operand = call.args[0]
    assert isinstance(operand, TensorArg)
    info = lowered.buffers[operand.buffer]
    sizes, strides = (info.sizes, info.strides) if operand.view is None else operand.view[:2]
    assert same_layout(sizes, strides, contiguous_strides(sizes)), (sizes, strides)
    run = load_executor(compile_program(program))
    for shape in ((6, 5, 2), (3, 9, 2)):
        x = torch.randn(*shape)
        (got,) = run([x])
        torch.testing.assert_close(got, f(x))
