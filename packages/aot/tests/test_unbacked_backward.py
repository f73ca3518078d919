"""Training through data-dependent (unbacked) sizes: the forward binds ``u0`` from an
``.item()`` (``int(u0)``) or a data-dependent op (boolean-mask indexing), and the
backward graph needs it too (a slice's, view's, reduction's or ``cat``'s backward pads,
expands or splits by it). The backward has no op that computes it, so the forward saves
a zero-byte carrier ``[u0, 0]`` whose plain size binds it
(:mod:`ember.aot.partition.shape_symbols`). Each program is compiled once and compared
with eager (values and gradients) over several data values, one of them giving a size 0.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from ember.aot.partition.shape_symbols import unbound_symbols
from ember.aot.pipeline import aot_compile
from ember.runtime.callable import ProgramCallable
from ember.runtime.ir import (
    Graph,
    InputSpec,
    Node,
    Program,
    ScalarMeta,
    SymbolRange,
    TensorMeta,
    ValueRef,
    print_program,
    verify,
)
from ember.runtime.ir.graph import SymExpr
from ember.runtime.tracing import GraphRecorder


def _capture(fn: Callable[..., torch.Tensor], inputs: Sequence[torch.Tensor]) -> Program:
    """A symbolic capture (``.item()`` and masks give unbacked symbols); input sizes stay
    static."""
    rec = GraphRecorder(dynamic=True)
    fakes = [rec.add_input(t, InputSpec(f"in{i}")) for i, t in enumerate(inputs)]
    with rec:
        out = fn(*fakes)
    return rec.finish([out])


def item_slice(w: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    # the reproducer: u0 = pos.max(), the slice is u1 = (u0+4)//4 long; the backward
    # reshapes the [1, 4*u1, 8] tangent back to [4, u1, 8] and pads it into w
    n: Any = (pos.max().item() + 4) // 4
    torch._check(n >= 1)  # type: ignore[no-untyped-call]
    torch._check(n <= 4)  # type: ignore[no-untyped-call]
    return torch.cat([w[:, :n]], dim=-1).reshape(1, -1, 8) * 2


def item_view_sum(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    # u0 only in the view's backward: the scalar tangent is expanded to [u0, 60//u0]
    k: Any = n.item()
    return (x.view(k, -1) * 2).sum()


def item_slice_mean(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    # a reduction's backward: mean over u1 = min(u0, 8) rows expands and scales by it
    k: Any = n.item()
    return x[:k].mean(0)


def two_items(x: torch.Tensor, y: torch.Tensor, a: torch.Tensor,
              b: torch.Tensor) -> torch.Tensor:
    # two unbacked symbols: the tangent is [u2+u3, 3], neither is a plain size
    i: Any = a.item()
    j: Any = b.item()
    return torch.cat([x[:i], y[:j]]) * 3


def mask_sum(x: torch.Tensor) -> torch.Tensor:
    # nonzero-style: the scalar tangent is expanded back to the mask's [u0]
    return (x[x > 0] * 2).sum()


def mask_cat(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.cat([x[x > 0], y[y > 0]]) * 2


def _grad(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, requires_grad=True)


def _items(*values: int, shape: tuple[int, ...]) -> list[torch.Tensor]:
    """A tensor that requires grad of ``shape``, then one int tensor per value."""
    return [_grad(*shape), *(torch.tensor(v) for v in values)]


def _calls(make: Callable[..., list[torch.Tensor]], *args: Any,
           **kwargs: Any) -> list[Callable[[], list[torch.Tensor]]]:
    """One call per argument of ``args``: ``make(*arg, **kwargs)``."""
    return [functools.partial(make, *(a if isinstance(a, tuple) else (a,)), **kwargs)
            for a in args]


def _two_items_inputs(a: int, b: int) -> list[torch.Tensor]:
    return [_grad(6, 3), _grad(5, 3), torch.tensor(a), torch.tensor(b)]


def _positions(n: int) -> list[torch.Tensor]:
    """``item_slice``'s inputs: its slice is ``(n - 1 + 4) // 4`` long."""
    return [_grad(4, 4, 8), torch.arange(n)]


def _negative(*shape: int) -> torch.Tensor:
    """No element > 0: a mask selects nothing (size 0)."""
    return (-torch.rand(*shape) - 0.1).requires_grad_(True)


