"""Custom operators in the IR: which arguments a call mutates, the fresh-buffer rule of
``core-functional`` (ir/fresh_writes.py), CSE keeping written copies apart, and the
error for a loaded program whose operator this process has not registered."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from ember.runtime.ir import (
    IRFormatError,
    Node,
    Program,
    ValueRef,
    VerificationError,
    eliminate_common_subexpressions,
    load,
    print_graph,
    save,
    verify,
)
from ember.runtime.ir.op_queries import mutated_arguments
from handbuilt import ProgramBuilder

_LIB = torch.library.Library("ember_rules_test", "FRAGMENT")  # noqa: TOR901
_LIB.define("scale_(Tensor(a!) x, float k) -> ()")
_LIB.define("pair_(Tensor(a!) x, Tensor? y, *, Tensor(b!)? out=None) -> ()")
_LIB.define("many_(Tensor(a!)[] xs) -> ()")
_LIB.define("twice(Tensor x) -> Tensor")
_LIB.impl("scale_", lambda x, k: None if x.mul_(k) is None else None,
          "CompositeExplicitAutograd")
_LIB.impl("twice", lambda x: x * 2, "CompositeExplicitAutograd")


def _call(target: str, *args: object, **kwargs: object) -> Node:
    return Node("n", "call", target, tuple(args), dict(kwargs))  # type: ignore[arg-type]


def test_mutated_arguments_reads_the_schema_alias_annotations() -> None:
    x, y = ValueRef("x"), ValueRef("y")
    assert mutated_arguments(_call("ember_rules_test::scale_.default", x, 2.0)) == (0,)
    # a keyword-only written argument counts when it is passed, not when omitted
    assert mutated_arguments(_call("ember_rules_test::pair_.default", x, y)) == (0,)
    assert mutated_arguments(_call("ember_rules_test::pair_.default", x, None, out=y)) == (0, 2)
    assert mutated_arguments(_call("ember_rules_test::many_.default", (x, y))) == (0,)
    assert mutated_arguments(_call("ember_rules_test::twice.default", x)) == ()
    assert mutated_arguments(_call("aten::add_.Tensor", x, y)) == (0,)


def _fresh_write(source: str = "clone", read_before: bool = False) -> Program:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3))
    if source == "clone":
        c = pb.call("aten::clone.default", x)
    elif source == "input":
        c = x
    else:
        c = pb.call("aten::sin.default", x)
    if read_before:
        pb.call("aten::cos.default", c)
    pb.call("ember_rules_test::scale_.default", c, 2.0)
    return pb.finish(pb.call("aten::neg.default", c))


def test_core_functional_accepts_a_custom_op_writing_a_fresh_clone() -> None:
    verify(_fresh_write(), "core-functional")


@pytest.mark.parametrize(("kind", "read_before", "message"), [
    ("input", False, "(ember_rules_test::scale_.default): writes %arg0, a graph input; a "
                     "custom operator may write only a fresh buffer (the result of "
                     "aten::clone.default or "),
    ("sin", False, "writes %v1, the result of aten::sin.default"),
    ("clone", True, "writes %v1, which %v2 reads before the write"),
])
def test_core_functional_refuses_other_writes(kind: str, read_before: bool,
                                              message: str) -> None:
    program = _fresh_write(kind, read_before)
    verify(program, "aten")
    with pytest.raises(VerificationError, match=re.escape(message)):
        verify(program, "core-functional")


def test_cse_keeps_two_written_clones_apart() -> None:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3))
    a = pb.call("aten::clone.default", x)
    b = pb.call("aten::clone.default", x)
    pb.call("ember_rules_test::scale_.default", a, 2.0)
    program = pb.finish(pb.call("aten::add.Tensor", a, b))
    cleaned = eliminate_common_subexpressions(program.forward)
    assert print_graph(cleaned) == print_graph(program.forward)
    # the same two clones, neither written: merged
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3))
    a = pb.call("aten::clone.default", x)
    b = pb.call("aten::clone.default", x)
    program = pb.finish(pb.call("aten::add.Tensor", a, b))
    assert len(eliminate_common_subexpressions(program.forward).nodes) == 4


def test_loading_a_program_whose_custom_op_is_not_registered(tmp_path: Path) -> None:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3))
    program = pb.finish(pb.call("ember_rules_test::twice.default", x))
    path = tmp_path / "p.ember"
    save(program, path)
    assert load(path, trusted=True) == program  # registered here: it round trips
    # the same program naming an operator this process never registered
    next(n for n in program.forward.nodes if n.op == "call").target = (
        "ember_never_registered::twice.default")
    save(program, path)
    with pytest.raises(IRFormatError, match=re.escape(
            "unknown operator 'ember_never_registered::twice.default': the custom operator "
            "namespace 'ember_never_registered' has no such operator in this process. "
            "Import the module that registers it")):
        load(path, trusted=True)


_LIB.define("nometa(Tensor x) -> Tensor")  # as a C++ op with a CPU kernel only
_LIB.impl("nometa", lambda x: x + 1, "CPU")


@torch.library.custom_op("ember_rules_test::nofake", mutates_args=())
def _nofake(x: torch.Tensor) -> torch.Tensor:
    return x + 1


@pytest.mark.parametrize("target", ["ember_rules_test::nometa", "ember_rules_test::nofake"])
def test_an_operator_without_a_fake_kernel_is_named_with_the_registration_to_add(
        target: str) -> None:
    from ember.runtime.custom_ops import MissingFakeKernelError
    from ember.runtime.tracing import GraphRecorder
    from ember.runtime.ir import InputSpec

    rec = GraphRecorder()
    x = rec.add_input(torch.randn(3), InputSpec("x"))
    op = getattr(torch.ops.ember_rules_test, target.split("::")[1]).default
    with pytest.raises(MissingFakeKernelError, match=re.escape(
            f"custom operator {target}.default has no fake kernel, so its result's shape "
            "is unknown without running it: register one with torch.library.register_fake("
            f"'{target}')")), rec:
        op(x)


@torch.library.custom_op("ember_rules_test::widen", mutates_args=())
def _widen(x: torch.Tensor) -> torch.Tensor:
    return x.double()  # its fake kernel (below) says float32


@_widen.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("ember_rules_test::transposed", mutates_args=())
def _transposed(x: torch.Tensor) -> torch.Tensor:
    return x.t().contiguous().t()  # column-major; its fake kernel says row-major


@_transposed.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@pytest.mark.parametrize(("op", "message"), [
    (_widen, "custom operator ember_rules_test::widen.default: its result has dtype "
             "torch.float64, but its fake kernel said torch.float32. Fix the function "
             "registered with torch.library.register_fake('ember_rules_test::widen')"),
    (_transposed, "custom operator ember_rules_test::transposed.default: its result has "
                  "strides [1, 3], but its fake kernel said [4, 1]"),
])
def test_a_fake_kernel_that_disagrees_with_the_real_result_fails_the_first_run(
        op: object, message: str) -> None:
    from ember.runtime.custom_ops import FakeKernelMismatch
    from ember.runtime.interpreter import Interpreter
    from ember.runtime.tracing import GraphRecorder
    from ember.runtime.ir import InputSpec

    rec = GraphRecorder()
    x = rec.add_input(torch.randn(3, 4), InputSpec("x"))
    with rec:
        y = op(x)  # type: ignore[operator]
    run = Interpreter(rec.finish([y]))
    with pytest.raises(FakeKernelMismatch, match=re.escape(message)):
        run.run(torch.randn(3, 4))
