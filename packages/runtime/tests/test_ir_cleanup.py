"""The shared graph toolkit (ember.runtime.ir.cleanup, op_queries, TensorMeta.numel):
one rule set for every stage. The cases marked "old aot" / "old inductor" are where the
two stages' private copies disagreed before."""

from __future__ import annotations

import math
import struct

import pytest
import torch
from ember.runtime.interpreter import run_program
from ember.runtime.ir import (
    Graph,
    InputKind,
    Node,
    Program,
    TensorMeta,
    ValueRef,
    drop_unreferenced_tensors,
    eliminate_common_subexpressions,
    eliminate_dead_code,
    has_side_effects,
    is_pure,
    is_random,
    is_view,
    parse_program,
    print_graph,
    verify,
    writes_arguments,
)
from ember.runtime.ir.cleanup import argument_key
from handbuilt import ProgramBuilder


def _calls(graph: Graph) -> list[str]:
    return [n.target for n in graph.nodes if n.op == "call"]


def _negative_nan() -> float:
    value: float = struct.unpack("<d", struct.pack("<Q", 0xFFF8000000000000))[0]
    return value


# -- op queries --------------------------------------------------------------------------

@pytest.mark.parametrize(("target", "pure", "random", "effects"), [
    ("aten::add.Tensor", True, False, False),
    ("aten::view.default", True, False, False),
    ("aten::rand_like.default", False, True, False),
    ("aten::bernoulli.p", False, True, False),
    ("aten::add_.Tensor", False, False, True),            # writes self
    ("aten::_assert_async.msg", False, False, True),      # old aot: removed when unused
    ("aten::_functional_assert_async.msg", False, False, True),  # old inductor: pure
    ("aten::_print.default", False, False, True),
    ("aten::sym_constrain_range.default", False, False, True),
])
def test_op_queries(target: str, pure: bool, random: bool, effects: bool) -> None:
    assert (is_pure(target), is_random(target), has_side_effects(target)) == (
        pure, random, effects)


def test_an_unknown_operator_is_never_pure() -> None:
    assert has_side_effects("nope::missing.default")
    assert not is_pure("nope::missing.default")


def test_view_and_write_queries() -> None:
    assert is_view("aten::view.default") and is_view("aten::permute.default")
    assert not is_view("aten::add.Tensor")
    assert not is_view("aten::add_.Tensor")  # returns self written, not a view
    assert writes_arguments("aten::add_.Tensor") and not writes_arguments("aten::add.Tensor")


# -- TensorMeta.numel / nbytes ----------------------------------------------------------

def test_numel_and_nbytes() -> None:
    meta = TensorMeta.of(torch.empty(3, 4, dtype=torch.float16))
    assert (meta.is_static, meta.numel, meta.nbytes) == (True, 12, 24)
    assert TensorMeta.of(torch.empty(0, 5)).numel == 0
    assert TensorMeta.of(torch.tensor(1.0, dtype=torch.float64)).nbytes == 8


def test_numel_of_symbolic_sizes_is_an_error() -> None:
    meta = TensorMeta(torch.float32, ("s0", 4), (4, 1), torch.device("cpu"))
    assert not meta.is_static
    with pytest.raises(ValueError, match="size 's0' is symbolic"):
        _ = meta.numel
    with pytest.raises(ValueError, match="symbolic"):
        _ = meta.nbytes


# -- dead-code elimination --------------------------------------------------------------

def test_dce_drops_unused_pure_calls_and_constants() -> None:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3))
    pb.get_attr("unused.w", torch.randn(3))
    c = pb.call("aten::cos.default", x)
    pb.call("aten::mul.Tensor", c, 2.0)
    s = pb.call("aten::sin.default", x)
    graph = eliminate_dead_code(pb.finish(s).forward)
    assert _calls(graph) == ["aten::sin.default"]
    assert [n.op for n in graph.nodes] == ["placeholder", "call", "output"]


def test_dce_keeps_an_unused_random_call() -> None:
    # old aot: removed it, so every later random call drew other numbers than eager's
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3))
    pb.call("aten::rand_like.default", x)
    r = pb.call("aten::rand_like.default", x)
    graph = eliminate_dead_code(pb.finish(r).forward)
    assert _calls(graph) == ["aten::rand_like.default"] * 2


