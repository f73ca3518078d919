"""Layouts the lowering chooses: channels-last around convolutions (kernels loop in
storage order, the caller still gets eager's strides), permuted graph outputs, and
consumers of a realized value reading its buffer."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.buffers import ExternCall
from ember.inductor.loop_ir import Store
from ember.inductor.lowering.extern_args import ConstantArg, ListArg, TensorArg
from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.inductor.lowering.layout import is_channels_last, storage_order
from ember.inductor.lowering.values import Stored
from ember.inductor.scheduler import KernelStep, format_schedule, schedule
from ember.runtime.ir import Node, TensorMeta
from helpers import compile_fn, trace

# the GPU's convolution layouts on CPU tensors (conftest.gpu_convolution_layouts)
pytestmark = pytest.mark.usefixtures("gpu_convolution_layouts")


def conv_block(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, scale: torch.Tensor,
               shift: torch.Tensor) -> torch.Tensor:
    y = F.conv2d(x, w1, padding=1)
    y = torch.relu(y * scale.view(1, -1, 1, 1) + shift.view(1, -1, 1, 1))
    z = F.conv2d(y, w2, padding=1)
    return torch.relu(z + y)


def conv_only(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.conv2d(torch.relu(x), w, padding=1)


def _conv_inputs() -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(2, 3, 8, 8), torch.randn(6, 3, 3, 3), torch.randn(6, 6, 3, 3),
            torch.rand(6) + 0.5, torch.randn(6)]


def test_storage_order() -> None:
    assert storage_order((2, 3, 4, 5), (60, 1, 15, 3)) == (0, 2, 3, 1)
    assert storage_order((2, 3), (3, 1)) == (0, 1)
    assert storage_order((2, 3), (1, 2)) == (1, 0)
    assert storage_order((2, 3), (6, 1)) is None  # gaps: not dense
    assert is_channels_last((2, 3, 4, 5), (60, 1, 15, 3))
    assert not is_channels_last((2, 3, 4, 5), (60, 20, 5, 1))
    assert not is_channels_last((2, 1, 4, 5), (20, 1, 5, 1))  # also row-major


def test_convolutions_run_channels_last_and_match_eager() -> None:
    inputs = _conv_inputs()
    lowered = GraphLowering(trace(conv_block, inputs)).run()
    convs = [n for n in lowered.nodes
             if isinstance(n, ExternCall) and n.target == "aten::convolution.default"]
    assert len(convs) == 2
    for conv in convs:
        _, sizes, strides = conv.result_meta[0]
        assert is_channels_last(sizes, strides), conv.result_meta
        # the input is a channels-last view of a buffer stored in N, H, W, C order
        x = conv.args[0]
        assert isinstance(x, TensorArg) and x.view is not None, x
        buffer = x.buffer
        n, c, h, w = sizes[0], inputs[0].shape[1] if conv is convs[0] else 6, 8, 8
        assert lowered.buffers[buffer].sizes == (n, h, w, c)
    compiled, run = compile_fn(conv_block, *inputs)
    (got,) = run(*inputs)
    want = conv_block(*inputs)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert got.stride() == want.stride()  # the caller gets eager's layout back
    assert compiled.metadata["fallbacks"] == {}


def test_convolution_result_returned_directly_has_eager_strides() -> None:
    x, w = torch.randn(2, 4, 5, 5), torch.randn(3, 4, 3, 3)
    _, run = compile_fn(conv_only, x, w)
    (got,) = run(x, w)
    want = conv_only(x, w)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert got.stride() == want.stride() == (75, 25, 5, 1)


def _store_strides_of_innermost(fn: object, *inputs: torch.Tensor) -> list[str]:
    steps = schedule(GraphLowering(trace(fn, list(inputs))).run())
    return [str(s.index) for step in steps if isinstance(step, KernelStep)
            for s in step.kernel.body if isinstance(s, Store)]


def test_a_transposed_output_is_written_in_storage_order() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.sin().t().contiguous().t()  # eager: a column-major result

    x = torch.randn(16, 24)
    want = f(x)
    assert want.stride() == (1, 16)
    (index,) = _store_strides_of_innermost(f, x)
    # loops run over (24, 16) with the innermost variable at stride 1: sequential stores
    assert index == "(x0*16 + x1)", index
    _, run = compile_fn(f, x)
    (got,) = run(x)
    torch.testing.assert_close(got, want)
    assert got.stride() == want.stride()


def test_consumers_of_a_realized_value_read_its_buffer() -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x * 2 + 1)  # realized: the matmul needs it in memory
        return y @ w + y.exp()

    x, w = torch.randn(8, 8), torch.randn(8, 8)
    lowered = GraphLowering(trace(f, [x, w])).run()
    steps = schedule(lowered)
    kernels = [s for s in steps if isinstance(s, KernelStep)]
    assert len(kernels) == 2
    realized = kernels[0].kernel.stored_buffers()
    # the epilogue reads the realized y, not x again
    assert set(realized) <= set(kernels[1].kernel.loaded_buffers())
    assert "arg0" not in kernels[1].kernel.loaded_buffers()
    _, run = compile_fn(f, x, w)
    torch.testing.assert_close(run(x, w)[0], f(x, w), rtol=1e-5, atol=1e-5)


def _pad_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    """Matmul padding forced on the CPU for any size (on CUDA: big matmuls only), float32
    included (on CUDA: only where TF32 is allowed)."""
    from ember.inductor.codegen.cpp.backend import CppBackend
    from ember.inductor.lowering import matmul_padding

    monkeypatch.setattr(CppBackend, "pads_unaligned_matmuls", True)
    monkeypatch.setattr(matmul_padding, "allow_tf32", lambda: True)
    monkeypatch.setattr(matmul_padding, "PAD_MATMUL_MIN_NUMEL", 1)
    monkeypatch.setattr(matmul_padding, "PAD_MIN_INTENSITY", 0.0)


def test_misaligned_matmuls_run_padded(monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA a matmul with unaligned dims runs on zero-padded operands (forced on the
    CPU here): same values, eager's strides for outputs."""
    _pad_everything(monkeypatch)

    def f(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, y: torch.Tensor,
          z: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits = x @ w.t()                      # mm, 37 columns
        biased = torch.addmm(b, x, w.t())       # addmm, bias padded too
        batched = torch.bmm(y, z)               # bmm: 4 x 3 @ 3 x 5 (K and N)
        return logits, biased.relu() * 2, batched

    torch.manual_seed(0)
    inputs = [torch.randn(6, 8), torch.randn(37, 8), torch.randn(37), torch.randn(2, 4, 3),
              torch.randn(2, 3, 5)]
    lowered = GraphLowering(trace(f, inputs)).run()
    assert format_schedule(schedule(lowered)).splitlines()[:7] == [
        "kernel0 [8, 40]: buf0 (pointwise); loads arg1; stores buf0",  # w.t() padded once
        "extern aten::mm.default(arg0, buf0) -> buf1",
        "kernel1 [40]: buf2 (pointwise); loads arg2; stores buf2",  # the bias
        "extern aten::addmm.default(arg0, buf0, buf2) -> buf3",
        "kernel2 [2, 4, 4]: buf4 (pointwise); loads arg3; stores buf4",  # y along K
        "kernel3 [2, 4, 8]: buf5 (pointwise); loads arg4; stores buf5",  # z along K and N
        "extern aten::bmm.default(buf4, buf5) -> buf6"]
    externs = [n for n in lowered.nodes if isinstance(n, ExternCall)]
    assert [n.note for n in externs] == [
        "padded for aligned loads: N 37 -> 40; the result is a view of the first 6 x 37",
        "padded for aligned loads: N 37 -> 40; the result is a view of the first 6 x 37",
        "padded for aligned loads: N 5 -> 8, K 3 -> 4; the result is a view of the "
        "first 4 x 5"]
    assert [a for a in externs[1].args if isinstance(a, TensorArg)][0].buffer == "buf2"
    compiled, run = compile_fn(f, *inputs)
    for got, want in zip(run(*inputs), f(*inputs)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        assert got.stride() == want.stride()
    assert compiled.metadata["fallbacks"] == {}


def test_an_lm_heads_backward_pads_its_gradient_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """GPT-2's LM head backward: ``d @ w`` (K unaligned) and ``d.t() @ h`` (M unaligned,
    the left operand column-major) read one zero-padded copy of ``d``."""
    _pad_everything(monkeypatch)

    def f(d: torch.Tensor, w: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return d @ w, d.t() @ h

    torch.manual_seed(0)
    inputs = [torch.randn(16, 37), torch.randn(37, 24), torch.randn(16, 24)]
    lowered = GraphLowering(trace(f, inputs)).run()
    assert format_schedule(schedule(lowered)).splitlines() == [
        "kernel0 [16, 40]: buf0 (pointwise); loads arg0; stores buf0",
        "kernel1 [40, 24]: buf1 (pointwise); loads arg1; stores buf1",
        "extern aten::mm.default(buf0, buf1) -> buf2",
        "extern aten::mm.default(arg2, buf0) -> buf3"]
    second = [n for n in lowered.nodes if isinstance(n, ExternCall)][1]
    assert second.args[0] == TensorArg("buf0", ((40, 16), (1, 40), 0))  # dᵀ, padded
    _, run = compile_fn(f, *inputs)
    for got, want in zip(run(*inputs), f(*inputs)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        assert got.stride() == want.stride()


def test_only_compute_bound_matmuls_pad_m_and_k() -> None:
    """The padding plan on the H200's backend: N is padded for a big result; M and K only
    when the matmul is compute-bound (a skinny one reads its operands once anyway)."""
    from ember.inductor.lowering import matmul_padding
    from ember.inductor.lowering.context import ExternRequest

    def plan(m: int, k: int, n: int, a_col: bool = False,
             dtype: torch.dtype = torch.bfloat16) -> object:
        a_strides = (1, m) if a_col else (k, 1)
        a = Stored("a", dtype, (m, k), a_strides)
        b = Stored("b", dtype, (k, n), (n, 1))
        node = Node("mm", "call_function", "aten::mm.default")
        meta = TensorMeta(dtype, (m, n), (n, 1), torch.device("cuda"))
        call = ExternRequest(node, (a, b), {}, (meta,))
        ctx = SimpleNamespace(device=torch.device("cuda"), is_realized=lambda v: False)
        return matmul_padding.plan_padding(ctx, call)  # type: ignore[arg-type]

    Padding = matmul_padding.MatmulPadding
    assert plan(8192, 50257, 768) == Padding(None, None, 50264)  # dlogits @ W
    assert plan(1024, 50257, 768) == Padding(None, None, 50264)  # a result under 1M elements
    assert plan(50257, 8192, 768, a_col=True) == Padding(50264, None, None)  # dlogitsᵀ @ h
    assert plan(8192, 768, 50257) == Padding(None, 50264, None)  # the forward
    assert plan(50257, 8192, 768) is None  # row-major: M is not a contiguous extent
    assert plan(1 << 20, 37, 8) is None  # memory-bound: K stays
    assert plan(64, 64, 64) is None  # small


@pytest.mark.parametrize("tf32", [False, True], ids=["ieee", "tf32"])
def test_float32_matmuls_pad_only_on_tensor_cores(tf32: bool) -> None:
    """A float32 matmul runs on tensor cores only with TF32 allowed; without it cuBLAS's
    CUDA-core kernels take unaligned operands at the same speed, and nothing is padded
    (hf_llama's 2730-wide MLP in float32: no pads, no compact copies of results)."""
    from ember.inductor.lowering import matmul_padding
    from ember.inductor.lowering.context import ExternRequest

    a = Stored("a", torch.float32, (4096, 1024), (1024, 1))
    b = Stored("b", torch.float32, (1024, 2730), (2730, 1))
    meta = TensorMeta(torch.float32, (4096, 2730), (2730, 1), torch.device("cuda"))
    call = ExternRequest(Node("mm", "call_function", "aten::mm.default"), (a, b), {}, (meta,))
    ctx = SimpleNamespace(device=torch.device("cuda"), is_realized=lambda v: False)
    saved = torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")  # (resets allow_tf32: first)
        torch.backends.cuda.matmul.allow_tf32 = tf32
        padding = matmul_padding.plan_padding(ctx, call)  # type: ignore[arg-type]
        width = matmul_padding.padded_width(ctx, call)  # type: ignore[arg-type]
        if not tf32:  # the precision setting alone allows TF32 too
            torch.set_float32_matmul_precision("high")
            assert matmul_padding.padded_width(ctx, call) == 2732  # type: ignore[arg-type]
    finally:
        torch.set_float32_matmul_precision(saved[1])
        torch.backends.cuda.matmul.allow_tf32 = saved[0]
    if tf32:
        assert padding == matmul_padding.MatmulPadding(None, 2732, None) and width == 2732
    else:
        assert padding is None and width is None


def test_four_d_values_not_from_convolutions_stay_row_major() -> None:
    def f(x: torch.Tensor, w: torch.Tensor, q: torch.Tensor,
          k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.relu(F.conv2d(x, w, padding=1))
        # 4-d attention operands in the same graph (the extern needs q * 2 in memory)
        return y, F.scaled_dot_product_attention(q * 2, k, k)

    torch.manual_seed(0)
    inputs = [torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3), torch.randn(2, 3, 8, 5),
              torch.randn(2, 3, 8, 5)]
    lowered = GraphLowering(trace(f, inputs)).run()
    computed = {n: b for n, b in lowered.buffers.items() if b.kind == "computed"}
    q2 = [b for b in computed.values() if b.sizes == (2, 3, 8, 5)]
    assert q2 and all(b.strides == (120, 40, 5, 1) for b in q2), q2
    _, run = compile_fn(f, *inputs)
    for got, want in zip(run(*inputs), f(*inputs)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)



def test_attention_operands_take_their_traced_layout() -> None:
    """Heads split from a ``(batch, seq, heads*dim)`` projection and transposed (a
    Llama's rotated q): the kernel computing ``q`` stores it in the traced ``(batch,
    seq, heads, dim)`` memory order, so attention returns the traced layout and the
    wrapper copies nothing after it (a per-call copy of every layer's output before)."""
    def f(x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        q = (x * 2).view(2, 8, 3, 5).transpose(1, 2)  # strides (120, 5, 15, 1)
        out = F.scaled_dot_product_attention(q, k, k)
        return out.transpose(1, 2).reshape(2, 8, 15)

    torch.manual_seed(0)
    inputs = [torch.randn(2, 8, 15), torch.randn(2, 3, 8, 5)]
    program = trace(f, inputs)
    lowered = GraphLowering(program).run()
    (attn,) = [n for n in lowered.extern_nodes if "scaled_dot_product" in n.target]
    q = attn.args[0]
    assert isinstance(q, TensorArg) and q.view is not None, attn.args
    assert storage_order(*q.view[:2]) == (0, 2, 1, 3), q.view  # (batch, seq, heads, dim)
    traced = [n for n in program.forward.nodes if "scaled_dot_product" in str(n.target)][0]
    assert attn.result_meta[0] is not None
    assert attn.result_meta[0][2] == tuple(traced.meta[0].strides)
    _, run = compile_fn(f, *inputs)
    (got,) = run(*inputs)
    torch.testing.assert_close(got, f(*inputs), rtol=1e-5, atol=1e-5)

def test_transposed_matmul_operand_is_stored_transposed() -> None:
    """``mm(f(x).t(), g)`` (a weight gradient's shape): the kernel computing ``f(x)``
    writes it in x's order, contiguous reads and writes, and the matmul takes the
    transposed view."""
    def fn(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return torch.mm(torch.tanh(x * 2).t(), g)

    x, g = torch.randn(64, 32), torch.randn(64, 16)
    program = trace(fn, [x, g])
    lowered = GraphLowering(program).run()
    steps = schedule(lowered)
    (kernel,) = [s.kernel for s in steps if isinstance(s, KernelStep)]
    (store,) = [s for s in kernel.body if isinstance(s, Store)]
    info = lowered.buffers[store.buffer]
    assert (info.sizes, info.strides) == ((64, 32), (32, 1))  # row-major in x's order
    (mm,) = [s for s in steps if isinstance(s, ExternCall)]
    operand = mm.args[0]
    assert isinstance(operand, TensorArg)
    assert operand.view == ((32, 64), (1, 32), 0)  # the transposed view
    _, run = compile_fn(fn, x, g)
    torch.testing.assert_close(run(x, g)[0], fn(x, g))


def test_storage_order_of_symbolic_sizes() -> None:
    """A strided convolution's channels-last result over symbolic H, W: the sizes are
    ``(h - 1)//2 + 1`` and the strides their expanded products; they are dense in
    N, H, W, C order (compared by value, not by how sympy happens to write them)."""
    from ember.inductor.loop_ir.symbolic_index import as_size, size_symbol
    from ember.inductor.lowering.layout import channels_last_strides, is_dense, same_layout

    s0, s2, s3 = (size_symbol(n) for n in ("s0", "s2", "s3"))
    h = as_size((s2 - 1) // 2 + 1)
    w = as_size((s3 - 1) // 2 + 1)
    sizes = (s0, 16, h, w)
    strides = tuple(as_size(x) for x in (16 * h * w, 1, 16 * w, 16))
    assert storage_order(sizes, strides) == (0, 2, 3, 1)
    assert is_dense(sizes, strides)
    assert is_channels_last(sizes, strides)
    assert same_layout(sizes, channels_last_strides(sizes), strides)
    assert storage_order(sizes, (16 * h * w + 1, 1, 16 * w, 16)) is None  # a gap


def test_symbolic_convolution_consumers_loop_in_storage_order() -> None:
    """The pointwise kernel after a stride-2 convolution over symbolic N, H, W stores its
    channels-last result sequentially: its buffer is laid out N, H, W, C like the
    static compile's (it was computed in logical order, strided, 10x slower on the
    H200)."""
    from ember.runtime.ir import InputSpec
    from ember.runtime.tracing import GraphRecorder

    def fn(x: torch.Tensor, w: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        y = torch.relu(F.conv2d(x, w, stride=2, padding=1)) * 2
        return F.conv2d(y, w2, padding=1)

    x, w, w2 = torch.randn(2, 3, 9, 10), torch.randn(16, 3, 3, 3), torch.randn(4, 16, 3, 3)
    rec = GraphRecorder(dynamic=True)
    fx = rec.add_input(x, InputSpec("x"), dynamic_dims={0: (2, None), 2: (2, None),
                                                        3: (2, None)})
    fw = rec.add_input(w, InputSpec("w"))
    fw2 = rec.add_input(w2, InputSpec("w2"))
    with rec:
        out = fn(fx, fw, fw2)
    program = rec.finish([out])
    program.dialect = "core-functional"
    lowered = GraphLowering(program).run()
    second = [n for n in lowered.nodes
              if isinstance(n, ExternCall) and n.target == "aten::convolution.default"][1]
    arg = second.args[0]
    assert isinstance(arg, TensorArg) and arg.view is not None, arg
    info = lowered.buffers[arg.buffer]
    assert info.sizes[-1] == 16 and info.strides[-1] == 1, info  # stored N, H, W, C
    kernel = next(n for n in lowered.nodes if getattr(n, "name", None) == arg.buffer)
    assert kernel.sizes == info.sizes  # the kernel loops over the stored order


def test_a_transposed_matmul_operand_is_a_view_of_the_value_computed_anyway() -> None:
    """A qkv projection's backward: the concatenated gradient feeds ``dX = g @ W`` and,
    transposed, ``dW = gᵀ @ x``. Both matmuls read one buffer (the weight gradient takes
    its transposed view), not the gradient and a transposed copy of it."""
    from ember.aot.stage import AotStage
    from ember.frontend import capture

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        q, k, v = (x @ w.t()).split(16, -1)
        return (q * k).tanh() + v

    torch.manual_seed(0)
    x, w = torch.randn(32, 16, requires_grad=True), torch.randn(48, 16, requires_grad=True)
    program = AotStage().run(capture(f, x, w), {})
    lowered = GraphLowering(program, "backward").run()
    grads = [b for b in lowered.buffers.values() if b.kind == "computed" and b.sizes in (
        (32, 48), (48, 32))]
    assert len(grads) == 1, grads
    matmuls = [n for n in lowered.nodes if isinstance(n, ExternCall)
               and n.target == "aten::mm.default"]
    assert len(matmuls) == 2 and all(grads[0].name in n.reads for n in matmuls)
    from ember.runtime.config import patch
    from ember.runtime.pipeline import compile_program

    with patch(program_cache=False):
        fn = compile_program(capture(f, x, w), "inductor")
    torch.autograd.backward(fn([x, w])[0].sum())
    got = [x.grad, w.grad]
    x.grad = w.grad = None
    f(x, w).sum().backward()
    for a, e in zip(got, [x.grad, w.grad]):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)


def test_a_fallback_gets_its_operands_in_their_traced_layout() -> None:
    """``view_as_complex`` (no lowering: a fallback) of ``clone(expand(g))`` (the backward
    of ``view_as_real(...).sum(-1)``): the lowering elides the clone's copy, and the op,
    given the expanded view (last stride 0), raised "Tensor must have a last dimension
    with stride 1". A fallback now gets each operand in the layout eager gave it."""
    def f(g: torch.Tensor) -> torch.Tensor:
        pair = g.unsqueeze(-1).expand(4, 16, 2).clone()
        return torch.view_as_real(torch.view_as_complex(pair) * (1 + 2j))

    inputs = [torch.randn(4, 16)]
    lowered = GraphLowering(trace(f, inputs)).run()
    (call,) = [n for n in lowered.extern_nodes if "view_as_complex" in n.target]
    operand = call.args[0]
    assert isinstance(operand, TensorArg)
    assert operand.view is None or operand.view[1][-1] == 1, operand.view
    _, run = compile_fn(f, *inputs)
    (got,) = run(*inputs)
    torch.testing.assert_close(got, f(*inputs))
