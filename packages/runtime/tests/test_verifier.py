"""The verifier: one test per rule, each asserting the message names the culprit."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from ember.runtime.ir import (
    Graph,
    InputKind,
    InputSpec,
    Node,
    OutputKind,
    OutputSpec,
    Program,
    ScalarMeta,
    SymbolRange,
    TensorMeta,
    ValueRef,
    VerificationError,
    verify,
)
from ember.runtime.ir.verifier import CORE_FUNCTIONAL_EXTRA_OPS
from handbuilt import ProgramBuilder, mlp_program


def _node(program: Program, name: str) -> Node:
    return program.forward.node(name)


def _rejects(program: Program, pattern: str, dialect: str | None = None) -> None:
    with pytest.raises(VerificationError, match=pattern):
        verify(program, dialect)


def test_well_formed_program_passes_in_aten_and_core_functional() -> None:
    program, _ = mlp_program()
    verify(program)
    verify(program, "core-functional")


def test_duplicate_name_is_rejected() -> None:
    program, _ = mlp_program()
    program.forward.nodes[4].name = "v3"  # two nodes named v3
    _rejects(program, r"graph 'forward', node %v3 .*defined twice")


def test_use_before_definition_is_rejected() -> None:
    program, _ = mlp_program()
    nodes = program.forward.nodes
    nodes[3], nodes[4] = nodes[4], nodes[3]  # addmm now reads t before it is defined
    _rejects(program, r"node %v4 \(aten::addmm.default\): argument #2 reads %v3, "
                      r"which is defined later")


def test_undefined_value_is_rejected() -> None:
    program, _ = mlp_program()
    _node(program, "v5").args = (ValueRef("ghost"), 2.0)
    _rejects(program, r"%v5 .*reads %ghost, which is never defined")


def test_self_reference_cycle_is_rejected() -> None:
    program, _ = mlp_program()
    _node(program, "v5").args = (ValueRef("v5"), 2.0)
    _rejects(program, r"%v5 .*reads %v5")


def test_unknown_opcode_is_rejected() -> None:
    program, _ = mlp_program()
    _node(program, "v5").op = "call_method"
    _rejects(program, r"node %v5: unknown opcode 'call_method'")


def test_unresolvable_operator_is_rejected() -> None:
    program, _ = mlp_program()
    _node(program, "v5").target = "aten::frobnicate.default"
    _rejects(program, r"node %v5 \(aten::frobnicate.default\): unknown operator")


def test_non_ir_argument_is_rejected() -> None:
    program, _ = mlp_program()
    _node(program, "v5").args = (ValueRef("v4"), [2.0])  # a list, not a tuple
    _rejects(program, r"%v5 .*argument #1 is a list, not an IR argument")


def test_tensor_result_without_meta_is_rejected() -> None:
    program, _ = mlp_program()
    _node(program, "v5").meta = None
    _rejects(program, r"%v5 \(aten::relu.default\): produces a tensor but has no TensorMeta")


def test_multi_result_meta_and_index_are_checked() -> None:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(4, 5))
    mx = pb.call("aten::max.dim", x, 1)
    program = pb.finish(ValueRef(mx.node, 1))
    verify(program)
    program.forward.nodes[-1].args = ((ValueRef(mx.node, 2),),)
    _rejects(program, r"node %output: argument #0 reads result 2 of %v1, which has 2 results")
    program.forward.nodes[-1].args = ((ValueRef(mx.node, 0),),)
    _node(program, mx.node).meta = TensorMeta.of(torch.randn(4))
    _rejects(program, r"%v1 \(aten::max.dim\): produces 2 results")


def test_output_must_be_last_and_unique() -> None:
    program, _ = mlp_program()
    nodes = program.forward.nodes
    nodes.insert(2, dataclasses.replace(nodes[-1], name="early_out", args=((ValueRef("x"),),)))
    _rejects(program, r"2 output nodes")
    program, _ = mlp_program()
    program.forward.nodes.pop()
    _rejects(program, r"graph 'forward': the last node must be the output node")


def test_signature_inputs_must_name_placeholders() -> None:
    program, _ = mlp_program()
    program.signature.inputs["forward"][0] = InputSpec("y")
    _rejects(program, r"signature inputs \['y', 'fc_weight', 'fc_bias'\] do not match "
                      r"the placeholders \['x', 'fc_weight', 'fc_bias'\]")
    program.signature.inputs["forward"].pop(0)
    _rejects(program, r"do not match the placeholders")


def test_parameter_input_needs_a_target() -> None:
    program, _ = mlp_program()
    program.signature.inputs["forward"][1] = InputSpec("fc_weight", InputKind.PARAMETER)
    _rejects(program, r"node %fc_weight: a parameter input needs a target name")


def test_signature_outputs_must_count_the_output_values() -> None:
    program, _ = mlp_program()
    program.signature.outputs["forward"].append(OutputSpec())
    _rejects(program, r"signature labels 2 outputs but the graph returns 1")


def test_mutated_input_must_name_a_placeholder() -> None:
    program, _ = mlp_program()
    program.signature.outputs["forward"] = [OutputSpec(OutputKind.MUTATED_INPUT, "nope")]
    _rejects(program, r"output 0 is a mutated input of 'nope', not a placeholder")


def test_signature_for_missing_graph_is_rejected() -> None:
    program, _ = mlp_program()
    program.signature.outputs["backward"] = []
    _rejects(program, r"signature names graph 'backward'")


def test_get_attr_target_must_exist_and_match() -> None:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3))
    w = pb.get_attr("w", torch.randn(3))
    program = pb.finish(pb.call("aten::add.Tensor", x, w))
    verify(program)
    program.tensors["w"] = torch.randn(4)
    _rejects(program, r"node %attr1: meta says torch.float32 \[3\] but "
                      r"program.tensors\['w'\] is torch.float32 \[4\]")
    del program.tensors["w"]
    _rejects(program, r"node %attr1: get_attr target 'w' is not in program.tensors")


def test_placeholder_needs_meta() -> None:
    program, _ = mlp_program()
    _node(program, "x").meta = None
    _rejects(program, r"node %x: a placeholder needs TensorMeta or ScalarMeta")


def test_symbolic_sizes_need_declared_symbols() -> None:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(4, 3))
    program = pb.finish(pb.call("aten::neg.default", x))
    for node in program.forward.nodes[:2]:
        node.meta = dataclasses.replace(node.meta, sizes=("s0", 3), strides=(3, 1))  # type: ignore[type-var]
    _rejects(program, r"size expression 's0' uses symbol 's0', which is not in graph.symbols")
    program.forward.symbols["s0"] = SymbolRange(2, None)
    verify(program)
    program.forward.symbols["s0"] = SymbolRange(5, 4)
    _rejects(program, r"symbol 's0' has an empty range \[5, 4\]")


def test_scalar_placeholder_and_sym_size_pass() -> None:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(4, 3))
    n = pb.input(3)
    s = pb.call("aten::sym_size.int", x, 0)
    program = pb.finish(pb.call("aten::mul.Tensor", x, n), s)
    assert isinstance(_node(program, "arg1").meta, ScalarMeta)
    verify(program, "core-functional")


# -- dialects ------------------------------------------------------------------------


def _inplace_program() -> Program:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3))
    y = pb.call("aten::add_.Tensor", x, 1.0)
    return pb.finish(y)


def test_core_functional_forbids_mutation_but_aten_allows_it() -> None:
    program = _inplace_program()
    verify(program, "aten")
    _rejects(program, r"%v1 \(aten::add_.Tensor\): mutates its argument\(s\) self",
             "core-functional")


def test_core_functional_allows_views() -> None:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(2, 6))
    v = pb.call("aten::view.default", x, (3, 4))
    p = pb.call("aten::permute.default", v, (1, 0))
    e = pb.call("aten::expand.default", pb.call("aten::unsqueeze.default", p, 0), (2, 4, 3))
    verify(pb.finish(e), "core-functional")


def test_core_functional_requires_core_aten() -> None:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(2, 3))
    w = pb.input(torch.randn(4, 3))
    program = pb.finish(pb.call("aten::linear.default", x, w))
    verify(program, "aten")
    _rejects(program, r"%v2 \(aten::linear.default\): is not in the Core ATen opset",
             "core-functional")


def test_core_functional_refuses_prims() -> None:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3))
    program = pb.finish(pb.call("aten::sin.default", x))
    program.forward.node("v1").target = "prims::sin.default"  # (running prims ops is slow)
    _rejects(program, r"prims operators are not allowed", "core-functional")


def test_core_functional_allows_custom_ops_as_opaque_calls() -> None:
    lib = torch.library.Library("ember_verifier_test", "FRAGMENT")  # noqa: TOR901
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CompositeExplicitAutograd")
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3))
    verify(pb.finish(pb.call("ember_verifier_test::twice.default", x)), "core-functional")


def test_extra_ops_are_real_non_core_aten_ops() -> None:
    from ember.runtime.ir import resolve_op

    for name in CORE_FUNCTIONAL_EXTRA_OPS:
        op = resolve_op(name)
        assert torch.Tag.core not in op.tags, f"{name} is core already; drop it from the list"
        assert not op._schema.is_mutable, name


def test_compiled_dialect_checks_the_artifact_layout() -> None:
    program, _ = mlp_program()
    _rejects(program, r"expected a compiled program, got dialect 'aten'", "compiled")
    program.dialect = "compiled"
    _rejects(program, r"graph 'forward': compiled program has no metadata", "compiled")
    kernel = {"name": "k0", "lang": "cpp", "entry": "k0", "source": "forward/k0.cpp",
              "meta": {"arg_dtypes": ["float32"]}}
    program.metadata["compiled"] = {"format": 1, "graphs": {"forward": {
        "wrapper": "forward/wrapper.py", "kernels": [kernel], "constants": {},
        "device": "cpu"}}}
    _rejects(program, r"wrapper file 'forward/wrapper.py' is not in the program's files")
    program.files["forward/wrapper.py"] = b"def call(inputs): ..."
    _rejects(program, r"graph 'forward', kernel 'k0': source file 'forward/k0.cpp' is not")
    program.files["forward/k0.cpp"] = b"// generated"
    verify(program)
    kernel["lang"] = "cobol"
    _rejects(program, r"kernel 'k0': unknown language 'cobol'")


def test_unknown_dialect_is_rejected() -> None:
    program, _ = mlp_program()
    _rejects(program, r"unknown dialect 'torchscript'", "torchscript")


def test_empty_graph_is_rejected() -> None:
    program = Program(graphs={"forward": Graph([])})
    _rejects(program, r"graph 'forward': the last node must be the output node")


def test_gradient_must_name_a_forward_input() -> None:
    program, _ = mlp_program()
    pb = ProgramBuilder()
    g = pb.input(torch.randn(2, 3), name="tangent_0")
    backward = pb.finish(g, kinds=[OutputSpec(OutputKind.GRADIENT, "x")])
    program.graphs["backward"] = backward.forward
    program.signature.inputs["backward"] = backward.signature.inputs["forward"]
    program.signature.outputs["backward"] = backward.signature.outputs["forward"]
    verify(program)
    program.signature.outputs["backward"] = [OutputSpec(OutputKind.GRADIENT, "y")]
    _rejects(program, r"graph 'backward', node %output: output 0 is the gradient of 'y'")


def test_call_arguments_are_checked_against_the_schema() -> None:
    program, _ = mlp_program()
    relu = _node(program, "v5")
    relu.args = (ValueRef("v4"), 1)
    _rejects(program, r"%v5 \(aten::relu.default\): 2 positional arguments; the schema "
                      r"takes at most 1")
    relu.args, relu.kwargs = (ValueRef("v4"),), {"inplace": True}
    _rejects(program, r"keyword argument 'inplace' is not in the schema")
    relu.args, relu.kwargs = (), {}
    _rejects(program, r"%v5 \(aten::relu.default\): required argument 'self' is missing")


def test_meta_rank_must_agree() -> None:
    program, _ = mlp_program()
    relu = _node(program, "v5")
    assert isinstance(relu.meta, TensorMeta)
    relu.meta = dataclasses.replace(relu.meta, strides=(1,))
    _rejects(program, r"%v5 \(aten::relu.default\): meta has 2 sizes but 1 strides")