def test_dce_keeps_unused_asserts_and_writes() -> None:
    # old aot: removed both (its graphs were assumed functional and assert-free)
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3))
    positive = pb.call("aten::gt.Scalar", x, -100.0)
    every = pb.call("aten::all.default", positive)
    pb.call("aten::_assert_async.msg", every, "x is too small")
    buf = pb.input(torch.zeros(3), InputKind.BUFFER, "buf")
    pb.call("aten::add_.Tensor", buf, x)
    y = pb.call("aten::neg.default", x)
    graph = eliminate_dead_code(pb.finish(y).forward)
    assert _calls(graph) == ["aten::gt.Scalar", "aten::all.default",
                             "aten::_assert_async.msg", "aten::add_.Tensor",
                             "aten::neg.default"]


def test_dce_keeps_calls_of_unknown_operators() -> None:
    program = ProgramBuilder().finish()
    unknown = Node("u", "call", "nope::missing.default")
    graph = Graph([unknown, *program.forward.nodes])
    assert eliminate_dead_code(graph).nodes[0].name == "u"


# -- common-subexpression elimination ---------------------------------------------------

def _cse_of(*scalars: object) -> Graph:
    """``x + s`` for each scalar, all stacked into the one result (returned values
    themselves are never merged: test_cse_keeps_returned_equal_values_apart)."""
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3))
    outs = [pb.call("aten::add.Tensor", x, s) for s in scalars]
    return eliminate_common_subexpressions(
        pb.finish(pb.call("aten::stack.default", outs)).forward)


def test_cse_merges_equal_pure_calls_and_rewrites_uses() -> None:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3))
    a, b = pb.call("aten::sin.default", x), pb.call("aten::sin.default", x)
    graph = eliminate_common_subexpressions(pb.finish(pb.call("aten::mul.Tensor", a, b)).forward)
    assert _calls(graph) == ["aten::sin.default", "aten::mul.Tensor"]
    assert graph.nodes[2].args == (a, a)


def test_cse_tells_apart_argument_types() -> None:
    assert _calls(_cse_of(1, 1.0, True)).count("aten::add.Tensor") == 3
    assert _calls(_cse_of(2.5, 2.5)).count("aten::add.Tensor") == 1


def test_cse_tells_apart_signed_zeros() -> None:
    # old inductor: merged them (0.0 == -0.0), but -0.0 + -0.0 is -0.0 and -0.0 + 0.0 is 0.0
    graph = _cse_of(0.0, -0.0)
    assert _calls(graph).count("aten::add.Tensor") == 2


def test_cse_merges_nan_by_bit_pattern() -> None:
    assert _calls(_cse_of(math.nan, float("nan"))).count("aten::add.Tensor") == 1
    # old inductor and old aot: merged every NaN; NaNs of other bits stay apart
    assert _calls(_cse_of(math.nan, _negative_nan())).count("aten::add.Tensor") == 2
    assert argument_key(complex(math.nan, 0.0)) == argument_key(complex(math.nan, 0.0))
    assert argument_key(complex(0.0, -0.0)) != argument_key(complex(0.0, 0.0))


def test_cse_never_merges_random_or_impure_calls() -> None:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3))
    r1, r2 = pb.call("aten::rand_like.default", x), pb.call("aten::rand_like.default", x)
    buf = pb.input(torch.zeros(3), InputKind.BUFFER, "buf")
    pb.call("aten::add_.Tensor", buf, x)
    pb.call("aten::add_.Tensor", buf, x)
    graph = eliminate_common_subexpressions(pb.finish(r1, r2).forward)
    assert _calls(graph) == ["aten::rand_like.default"] * 2 + ["aten::add_.Tensor"] * 2


def test_cse_keyword_order_does_not_matter() -> None:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3))
    a = pb.call("aten::sum.dim_IntList", x, dim=(0,), keepdim=True)
    b = pb.call("aten::sum.dim_IntList", x, keepdim=True, dim=(0,))
    c = pb.call("aten::sum.dim_IntList", x, keepdim=False, dim=(0,))
    total = pb.call("aten::add.Tensor", a, b)
    graph = eliminate_common_subexpressions(pb.finish(total, c).forward)
    assert _calls(graph) == ["aten::sum.dim_IntList", "aten::sum.dim_IntList",
                             "aten::add.Tensor"]
    assert graph.nodes[-2].args == (a, a)