# name, function, inputs for each call (the first is captured)
CASES: list[tuple[str, Callable[..., torch.Tensor], list[Callable[[], list[torch.Tensor]]]]] = [
    ("item_slice", item_slice, _calls(_positions, 16, 3, 9, 13)),
    ("item_view_sum", item_view_sum, _calls(_items, 4, 6, 2, 5, shape=(20, 3))),
    ("item_slice_mean", item_slice_mean, _calls(_items, 3, 5, 1, 8, 0, shape=(8, 3))),
    ("two_items", two_items, _calls(_two_items_inputs, (3, 2), (5, 0), (0, 4), (6, 5))),
    ("mask_sum", mask_sum, [lambda: [_grad(7, 4)], lambda: [_grad(7, 4)],
                            lambda: [_negative(7, 4)]]),
    ("mask_cat", mask_cat, [lambda: [_grad(6), _grad(5)], lambda: [_negative(6), _grad(5)],
                            lambda: [_grad(6), _negative(5)], lambda: [_grad(6), _grad(5)]]),
]


@pytest.mark.parametrize("name,fn,calls", CASES, ids=[c[0] for c in CASES])
def test_one_compile_gives_eager_values_and_gradients(
        name: str, fn: Callable[..., torch.Tensor],
        calls: list[Callable[[], list[torch.Tensor]]]) -> None:
    torch.manual_seed(0)
    program = aot_compile(_capture(fn, calls[0]()))
    verify(program, "core-functional")
    backward = program.graphs["backward"]
    assert any(r.hint is None for r in backward.symbols.values()), backward.symbols
    run = ProgramCallable(program)
    for i, make in enumerate(calls):
        torch.manual_seed(i)
        inputs = make()
        expected = fn(*inputs)
        (actual,) = run(list(inputs))
        torch.testing.assert_close(actual, expected, equal_nan=True, msg=f"call {i}")
        wrt = [t for t in inputs if t.requires_grad]
        tangent = torch.randn_like(expected)
        torch.testing.assert_close(torch.autograd.grad(actual, wrt, tangent),
                                   torch.autograd.grad(expected, wrt, tangent),
                                   equal_nan=True, msg=f"call {i}")


def _text(program: Program) -> str:
    graphs = {name: dataclasses.replace(g, nodes=[dataclasses.replace(n, source=None)
                                                  for n in g.nodes])
              for name, g in program.graphs.items()}
    return print_program(dataclasses.replace(program, graphs=graphs, metadata={}))


ITEM_SLICE = """\
graph backward(
    %saved_sizes_for_backward_u0: u8[u0, 0]{1,1} cpu,
    %tangent_0: f32[1, 4*(u0//4)+4, 8]{"8*Max(1, 4*(u0//4)+4)",8,1} cpu,
):
  symbols u0 in [0, 15]
  %mul_1: f32[1, 4*(u0//4)+4, 8]{"8*Max(1, 4*(u0//4)+4)",8,1} cpu = \
aten::mul.Tensor(%tangent_0, 2)
  %view_1: f32[4, u0//4+1, 8]{"8*Max(1, u0//4+1)",8,1} cpu = aten::view.default(%mul_1, \
[4, sym(u0//4+1), 8])
  %slice_1: f32[4, u0//4+1, 8]{"8*Max(1, u0//4+1)",8,1} cpu = aten::slice.Tensor(%view_1, \
2, 0, 8)
  %full: f32[4, 4, 8]{32,8,1} cpu = aten::full.default([4, 4, 8], 0, dtype=torch.float32, \
layout=torch.strided, device=device("cpu"), pin_memory=False)
  %alias: f32[4, 4, 8]{32,8,1} cpu = aten::alias.default(%full)
  %slice_scatter: f32[4, 4, 8]{32,8,1} cpu = aten::slice_scatter.default(%alias, %slice_1, \
1, 0, sym(u0//4+1))
  return (%slice_scatter)  [gradient in0]
"""


