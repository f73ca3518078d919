"""The lowering's output as data: the printed LoweredGraph (golden text), its frozen
fields, extern calls' structured arguments, the named lowering passes, and the rule
table's independence from GraphLowering."""

from __future__ import annotations

import ast
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.buffers import ExternCall
from ember.inductor.codegen.wrapper import render_arg
from ember.inductor.lowering import extern_passes, graph_lowering, registry
from ember.inductor.lowering.extern_args import (
    ConstantArg,
    ExternArg,
    ListArg,
    TensorArg,
    VariableArg,
    extern_reads,
)
from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.inductor.lowering.lowered_graph import LoweredGraph
from ember.inductor.lowering.rng_seed import GraphSeed
from helpers import compile_fn, trace

# the GPU's convolution layouts on CPU tensors (conftest.gpu_convolution_layouts)
pytestmark = pytest.mark.usefixtures("gpu_convolution_layouts")


def lower(fn: Callable[..., Any], *inputs: torch.Tensor) -> LoweredGraph:
    return GraphLowering(trace(fn, list(inputs))).run()


# -- golden text ------------------------------------------------------------------------
SOFTMAX = """\
lowered graph 'forward' on cpu
  input arg0: float32[4, 8] strides [8, 1]
  buffer buf0: float32[4, 1] strides [1, 1] (computed)
  buffer buf1: float32[4, 1] strides [1, 1] (computed)
  buffer buf2: float32[4, 8] strides [8, 1] (computed)
  buf0 = reduction max over dims [1] of [4, 8] keepdim:  # from _softmax
      v0: float32 = load arg0[(i0*8 + r0)]
      v1: float32 = 2.0
      v2: float32 = mul(v0, v1)
      v3: float32 = reduce_max(v2)
      store buf0[i0] = v3
  buf1 = reduction sum over dims [1] of [4, 8] keepdim:  # from _softmax
      v0: float32 = load arg0[(i0*8 + r0)]
      v1: float32 = 2.0
      v2: float32 = mul(v0, v1)
      v3: float32 = load buf0[i0]
      v4: float32 = sub(v2, v3)
      v5: float32 = exp(v4)
      v6: float32 = reduce_sum(v5)
      store buf1[i0] = v6
  buf2 = pointwise over [4, 8]:  # from _softmax
      v0: float32 = load arg0[(i0*8 + i1)]
      v1: float32 = 2.0
      v2: float32 = mul(v0, v1)
      v3: float32 = load buf0[i0]
      v4: float32 = sub(v2, v3)
      v5: float32 = exp(v4)
      v6: float32 = load buf1[i0]
      v7: float32 = truediv(v5, v6)
      store buf2[(i0*8 + i1)] = v7
  outputs buf2"""

LINEAR_RELU = """\
lowered graph 'forward' on cpu
  input arg0: float32[4, 8] strides [8, 1]
  input arg1: float32[6, 8] strides [8, 1]
  input arg2: float32[6] strides [1]
  buffer buf0: float32[4, 6] strides [6, 1] (extern)
  buffer buf1: float32[4, 6] strides [6, 1] (computed)
  buf0 = extern aten::addmm.default(arg2, arg0, \
arg1.view([8, 6], strides=[1, 8], offset=0))  # from addmm
  buf1 = pointwise over [4, 6]:  # from relu
      v0: float32 = load buf0[(i0*6 + i1)]
      v1: float32 = 0.0
      v2: float32 = maximum(v1, v0)
      store buf1[(i0*6 + i1)] = v2
  outputs buf1"""

# the convolution's input is computed in N, H, W, C order (buf0) and passed as a
# channels-last view; the convolution returns channels-last (buf1); the output is
# stored in eager's row-major layout (buf2)
CONV_CHANNELS_LAST = """\
lowered graph 'forward' on cpu
  input arg0: float32[1, 2, 3, 3] strides [18, 9, 3, 1]
  input arg1: float32[4, 2, 3, 3] strides [18, 9, 3, 1]
  buffer buf0: float32[1, 3, 3, 2] strides [18, 6, 2, 1] (computed)
  buffer buf1: float32[1, 4, 3, 3] strides [36, 1, 12, 4] (extern)
  buffer buf2: float32[1, 4, 3, 3] strides [36, 9, 3, 1] (computed)
  buf0 = pointwise over [1, 3, 3, 2]:  # from relu
      v0: float32 = load arg0[(i3*9 + i1*3 + i2)]
      v1: float32 = 0.0
      v2: float32 = maximum(v1, v0)
      store buf0[(i1*6 + i2*2 + i3)] = v2
  buf1 = extern aten::convolution.default(\
buf0.view([1, 2, 3, 3], strides=[18, 1, 6, 2], offset=0), arg1, None, [1, 1], [1, 1], \
[1, 1], False, [0, 0], 1)  # from convolution
  buf2 = pointwise over [1, 4, 3, 3]:  # from sigmoid
      v0: float32 = load buf1[(i1 + i2*12 + i3*4)]
      v1: float32 = sigmoid(v0)
      store buf2[(i1*9 + i2*3 + i3)] = v1
  outputs buf2"""


