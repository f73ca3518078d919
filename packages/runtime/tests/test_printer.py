"""The text form: golden printed programs, print/parse round trips, parse errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from ember.runtime.ir import (
    Graph,
    InputSpec,
    IRFormatError,
    Node,
    Program,
    SourceLocation,
    TensorMeta,
    ValueRef,
    parse_program,
    print_graph,
    print_program,
)
from ir_samples import SAMPLES, assert_same_program, mlp, output, tmeta

GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize("name", list(SAMPLES))
def test_printed_form_matches_golden(name: str) -> None:
    """Update with ``python packages/runtime/tests/golden/regenerate.py``."""
    expected = (GOLDEN / f"{name}.txt").read_text(encoding="utf-8")
    assert print_program(SAMPLES[name]()) == expected


@pytest.mark.parametrize("name", list(SAMPLES))
def test_parse_print_round_trip(name: str) -> None:
    program = SAMPLES[name]()
    text = print_program(program)
    parsed = parse_program(text, tensors=program.tensors, files=program.files)
    assert_same_program(program, parsed)
    assert print_program(parsed) == text


def test_mlp_reads_as_documented() -> None:
    assert print_program(mlp()) == (
        "program dialect=aten\n"
        'metadata {"model": "mlp"}\n'
        "tensor fc.weight: f32[8, 8] cpu\n"
        "\n"
        "graph forward(%x: f32[4, 8]{8,1} cpu, %w: f32[8, 8]{8,1} cpu [parameter fc.weight]):\n"
        '  %t: f32[8, 8]{1,8} cpu = aten::t.default(%w)        # model.py:12 forward '
        '"y = x @ self.w.T"\n'
        "  %mm: f32[4, 8]{8,1} cpu = aten::mm.default(%x, %t)  # model.py:12 forward\n"
        "  return (%mm)  [user_output]\n"
    )


def test_long_headers_put_one_input_per_line() -> None:
    nodes = [Node(f"input_number_{i}", "placeholder", f"input_number_{i}", meta=tmeta(4, 8))
             for i in range(5)]
    text = print_graph(Graph([*nodes, output(ValueRef("input_number_0"))]))
    assert text.splitlines()[:3] == [
        "graph forward(", "    %input_number_0: f32[4, 8]{8,1} cpu,",
        "    %input_number_1: f32[4, 8]{8,1} cpu,"]
    program = Program(graphs={"forward": Graph([*nodes, output(ValueRef("input_number_0"))])})
    assert parse_program(print_program(program)) == program


def test_hand_written_text_parses() -> None:
    """Extra spaces, comment lines and blank lines are fine; comments after program
    lines are ignored; a comment after a node is its source."""
    text = """
# a hand-written program
program   dialect=aten   # the dialect

graph forward( %x : f32[4]{1} cpu ,  %y: f32[4]{1} cpu [ parameter  p ] ) :

  # the body
  %z: f32[4]{1} cpu = aten::add.Tensor( %x , %y , alpha = 2 )   #  m.py:3  f
  return ( %z )  [ user_output ]