def test_the_backward_binds_each_unbacked_symbol_from_a_saved_carrier() -> None:
    # u0 (the .item()) is bound in the forward only; the backward's reshape and pad need
    # it: it comes from a zero-byte [u0, 0] carrier (strides (1, 1) for every value, 0
    # included). The slice's length is (u0 + 4)//4 over u0's checked range [0, 15]: the
    # re-trace knows that range, so the length is no symbol of its own (it was u1, with
    # a carrier of its own and u0 widened to [0, inf])
    program = aot_compile(_capture(item_slice, [_grad(4, 4, 8), torch.arange(16)]))
    verify(program, "core-functional")
    text = _text(program)
    forward, backward = text.split("\ngraph backward")
    assert ('  %sizes_for_backward_u0: u8[u0, 0]{1,1} cpu = aten::empty.memory_format('
            '[sym(u0), 0], dtype=torch.uint8, device=device("cpu"))') in forward, text
    assert forward.rstrip().endswith(
        "return (%mul, %sizes_for_backward_u0)  [user_output, "
        "saved_tensor saved_sizes_for_backward_u0]"), text
    assert "graph backward" + backward == ITEM_SLICE, text
    aot = program.metadata["aot"]
    assert isinstance(aot, dict) and aot["saved_bytes"] == 0


def test_backed_symbols_share_one_carrier_and_unbacked_ones_get_their_own() -> None:
    # s0 (a symbolic input size) and u0 (a mask's count): the tangent is [s0+u0]
    rec = GraphRecorder(dynamic=True)
    a = rec.add_input(_grad(4), InputSpec("in0"), dynamic_dims={0: (2, None)})
    y = rec.add_input(_grad(7), InputSpec("in1"))
    with rec:
        out = torch.cat([a, y[y > 0]]) * 2
    program = aot_compile(rec.finish([out]))
    verify(program, "core-functional")
    placeholders = [(p.name, p.meta) for p in program.graphs["backward"].placeholders]
    carriers = [(name, meta.sizes, meta.strides) for name, meta in placeholders
                if name.startswith("saved_sizes") and isinstance(meta, TensorMeta)]
    assert carriers == [("saved_sizes_for_backward", ("s0", 0), (1, 1)),
                        ("saved_sizes_for_backward_u0", ("u0", 0), (1, 1))], placeholders
    run = ProgramCallable(program)
    for n, y_value in ((5, _grad(7)), (3, _negative(7))):
        x = _grad(n)
        (actual,) = run([x, y_value])
        expected = torch.cat([x, y_value[y_value > 0]]) * 2
        torch.testing.assert_close(actual, expected)
        tangent = torch.randn_like(expected)
        torch.testing.assert_close(torch.autograd.grad(actual, [x, y_value], tangent),
                                   torch.autograd.grad(expected, [x, y_value], tangent))


def _tensor(*sizes: int | str) -> TensorMeta:
    strides = tuple(1 for _ in sizes)
    return TensorMeta(torch.float32, sizes, strides, torch.device("cpu"))


def test_unbound_symbols_reads_the_graph_in_order() -> None:
    # a result with u0 as a plain size binds it only for later nodes, and not when its
    # own arguments need u0 (a view to [sym(u0), 4] computes nothing: it reads u0)
    graph = Graph(symbols={"u0": SymbolRange(0), "u1": SymbolRange(0), "u2": SymbolRange(0)})
    graph.nodes = [
        Node("g", "placeholder", "g", meta=_tensor("4*u0")),
        Node("view", "call", "aten::view.default", (ValueRef("g"), (SymExpr("u0"), 4)),
             meta=_tensor("u0", 4)),
        Node("nz", "call", "aten::nonzero.default", (ValueRef("g"),), meta=_tensor("u1", 1)),
        Node("ones", "call", "aten::ones.default", ((SymExpr("u1"),),), meta=_tensor("u1")),
        Node("item", "call", "aten::_local_scalar_dense.default", (ValueRef("g"),),
             meta=ScalarMeta("int", "u2")),
        Node("zeros", "call", "aten::zeros.default", ((SymExpr("u2"),),), meta=_tensor("u2")),
        Node("output", "output", "output", ((ValueRef("view"), ValueRef("ones"),
                                             ValueRef("zeros")),)),
    ]
    assert unbound_symbols(graph) == {"u0"}
    graph.nodes.insert(0, Node("c", "placeholder", "c", meta=_tensor("u0", 0)))
    assert unbound_symbols(graph) == set()