def _softmax() -> LoweredGraph:
    return lower(lambda x: torch.softmax(x * 2, -1), torch.randn(4, 8))


def _linear_relu() -> LoweredGraph:
    return lower(lambda x, w, b: F.linear(x, w, b).relu(),
                 torch.randn(4, 8), torch.randn(6, 8), torch.randn(6))


def _conv() -> LoweredGraph:
    return lower(lambda x, w: F.conv2d(x.relu(), w, padding=1).sigmoid(),
                 torch.randn(1, 2, 3, 3), torch.randn(4, 2, 3, 3))


@pytest.mark.parametrize("make, expected", [
    (_softmax, SOFTMAX), (_linear_relu, LINEAR_RELU), (_conv, CONV_CHANNELS_LAST)],
    ids=["pointwise_and_reductions", "extern_matmul", "conv_channels_last"])
def test_printed_lowered_graph(make: Callable[[], LoweredGraph], expected: str) -> None:
    assert str(make()) == expected


# -- data -------------------------------------------------------------------------------
def test_lowered_graph_is_frozen() -> None:
    lowered = _linear_relu()
    with pytest.raises(dataclasses.FrozenInstanceError):
        lowered.outputs = ()  # type: ignore[misc]
    with pytest.raises(TypeError):
        lowered.buffers["buf9"] = lowered.buffers["buf0"]  # type: ignore[index]
    assert isinstance(lowered.nodes, tuple)
    assert [type(n).__name__ for n in lowered.loop_nodes] == ["PointwiseBuffer"]
    assert [n.target for n in lowered.extern_nodes] == ["aten::addmm.default"]


def test_extern_calls_keep_structured_arguments() -> None:
    (addmm,) = _linear_relu().extern_nodes
    assert addmm.args == [TensorArg("arg2"), TensorArg("arg0"),
                          TensorArg("arg1", ((8, 6), (1, 8), 0))]
    assert addmm.reads == ["arg0", "arg1", "arg2"]
    assert render_arg(addmm.args[2]) == "arg1.as_strided((8, 6), (1, 8))"


def test_a_view_past_the_start_adds_the_buffers_own_offset() -> None:
    # as_strided without an offset keeps the buffer's own; with one, it is absolute
    text = render_arg(TensorArg("buf3", ((4, 2), (8, 1), 6)))
    assert text == "buf3.as_strided((4, 2), (8, 1), buf3.storage_offset() + 6)"
    buf3 = torch.arange(64.0)[10:]  # a buffer that starts 10 elements into its storage
    view = eval(text, {"buf3": buf3})  # noqa: S307 - the text rendered above
    torch.testing.assert_close(view, buf3[6:38].reshape(4, 8)[:, :2])
    plain = eval(render_arg(TensorArg("buf3", ((4, 2), (8, 1), 0))), {"buf3": buf3})  # noqa: S307
    torch.testing.assert_close(plain, buf3[:32].reshape(4, 8)[:, :2])


def test_reads_come_from_structure_not_text() -> None:
    """A string constant that looks like a buffer name is not a read (the regex over
    rendered arguments this replaces would have counted it)."""
    args: list[ExternArg] = [ConstantArg("buf7"), ListArg((VariableArg("buf3_1"), ConstantArg(2))),
            TensorArg("arg0", ((2,), (1,), 1))]
    assert extern_reads(args, {"other": TensorArg("const0")}) == ["arg0", "buf3_1", "const0"]