tensor p: f32[4] cpu
"""
    p = torch.randn(4)
    program = parse_program(text, tensors={"p": p})
    z = program.forward.node("z")
    assert z.args == (ValueRef("x"), ValueRef("y")) and z.kwargs == {"alpha": 2}
    assert z.source == SourceLocation("m.py", 3, "f")
    assert program.signature.inputs["forward"][1] == InputSpec("y", "parameter", "p")  # type: ignore[arg-type]
    assert program.tensors["p"] is p


def test_parse_without_tensors_gives_meta_stand_ins() -> None:
    program = parse_program(print_program(mlp()))
    t = program.tensors["fc.weight"]
    assert (t.device.type, t.dtype, tuple(t.shape)) == ("meta", torch.float32, (8, 8))


def test_parse_checks_given_tensors_and_files() -> None:
    text = print_program(SAMPLES["training"]())
    program = SAMPLES["training"]()
    wrong = dict(program.tensors, mask=torch.zeros(6, dtype=torch.bool))
    with pytest.raises(IRFormatError, match=r"tensor 'mask' is bool\[6\] but the program "
                                            r"declares bool\[5\]"):
        parse_program(text, tensors=wrong, files=program.files)
    with pytest.raises(IRFormatError, match=r"file\(s\) \['kernels/k0.cpp', 'bin/k0.so', "
                                            r"'empty.txt'\] are declared"):
        parse_program(text, tensors=program.tensors)
    extra = dict(program.tensors, unused=torch.ones(1))
    with pytest.raises(IRFormatError, match=r"\['unused'\] are given but not declared"):
        parse_program(text, tensors=extra, files=program.files)


BAD_TEXTS = [
    ("graph forward():\n  return ()\n", 1, "expected 'program dialect=...' first"),
    ("program dialect=aten\nprogram dialect=aten\n", 2, "a second 'program' line"),
    ("program dialect=aten\nfoo bar\n", 2, "expected a statement"),
    ("program dialect=aten\ngraph f(%x: f32[4]{1} cpu):\n  %y = aten::neg.default(%x\n",
     3, "expected ')'"),
    ("program dialect=aten\ngraph f(%x: f33[4]{1} cpu):\n  return (%x)\n",
     2, "unknown dtype 'f33'"),
    ("program dialect=aten\ngraph f(%x: f32[4]{1} gpu):\n  return (%x)\n",
     2, "unknown device 'gpu'"),
    ("program dialect=aten\ngraph f(%x: f32[4] cpu):\n", 2, "expected '{' before the strides"),
    ("program dialect=aten\ngraph f(%x: tensor):\n", 2, "unknown scalar type 'tensor'"),
    ("program dialect=aten\ngraph f():\n  %y = aten::zeros.default([2], dtype=torch.nope)\n",
     3, "unknown argument 'torch.nope'"),
    ("program dialect=aten\ngraph f():\n  %y = aten::zeros.default(dtype=1, [2])\n",
     3, "a positional argument after a keyword argument"),
    ("program dialect=aten\ngraph f():\n  %y = aten::zeros.default(\"abc)\n",
     3, "expected a string literal"),
    ("program dialect=aten\ngraph f():\n  %y = frobnicate x\n", 3, "expected an operator"),
    ("program dialect=aten\ngraph f():\n  return ()  [user_outptu]\n",
     3, "expected an output kind"),
    ("program dialect=aten\ngraph f():\n  return () extra\n", 3, "unexpected 'extra'"),
    ("program dialect=aten\ngraph f():\n  %y = aten::zeros.default([2])  # nowhere\n",
     3, "expected a source location 'file:line'"),
    ("program dialect=aten\nmetadata {\"a\": }\n", 2, "metadata is not valid JSON"),
    ("program dialect=aten\ngraph f():\n  return ()\ngraph f():\n  return ()\n",
     4, "graph 'f' is defined twice"),
    ("program dialect=aten\ngraph f():\n  symbols s0 [2, 4]\n", 3, "expected 'in [lower, upper]'"),
]


@pytest.mark.parametrize(("text", "line", "message"), BAD_TEXTS)
def test_bad_text_names_the_line(text: str, line: int, message: str) -> None:
    with pytest.raises(IRFormatError) as info:
        parse_program(text)
    assert str(info.value).startswith(f"line {line}, column ")
    assert message in str(info.value)


def test_parse_error_quotes_the_line_and_column() -> None:
    text = "program dialect=aten\ngraph f(%x: f32[4]{1} cpu):\n  %y = aten::neg.default(%x,, 1)\n"
    with pytest.raises(IRFormatError) as info:
        parse_program(text)
    assert str(info.value) == (
        "line 3, column 29: expected an argument\n"
        "      %y = aten::neg.default(%x,, 1)")


def test_parsed_text_gets_the_load_checks() -> None:
    text = "program dialect=aten\ngraph f():\n  %y = aten::neg.default(%x)\n  return (%y)\n"
    with pytest.raises(IRFormatError, match=r"^line 3: graph 'f', node 0 \(%y\): uses %x, "
                                            "an undefined value"):
        parse_program(text)
    text = ("program dialect=aten\ngraph f(\n    %x: f32[2]{1} cpu,\n):\n"
            "  %y = aten::nonexistent_op.default(%x)\n")
    with pytest.raises(IRFormatError, match=r"^line 5: graph 'f', node 1 \(%y\): unknown "
                                            "operator 'aten::nonexistent_op.default'"):
        parse_program(text)


def test_symbolic_sizes_print_bare_or_quoted() -> None:
    meta = TensorMeta(torch.float32, ("s0*2", "(s0//2)", "s0 + 1", "7"), (1, 1, 1, 1),
                      torch.device("cpu"), storage_offset="(s0)")
    graph = Graph([Node("x", "placeholder", "x", meta=meta)])
    assert print_graph(graph) == (
        'graph forward(%x: f32[s0*2, (s0//2), "s0 + 1", "7"]{1,1,1,1} cpu offset="(s0)"):\n')
    program = Program(graphs={"g": graph})
    assert parse_program(print_program(program)) == program


def test_windows_line_endings_parse() -> None:
    program = SAMPLES["training"]()
    text = print_program(program).replace("\n", "\r\n")
    assert_same_program(program, parse_program(text, program.tensors, program.files))


def test_print_graph_shows_kinds_inline() -> None:
    program = mlp()
    text = print_graph(program.forward, "forward", program.signature.inputs["forward"],
                       program.signature.outputs["forward"])
    assert text.splitlines()[0].endswith("%w: f32[8, 8]{8,1} cpu [parameter fc.weight]):")
    assert text.splitlines()[-1] == "  return (%mm)  [user_output]"