def test_cse_maps_every_result_of_a_multi_result_call() -> None:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(2, 3))
    m1, m2 = pb.call("aten::max.dim", x, 1), pb.call("aten::max.dim", x, 1)
    total = pb.call("aten::add.Tensor", ValueRef(m1.node, 0), ValueRef(m2.node, 0))
    graph = eliminate_common_subexpressions(pb.finish(total, ValueRef(m2.node, 1)).forward)
    assert _calls(graph) == ["aten::max.dim", "aten::add.Tensor"]
    assert graph.nodes[-2].args == (ValueRef(m1.node, 0), ValueRef(m1.node, 0))
    assert graph.output_values == (total, ValueRef(m1.node, 1))


def test_cse_keeps_returned_equal_values_apart() -> None:
    # two equal zeros (a state list live at a graph break, which the next graph writes
    # in place: RWKV's under autocast) were merged, so the caller got one buffer twice
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3))
    zeros = [pb.call("aten::zeros.default", [3], device=torch.device("cpu"))
             for _ in range(4)]
    inner = pb.call("aten::add.Tensor", zeros[0], x)  # read only inside: merged
    views = [pb.call("aten::slice.Tensor", z, 0, 0, 2) for z in zeros[2:]]
    graph = eliminate_common_subexpressions(pb.finish(inner, zeros[1], *views).forward)
    assert _calls(graph).count("aten::zeros.default") == 3
    outputs = graph.output_values
    assert len({outputs[1].node, *(v.node for v in outputs[2:])}) == 3
    bases = {n.name: n.args[0] for n in graph.nodes if n.target == "aten::slice.Tensor"}
    assert len({outputs[1], *(bases[v.node] for v in outputs[2:])}) == 3


def test_cleanups_leave_their_input_alone() -> None:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3))
    a, b = pb.call("aten::sin.default", x), pb.call("aten::sin.default", x)
    pb.call("aten::cos.default", x)
    program = pb.finish(pb.call("aten::mul.Tensor", a, b))
    before = print_graph(program.forward)
    eliminate_dead_code(eliminate_common_subexpressions(program.forward))
    assert print_graph(program.forward) == before


UNBACKED = """program dialect=aten

graph forward(%x: f32[5, 3]{3,1} cpu):
  symbols u0 in [0, 5], u1 in [0, 5], u2 in [0, 15]
  guard u0 == u1
  %gt: bool[5, 3]{3,1} cpu = aten::gt.Scalar(%x, 0)
  %select: bool[5]{3} cpu = aten::select.int(%gt, 1, 0)
  %index: f32[u0, 3]{3,1} cpu = aten::index.Tensor(%x, [%select])
  %t: f32[3, u0]{1,3} cpu = aten::t.default(%index)
  %index_1: f32[u1, 3]{3,1} cpu = aten::index.Tensor(%x, [%select])
  %mm: f32[3, 3]{3,1} cpu = aten::mm.default(%t, %index_1)
  %nonzero: i64[u2, 2]{1,u2} cpu = aten::nonzero.default(%x)
  %ones: f32[u2, 2]{2,1} cpu = aten::ones.default([sym(u2), 2], device=device("cpu"), pin_memory=False)
  return (%mm, %ones)  [user_output, user_output]
"""


def test_cleanups_keep_the_calls_that_bind_unbacked_sizes() -> None:
    # CSE merged the second mask's index (binding u1, read by the guard) into the first,
    # and DCE dropped the nonzero whose count sizes ones(): "nothing binds it"
    program = parse_program(UNBACKED)
    graph = eliminate_dead_code(eliminate_common_subexpressions(program.forward))
    names = [n.name for n in graph.nodes]
    assert "index_1" in names and "nonzero" in names, names
    program.graphs["forward"] = graph
    verify(program)
    x = torch.zeros(5, 3)
    x[:2] = 1
    mm, ones = run_program(program, [x])  # type: ignore[arg-type]
    torch.testing.assert_close(mm, x[:2].t() @ x[:2])
    assert ones.shape == (6, 2)  # the 6 nonzero elements


# -- unreferenced tensors -----------------------------------------------------------------

def test_drop_unreferenced_tensors_keeps_what_nodes_and_inputs_name() -> None:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3))
    w = pb.input(torch.randn(3), InputKind.PARAMETER, "fc.weight")
    c = pb.get_attr("c", torch.ones(3), op="constant")
    out = pb.call("aten::mul.Tensor", pb.call("aten::add.Tensor", x, w), c)
    program = pb.finish(out)
    program.tensors["folded.away"] = torch.zeros(2)
    result = drop_unreferenced_tensors(program)
    assert sorted(result.tensors) == ["c", "fc.weight"]
    assert "folded.away" in program.tensors  # the input program is unchanged
    assert isinstance(result, Program) and result.forward == program.forward