@pytest.mark.parametrize("arg, source", [
    (ConstantArg(float("inf")), "float('inf')"),
    (ConstantArg(float("nan")), "float('nan')"),
    (ConstantArg(torch.device("cpu")), "torch.device('cpu')"),
    (ConstantArg(torch.float16), "torch.float16"),
    (ConstantArg(torch.channels_last), "torch.channels_last"),
    (ConstantArg("floor"), "'floor'"),
    (ListArg((ConstantArg(1), VariableArg("buf2"))), "[1, buf2]"),
    (ListArg(()), "[]"),
])
def test_wrapper_renders_extern_arguments(arg: Any, source: str) -> None:
    assert render_arg(arg) == source


def test_fallback_ops_are_extern_nodes_with_structured_arguments() -> None:
    lowered = GraphLowering(trace(lambda x: x.exp(), [torch.randn(3)]), eager=True).run()
    (call,) = lowered.extern_nodes
    assert call.is_fallback and call.args == [VariableArg("arg0")]
    assert dict(lowered.fallbacks) == {"aten::exp.default": 1}


# -- passes and seams -------------------------------------------------------------------
def test_lowering_passes_are_a_named_pipeline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The layout and matmul-padding decisions are passes listed in EXTERN_PASSES: taking
    the channels-last pass out of the list leaves the convolution's input row-major."""
    assert [name for name, _ in extern_passes.EXTERN_PASSES] == [
        "matmul_template", "pad_unaligned_matmul", "channels_last_convolution",
        "channels_last_convolution_backward", "transposed_matmul_operands",
        "traced_layout_operands", "user_kernel_operands"]
    monkeypatch.setattr(graph_lowering, "EXTERN_PASSES", [
        p for p in extern_passes.EXTERN_PASSES if p[0] != "channels_last_convolution"])
    (conv,) = [n for n in _conv().extern_nodes if n.target == "aten::convolution.default"]
    assert conv.args[0] == TensorArg("buf0")
    assert conv.result_meta[0] is not None and conv.result_meta[0][2] == (36, 9, 3, 1)


def test_the_seed_is_its_own_object() -> None:
    program = trace(lambda x: torch.rand_like(x) + x, [torch.randn(4)])
    ctx = GraphLowering(program)
    assert isinstance(ctx.rng, GraphSeed)
    lowered = ctx.run()
    seeds = [n for n in lowered.extern_nodes if n.target == "aten::randint.low"]
    assert len(seeds) == 1 and isinstance(seeds[0], ExternCall)


def test_registry_does_not_import_graph_lowering() -> None:
    """The rule table depends on the LoweringContext protocol only (no import cycle with
    graph_lowering, not even under TYPE_CHECKING)."""
    tree = ast.parse(Path(registry.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any(m and m.endswith("graph_lowering") for m in imported), imported


def test_printed_graph_matches_what_runs() -> None:
    """The golden programs also compile and match eager (the text is of a real graph)."""
    x, w = torch.randn(1, 2, 3, 3), torch.randn(4, 2, 3, 3)

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x.relu(), w, padding=1).sigmoid()

    _, run = compile_fn(f, x, w)
    torch.testing.assert_close(run(x, w)[0], f(x, w), rtol=1e-5, atol=1e-5)


def test_an_attention_op_gets_its_mask_in_the_traced_layout() -> None:
    # the frontend's mask rule gives SDPA `mask.contiguous()`; the lowering elides a
    # clone's copy, but the op was picked for the dense mask (on the H200 cuDNN's
    # attention failed when handed the transposed input): the mask is copied, once
    q = torch.randn(2, 4, 16, 8)
    m = torch.randn(2, 1, 16, 16).transpose(-1, -2)
    fn = lambda q, m: F.scaled_dot_product_attention(  # noqa: E731
        q, q, q, attn_mask=m.contiguous())
    lowered = GraphLowering(trace(fn, [q, m])).run()
    (sdpa,) = [n for n in lowered.extern_nodes if "scaled_dot_product" in n.target]
    mask = sdpa.kwargs["attn_mask"]
    assert isinstance(mask, TensorArg) and mask.buffer.startswith("buf"), mask
    assert mask.view is None and lowered.buffers[mask.buffer].strides == (256, 256, 16, 1)
    _, run = compile_fn(fn, q, m)
    torch.testing.assert_close(run(q, m)[0], fn(q, m))
    # a mask traced in its own (transposed) layout is passed as it is
    plain = GraphLowering(trace(lambda q, m: F.scaled_dot_product_attention(
        q, q, q, attn_mask=m), [q, m])).run()
    (sdpa,) = [n for n in plain.extern_nodes if "scaled_dot_product" in n.target]
    assert sdpa.kwargs["attn_mask"] == TensorArg("arg1"), sdpa.kwargs
