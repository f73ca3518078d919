"""Custom operators end to end (issue 18): a Python operator, a C++ ``TORCH_LIBRARY``
operator (built with ``load_inline``), mutating operators (Python and C++), an operator
with autograd in training (SGD steps), one returning several tensors and one with
non-tensor arguments, each through ``ember.frontend.compile`` with the ``eager``,
``aot_eager`` and ``inductor`` backends, with and without ``EMBER_SERIALIZE_BOUNDARIES``;
values and written inputs against eager; a compiled program with custom operators saved
and loaded as a ``.ember`` file."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import ember.frontend
import pytest
import torch
from custom_ops_library import (
    CPP_NAMESPACE,
    build_cpp_operators,
    ema_,
    fused_gelu,
    poly,
    scale_,
    split_sign,
    swish,
    unfaked,
)
from ember.runtime.config import patch
from ember_testing.training import assert_same_training_state, sgd_step

BACKENDS = ["eager", "aot_eager", "inductor"]


@pytest.fixture(scope="module")
def cpp_ops() -> Any:
    """The C++ extension's operators (built once per machine, see custom_ops_library)."""
    try:
        build_cpp_operators()
    except RuntimeError as e:
        if "no C++ compiler" in str(e):
            pytest.skip(f"the C++ operator needs a C++ compiler: {e}")
        raise
    return getattr(torch.ops, CPP_NAMESPACE)


@pytest.fixture(params=[False, True], ids=["in-memory", "serialized"])
def boundaries(request: pytest.FixtureRequest) -> Iterator[bool]:
    with patch(serialize_boundaries=request.param):
        yield request.param


def _python_op(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return fused_gelu(x * 2) + y


def _mutating_op(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    h = x + 1
    scale_(h, 3.0)       # an intermediate: written in place when dead after
    scale_(y, 0.5)       # a graph input: copied back
    return h * y


def _several_results(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    pos, neg = split_sign(x - y)
    return pos.sum(0), neg * 2


def _non_tensor_args(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return poly(x, [0.5, -1.0, 0.25], 2, True, "tanh") + poly(y, [1.0, 2.0], 1, False,
                                                               "sigmoid")


def _cpp_op(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    ops = getattr(torch.ops, CPP_NAMESPACE)
    z = ops.scaled_add(x, y, 0.5).exp()
    ops.clamp_(z, 0.5, 2.0)  # a C++ operator writing its argument
    ops.clamp_(x, -0.25, 0.25)
    return z + x


CASES: list[tuple[str, Callable[..., Any]]] = [
    ("python", _python_op),
    ("mutating", _mutating_op),
    ("several_results", _several_results),
    ("non_tensor_args", _non_tensor_args),
    ("cpp", _cpp_op),
]


def _check(fn: Callable[..., Any], backend: str, device: str = "cpu") -> None:
    torch.manual_seed(0)
    inputs = [torch.randn(4, 6, device=device), torch.randn(4, 6, device=device)]
    mine = [t.clone() for t in inputs]
    got = ember.frontend.compile(fn, backend=backend, fullgraph=True)(*mine)
    want = fn(*inputs)
    torch.testing.assert_close(got, want)
    for a, b in zip(mine, inputs):  # inputs the operators wrote
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name,fn", CASES, ids=[c[0] for c in CASES])
def test_custom_operator_matches_eager(name: str, fn: Callable[..., Any], backend: str,
                                       boundaries: bool, request: pytest.FixtureRequest
                                       ) -> None:
    if name == "cpp":
        request.getfixturevalue("cpp_ops")
    _check(fn, backend)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("name,fn", CASES[:-1], ids=[c[0] for c in CASES[:-1]])
def test_custom_operator_on_cuda_matches_eager(name: str, fn: Callable[..., Any]) -> None:
    _check(fn, "inductor", "cuda")  # (the C++ operator has a CPU kernel only)


class _SwishNet(torch.nn.Module):
    """An operator with autograd between two layers, and a mutating one keeping a
    running average of the hidden activations in a buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(6, 8)
        self.out = torch.nn.Linear(8, 3)
        self.register_buffer("hidden_avg", torch.zeros(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = swish(self.inp(x), 1.5)
        ema_(self.hidden_avg, h.detach().mean(0), 0.1)
        return self.out(h)


@pytest.mark.parametrize("backend", BACKENDS)
def test_operators_in_training_match_eager(backend: str, boundaries: bool) -> None:
    torch.manual_seed(0)
    eager = _SwishNet()
    compiled_model = copy.deepcopy(eager)
    compiled = ember.frontend.compile(compiled_model, backend=backend, fullgraph=True)
    for step in range(3):
        x, target = torch.randn(5, 6), torch.randn(5, 3)
        sgd_step(eager, eager, x, target)
        sgd_step(compiled_model, compiled, x, target)
        assert_same_training_state(eager, compiled_model)


def test_compiled_program_with_custom_operators_saves_and_loads(tmp_path: Path,
                                                                cpp_ops: Any) -> None:
    from ember.frontend import capture
    from ember.runtime import load_artifact
    from ember.runtime.ir import save
    from ember.runtime.pipeline import compile_program

    inputs = [torch.randn(4, 6), torch.randn(4, 6)]
    for fn in (_mutating_op, _cpp_op, _several_results):
        compiled = compile_program(capture(fn, *inputs), "inductor").program
        path = tmp_path / f"{fn.__name__}.ember"
        save(compiled, path)
        loaded = load_artifact(path, trusted=True)
        mine = [t.clone() for t in inputs]
        want = fn(*[t.clone() for t in inputs])
        got = loaded(*mine)
        torch.testing.assert_close(tuple(got) if isinstance(want, tuple) else got[0], want)


def test_an_operator_without_a_fake_kernel_is_named_with_the_missing_registration() -> None:
    from ember.frontend.bytecode.breaks import FullGraphError

    def fn(x: torch.Tensor) -> torch.Tensor:
        return unfaked(x) * 2

    hint = ("custom operator ember_corpus::unfaked.default has no fake kernel, so its "
            "result's shape is unknown without running it: register one with "
            "torch.library.register_fake('ember_corpus::unfaked')")
    with pytest.raises(FullGraphError, match=re.escape(hint)):
        ember.frontend.compile(fn, fullgraph=True)(torch.randn(3))
    with pytest.raises(Exception, match=re.escape(hint)):
        ember.frontend.compile(fn, options={"capture": "trace"})(torch.randn(3))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_custom_operators_with_symbolic_sizes(backend: str) -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = x + 1
        scale_(h, 3.0)
        scale_(y, 0.5)
        pos, _ = split_sign(h)
        return h * y + pos

    compiled = ember.frontend.compile(fn, backend=backend, dynamic=True, fullgraph=True)
    for rows in (3, 5):
        inputs = [torch.randn(rows, 4), torch.randn(rows, 4)]
        mine = [t.clone() for t in inputs]
        torch.testing.assert_close(compiled(*mine), fn(*inputs))
        torch.testing.assert_close(mine[1], inputs[1])
