"""Which graphs CUDA graphs refuse, read from the IR, and how a refusal shows: the plain
compiled code runs, one line under ``EMBER_LOGS=cudagraphs``, one count in
``cudagraph_skips``. Programs for CUDA are written as IR text (parsing needs no GPU)."""

from __future__ import annotations

import pytest
import torch
from ember.runtime.callable import ProgramCallable
from ember.runtime.config import patch
from ember.runtime.cudagraphs import NOT_COMPILED
from ember.runtime.cudagraphs_inputs import is_dense
from ember.runtime.cudagraphs_policy import (
    ALIASED_INPUTS,
    CPU_TENSORS,
    DATA_DEPENDENT,
    SEVERAL_DEVICES,
    SYNCHRONIZING,
    aliased_user_inputs,
    cudagraph_skips,
    why_not_recorded,
)
from ember.runtime.ir import InputSpec, Program, parse_program
from ember.runtime.ir.contracts import InputAlias, InputAliases
from ember.runtime.pipeline import compile_program
from ember.runtime.tracing import GraphRecorder

_HEAD = "program dialect=aten\n\n"

CLEAN = _HEAD + """graph forward(%x: f32[3, 4]{4,1} cuda:0):
  %mul: f32[3, 4]{4,1} cuda:0 = aten::mul.Tensor(%x, 2)                  # m.py:5 f "y = x * 2"
  %rand: f32[3, 4]{4,1} cuda:0 = aten::rand.default([3, 4], device=device("cuda:0"))  # m.py:6 f "r = torch.rand(3, 4)"
  %add: f32[3, 4]{4,1} cuda:0 = aten::add.Tensor(%mul, %rand)            # m.py:7 f "return y + r"
  return (%add)  [user_output]
"""

CASES = {
    "cpu": (CLEAN.replace("cuda:0", "cpu"), CPU_TENSORS, "%x is on cpu"),
    "item": (_HEAD + """graph forward(%x: f32[3, 4]{4,1} cuda:0):
  %sum: f32[]{} cuda:0 = aten::sum.default(%x)                           # m.py:6 f "s = x.sum().item()"
  %_local_scalar_dense: float = aten::_local_scalar_dense.default(%sum)  # m.py:6 f "s = x.sum().item()"
  %mul: f32[3, 4]{4,1} cuda:0 = aten::mul.Tensor(%x, %_local_scalar_dense)  # m.py:7 f "return x * s"
  return (%mul)  [user_output]
""", SYNCHRONIZING, ("%_local_scalar_dense (m.py:6 in f) aten::_local_scalar_dense.default "
                     "reads a tensor's value on the host (.item())")),
    "nonzero": (_HEAD + """graph forward(%x: f32[3, 4]{4,1} cuda:0):
  symbols u0 in [0, 12]
  %nonzero: i64[u0, 2]{1,u0} cuda:0 = aten::nonzero.default(%x)          # m.py:6 f "return x.nonzero()"
  return (%nonzero)  [user_output]
""", SYNCHRONIZING, ("%nonzero (m.py:6 in f) aten::nonzero.default its result size is read "
                     "back from the device")),
    "unbacked size": (_HEAD + """graph forward(%r: i64[3]{1} cuda:0):
  symbols u0 in [0, 99]
  %repeat_interleave: i64[u0]{1} cuda:0 = aten::repeat_interleave.Tensor(%r)  # m.py:4 f "i = r.repeat_interleave()"
  return (%repeat_interleave)  [user_output]
""", DATA_DEPENDENT, "%repeat_interleave (m.py:4 in f) computes size u0"),
    "two devices": (CLEAN.replace("%rand: f32[3, 4]{4,1} cuda:0", "%rand: f32[3, 4]{4,1} cuda:1"),
                    SEVERAL_DEVICES, "%x on cuda:0, %rand on cuda:1"),
}


def _program(text: str) -> Program:
    return parse_program(text)


def test_a_cuda_graph_with_random_ops_is_recorded() -> None:
    assert why_not_recorded(_program(CLEAN).forward) is None


@pytest.mark.parametrize("case", list(CASES))
def test_refusal_reasons_from_the_ir(case: str) -> None:
    text, reason, detail = CASES[case]
    assert why_not_recorded(_program(text).forward) == (reason, detail)


def test_user_inputs_captured_as_views_of_one_another_are_not_recorded() -> None:
    text = CLEAN.replace("graph forward(%x: f32[3, 4]{4,1} cuda:0):",
                         "graph forward(%x: f32[3, 4]{4,1} cuda:0, %y: f32[4]{1} cuda:0):")
    program = _program(text)
    assert aliased_user_inputs(program) is None
    program.metadata["input_aliases"] = InputAliases(
        {"y": InputAlias("x", (4,), (1,), 4)}).to_json()
    assert aliased_user_inputs(program) == (ALIASED_INPUTS, "%y is a view of %x")
    graphs = ProgramCallable(program).enable_cuda_graphs()
    assert graphs.skips.seen == {("forward", ALIASED_INPUTS)}


def test_an_interpreted_program_is_not_recorded(capsys: pytest.CaptureFixture[str]) -> None:
    fn = ProgramCallable(_program(CLEAN))
    with patch(logs="cudagraphs"):
        graphs = fn.enable_cuda_graphs()
    assert graphs.graphs == {} and graphs.skips.seen == {("forward", NOT_COMPILED)}
    assert "graph 'forward' runs without CUDA graphs: the program is not compiled" \
        in capsys.readouterr().err


def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def _cpu_program() -> Program:
    rec = GraphRecorder()
    fake = rec.add_input(torch.randn(3), InputSpec("x"))
    with rec:
        out = _double(fake)
    return rec.finish([out])


def test_a_cpu_program_runs_plain_and_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("ember.inductor")
    before = cudagraph_skips[CPU_TENSORS]
    with patch(logs="cudagraphs"):
        fn = compile_program(_cpu_program(), "inductor", mode="reduce-overhead")
        x = torch.randn(3)
        for _ in range(3):
            torch.testing.assert_close(fn([x])[0], _double(x))
    assert fn.cuda_graphs is not None and fn.cuda_graphs.graphs == {}
    assert cudagraph_skips[CPU_TENSORS] == before + 1
    err = capsys.readouterr().err
    assert err.count("[ember.cudagraphs] graph 'forward' runs without CUDA graphs: CPU "
                     "tensors: %x is on cpu") == 1


def test_the_default_mode_leaves_the_callable_as_it_was() -> None:
    pytest.importorskip("ember.inductor")
    assert compile_program(_cpu_program(), "inductor").cuda_graphs is None
    assert compile_program(_cpu_program(), "eager", mode="default").cuda_graphs is None


@pytest.mark.parametrize(("make", "dense"), [
    (lambda: torch.empty(3, 4), True),
    (lambda: torch.empty(3, 4).t(), True),
    (lambda: torch.empty(3, 1, 4), True),
    (lambda: torch.empty(3, 4)[:, :2], False),
    (lambda: torch.empty(4).expand(3, 4), False),
])
def test_static_buffers_keep_a_dense_layout(make: object, dense: bool) -> None:
    assert callable(make)
    assert is_dense(make()) is dense
