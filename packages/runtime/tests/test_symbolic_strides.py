"""Symbolic inputs that are views into a larger tensor (:mod:`ember.runtime.tracing_views`):
their strides are expressions of their sizes where they follow them, else ints, and
their storage offset an int; printed placeholders, numerics at several sizes."""

from __future__ import annotations

import torch
from ember.runtime.interpreter import run_program
from ember.runtime.ir import InputSpec, print_graph, verify
from ember.runtime.tracing import GraphRecorder
from ember.runtime.tracing_views import view_strides


def record_heads(qkv: torch.Tensor) -> tuple[str, object]:
    """The printed graph of ``q * 2 + k`` over two heads of ``qkv`` (dims 0, 1 dynamic)."""
    rec = GraphRecorder(dynamic=True)
    q, k = (rec.add_input(t, InputSpec(n), dynamic_dims={0: (2, None), 1: (2, None)})
            for n, t in (("q", qkv[..., :64]), ("k", qkv[..., 64:128])))
    with rec:
        out = q * 2 + k
    program = rec.finish([out])
    verify(program)
    return print_graph(program.forward), program


def test_heads_of_a_fused_projection_get_symbolic_sizes_and_stride_expressions() -> None:
    printed, _ = record_heads(torch.randn(4, 8, 192))
    assert printed.splitlines()[:5] == [
        "graph forward(",
        "    %q: f32[s0, s1, 64]{192*s1,192,1} cpu,",
        "    %k: f32[s0, s1, 64]{192*s1,192,1} cpu offset=64,",
        "):",
        "  symbols s0 in [2, inf] hint=4, s1 in [2, inf] hint=8",
    ]


def test_one_graph_runs_heads_of_every_size() -> None:
    _, program = record_heads(torch.randn(4, 8, 192))
    for b, t in ((2, 3), (5, 8), (7, 11)):
        qkv = torch.randn(b, t, 192)
        q, k = qkv[..., :64], qkv[..., 64:128]
        (out,) = run_program(program, [q, k])  # type: ignore[arg-type]
        torch.testing.assert_close(out, q * 2 + k)


def test_strides_follow_sizes_only_where_the_example_does() -> None:
    # [B, H, T, D] head view of [B, T, 3*H*D]: the gap after D (rows of 3*H*D) is an int,
    # the batch stride is (that row) * T
    base = torch.randn(2, 5, 24)
    head = base[..., :8].view(2, 5, 2, 4).transpose(1, 2)
    assert head.stride() == (120, 4, 24, 1)
    assert view_strides([10, 2, 50, 4], head) == [1200, 4, 24, 1]
    # a dim of size 1 and a broadcast (stride 0) dim keep their ints
    odd = torch.randn(3, 1, 8)[:, :, :4].expand(3, 6, 4)
    assert odd.stride() == (8, 0, 1)
    assert view_strides([30, 60, 4], odd) == [8, 0, 1]
    single = torch.randn(1, 6, 8)[..., :4]
    assert view_strides([1, 9, 4], single) == [48, 8, 1]


def test_a_view_shares_the_symbol_of_an_equal_dim_only_under_the_same_range() -> None:
    # duck sizing done by the recorder itself (torch 2.11 gave each view a symbol of its
    # own, and q @ k.transpose(-1, -2) over two symbols then specialised both)
    qkv = torch.randn(4, 8, 192)
    rec = GraphRecorder(dynamic=True)
    dense = rec.add_input(torch.randn(4, 8, 64), InputSpec("x"), dynamic_dims={0: (2, None)})
    q = rec.add_input(qkv[..., :64], InputSpec("q"), dynamic_dims={0: (2, None)})
    k = rec.add_input(qkv[..., 64:128], InputSpec("k"), dynamic_dims={0: (2, 16)})
    with rec:
        out = (dense + q) @ k.transpose(-1, -2)[:, :, :1].sum(0)
    printed = print_graph(rec.finish([out]).forward).splitlines()
    assert printed[1:4] == ["    %x: f32[s0, 8, 64]{512,64,1} cpu,",
                            "    %q: f32[s0, 8, 64]{1536,192,1} cpu,",
                            "    %k: f32[s1, 8, 64]{1536,192,1} cpu offset=64,"], printed


def test_strides_derivable_follows_the_size_one_strides_too() -> None:
    from ember.runtime.tracing_views import strides_derivable
    base = torch.randn(400)
    assert strides_derivable(base[:32].view(4, 1, 8))                       # (8, 8, 1)
    assert strides_derivable(base.as_strided((4, 1, 8), (8, 1, 1)))         # a constant 1
    assert strides_derivable(torch.randn(4, 1, 8).transpose(1, 2))          # (8, 1, 8)
    assert not strides_derivable(base.as_strided((4, 1, 8), (8, 100, 1)))  # 100: no product
    assert not strides_derivable(base.as_strided((1, 8, 4), (7, 4, 1)))


def record_scaled(x: torch.Tensor, dims: dict[int, tuple[int, int | None]]) -> object:
    rec = GraphRecorder(dynamic=True)
    fake = rec.add_input(x, InputSpec("x"), dynamic_dims=dims)
    with rec:
        out = fake * 2 + 1
    program = rec.finish([out])
    verify(program)
    return program


def test_an_input_dense_but_for_a_size_one_stride_torch_cannot_derive_records() -> None:
    # torch would give the stride 100 of the size-1 dim a symbol of its own (no input
    # size binds it: the capture failed); the recorder keeps the example's int, as eager
    # reads it when it infers a memory format
    base = torch.randn(1000)
    x = base.as_strided((4, 1, 8), (8, 100, 1))
    program = record_scaled(x, {0: (2, None), 2: (2, None)})
    printed = print_graph(program.forward).splitlines()  # type: ignore[attr-defined]
    assert printed[0] == "graph forward(%x: f32[s0, 1, s1]{s1,100,1} cpu):", printed
    for b, n in ((4, 8), (3, 5), (9, 2)):
        y = base.as_strided((b, 1, n), (n, 100, 1))
        (out,) = run_program(program, [y])  # type: ignore[arg-type]
        torch.testing.assert_close(out, y * 2 + 1)
    lead = base.as_strided((1, 8, 4), (7, 4, 1))
    program = record_scaled(lead, {0: (2, None), 1: (2, None), 2: (2, None)})
    printed = print_graph(program.forward).splitlines()  # type: ignore[attr-defined]
    assert printed[0] == "graph forward(%x: f32[1, s0, s1]{7,s1,1} cpu):", printed


def test_a_size_one_stride_decides_the_convolutions_layout_as_in_eager() -> None:
    # [N, 1, H, W] with stride 1 in dim 1 is channels-last to eager's convolution, with
    # stride 100 it is not: the recorded result has eager's strides either way
    weight = torch.randn(4, 1, 3, 3)
    base = torch.randn(1000)
    for strides in ((36, 1, 6, 1), (36, 100, 6, 1)):
        x = base.as_strided((2, 1, 6, 6), strides)
        rec = GraphRecorder(dynamic=True)
        fake = rec.add_input(x, InputSpec("x"), dynamic_dims={0: (2, None)})
        with rec:
            out = torch.nn.functional.conv2d(fake, weight)
        program = rec.finish([out])
        verify(program)
        eager = torch.nn.functional.conv2d(x, weight)
        meta = program.forward.nodes[-2].meta
        assert meta.strides[1:] == eager.stride()[1:], (strides, meta)  # type: ignore[union-attr]
        (got,) = run_program(program, [x])  # type: ignore[arg-type]
        assert got.stride() == eager.stride()
        torch.testing.assert_close(got, eager)
