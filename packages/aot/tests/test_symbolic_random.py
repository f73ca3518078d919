"""Dropout and random ops over a symbolic batch (issue 15 follow-up): the aot stage
compiles them once without specialising the batch (``empty_like``'s decomposition,
``empty_permuted``, used to read each size as an int, which fixed ``s0`` to the example
size and made the stage decline). The interpreter runs random ops on torch's generator,
so under one seed the compiled program draws eager's numbers at every size."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from aot_capture import capture, compile_fn, compile_module
from ember.aot.decompositions import empty_permuted
from ember.aot.pipeline import aot_compile
from ember.runtime.ir import InputSpec, TensorMeta, print_graph
from ember.runtime.tracing import GraphRecorder
from ember_testing.training import assert_same_training_state, sgd_step

ROWS = {0: {0: (2, None)}}


def _ops(text: str) -> list[str]:
    """Each node line of a printed graph without its source comment."""
    return [line.split("  #")[0].rstrip() for line in text.splitlines()]


def test_dropout_compiles_with_a_symbolic_mask_as_text() -> None:
    x = torch.randn(5, 16, requires_grad=True)
    program = aot_compile(capture(lambda t: F.dropout(t, 0.5, True), x, dynamic=ROWS))
    assert _ops(print_graph(program.forward)) == [
        "graph forward(%in0: f32[s0, 16]{16,1} cpu requires_grad):",
        "  symbols s0 in [2, inf] hint=5",
        ("  %empty_strided: f32[s0, 16]{16,1} cpu = aten::empty_strided.default("
         "[sym(s0), 16], [16, 1], dtype=torch.float32, layout=torch.strided, "
         'device=device("cpu"), pin_memory=False)'),
        "  %alias: f32[s0, 16]{16,1} cpu = aten::alias.default(%empty_strided)",
        "  %bernoulli: f32[s0, 16]{16,1} cpu = aten::bernoulli.p(%alias, 0.5)",
        "  %div: f32[s0, 16]{16,1} cpu = aten::div.Scalar(%bernoulli, 0.5)",
        "  %mul: f32[s0, 16]{16,1} cpu requires_grad = aten::mul.Tensor(%in0, %div)",
        "  return (%mul, %div)",
    ]
    # the backward applies the saved scaled mask (as many bytes as the mask, and the
    # forward computes it anyway: the min cut's tie goes to recomputing nothing); the
    # buffer it was drawn into is not rebuilt
    assert _ops(print_graph(program.graphs["backward"], "backward")) == [
        ("graph backward(%saved_div: f32[s0, 16]{16,1} cpu, "
         "%tangent_0: f32[s0, 16]{16,1} cpu):"),
        "  symbols s0 in [2, inf] hint=5",
        "  %mul_1: f32[s0, 16]{16,1} cpu = aten::mul.Tensor(%tangent_0, %saved_div)",
        "  return (%mul_1)",
    ]
    aot = program.metadata["aot"]
    assert isinstance(aot, dict)
    assert (aot["saved_bytes"], aot["recomputed"]) == ("64*s0", [])


def test_empty_permuted_keeps_symbolic_strides() -> None:
    recorder = GraphRecorder(dynamic=True)
    fake = recorder.add_input(torch.randn(5, 3), InputSpec("x"), dynamic_dims={0: (2, None)})
    with recorder:
        out = empty_permuted([fake.shape[0], 3, 4], [2, 0, 1], dtype=torch.float32,
                             device=torch.device("cpu"))
    meta = recorder.finish([out]).forward.nodes[-2].meta
    assert isinstance(meta, TensorMeta)
    assert (meta.sizes, meta.strides) == (("s0", 3, 4), (3, 1, "3*s0"))


RANDOM_FNS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "dropout": lambda x: F.dropout(x, 0.3, True),
    "alpha_dropout": lambda x: F.alpha_dropout(x, 0.3, True),
    "rand_like": lambda x: x * torch.rand_like(x),
    "randn_of_sizes": lambda x: x + torch.randn(x.shape[0], x.shape[1]),
    "normal_": lambda x: x * torch.empty_like(x).normal_(),
    "uniform_": lambda x: x * torch.empty(x.shape[0], 16).uniform_(-1, 1),
}


@pytest.mark.parametrize("name", list(RANDOM_FNS))
def test_random_ops_give_eagers_numbers_at_two_sizes(name: str) -> None:
    fn = RANDOM_FNS[name]
    _, run = compile_fn(fn, torch.randn(5, 16, requires_grad=True), dynamic=ROWS)
    for n in (3, 9):
        x = torch.randn(n, 16, requires_grad=True)
        torch.manual_seed(n)
        expected = fn(x)
        torch.manual_seed(n)
        (actual,) = run([x])
        torch.testing.assert_close(actual, expected)
        tangent = torch.randn_like(expected)
        torch.testing.assert_close(torch.autograd.grad(actual, x, tangent),
                                   torch.autograd.grad(expected, x, tangent))


def test_an_mlp_with_dropout_trains_at_two_batch_sizes_after_one_compile() -> None:
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Dropout(0.25), torch.nn.Linear(32, 4)).train()
    compiled = copy.deepcopy(eager)
    program, run = compile_module(compiled, torch.randn(5, 16), dynamic=ROWS)
    assert program.forward.symbols and program.graphs["backward"].symbols
    for n in (3, 11):
        x, target = torch.randn(n, 16), torch.randn(n, 4)
        torch.manual_seed(n)
        sgd_step(eager, eager, x, target)
        torch.manual_seed(n)
        sgd_step(compiled, lambda inp: run(inp)[0], x, target)
        assert_same_training_state(eager, compiled)
