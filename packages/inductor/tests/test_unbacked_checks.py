"""Unbacked sizes (``nonzero``, a boolean mask, ``.item()``) in the compiled wrapper:
each is checked against its range and the guards it completes where it is bound, with
the interpreter's ``ShapeError`` (same message, same ``values``), and nothing that uses
one runs before it is bound. Eager, ``aot_eager`` and the inductor agree on programs
over such sizes, 0 included.

PYTEST_DONT_REWRITE: the compiled functions' asserts must stay CPython's own bytecode.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, cast

import ember.frontend as ef
import pytest
import torch
from ember.inductor.buffers import ExternCall
from ember.inductor.compile import compile_program
from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.inductor.scheduler import KernelStep, format_schedule, schedule
from ember.runtime.compiled import load_executor
from ember.runtime.config import patch
from ember.runtime.interpreter import run_program
from ember.runtime.ir import Program, parse_program, verify
from ember.runtime.ir.symbolic import ShapeError


@pytest.fixture(autouse=True)
def _no_disk_cache() -> Iterator[None]:
    with patch(cache_enabled=False):
        yield


def _program(text: str) -> Program:
    p = parse_program(text)
    p.untrusted_origin = None  # our own text: compiled, it may run
    verify(p)
    return p


def _compiled(p: Program) -> tuple[str, Callable[[list[Any]], list[Any]]]:
    compiled = compile_program(p, {"strict": True})
    return compiled.files["forward/wrapper.py"].decode(), load_executor(compiled)


def _shape_error(run: Callable[[], object]) -> ShapeError:
    with pytest.raises(ShapeError) as info:
        run()
    return info.value


# u0 (nonzero's count) narrowed to [2, inf] by an assert; u1 (.item()) below u0
CHECKED = """program dialect=core-functional
metadata {"aot": {"aliased_outputs": [], "differentiable_outputs": [], "extern_ops": []}}

graph forward(%x: f32[s0]{1} cpu, %n: i64[]{} cpu):
  symbols s0 in [2, inf] hint=3, u0 in [2, inf], u1 in [0, inf]
  guard u1 < u0
  %nonzero: i64[u0, 1]{1,u0} cpu = aten::nonzero.default(%x)
  %mul: i64[u0, 1]{1,1} cpu = aten::mul.Tensor(%nonzero, 2)
  %_local_scalar_dense: int(u1) = aten::_local_scalar_dense.default(%n)
  %full: f32[u1]{1} cpu = aten::full.default([sym(u1)], 1.0)
  return (%mul, %full)  [user_output, user_output]
"""


def test_a_tensor_results_unbacked_size_is_checked_as_the_interpreter_does() -> None:
    p = _program(CHECKED)
    wrapper, run = _compiled(p)
    assert "u0 = buf0.size(0)" in wrapper
    x = torch.tensor([1.0, 0.0, 2.0])
    mul, full = run([x, torch.tensor(1)])
    torch.testing.assert_close(mul, x.nonzero() * 2)
    torch.testing.assert_close(full, torch.ones(1))
    for bad, n, values in ((torch.tensor([0.0, 0.0, 3.0]), 0, {"u0": 1}),  # the range
                           (x, 2, {"u0": 2, "u1": 2})):                    # the guard
        inputs = [bad, torch.tensor(n)]
        want = _shape_error(lambda: run_program(p, inputs))  # noqa: B023 (called here)
        got = _shape_error(lambda: run(inputs))  # noqa: B023
        assert str(got) == str(want)
        assert got.values == want.values == values
    assert str(got).startswith("guard 'u1 < u0' fails for u0=2 from the result of "
                               "'nonzero' dim 0, u1=2 from the result of "
                               "'_local_scalar_dense'")


# the value of an int .item() as a tensor, compared and asserted: its kernel runs after
# the .item() call that binds u0, not fused into the kernel computing the sum before it
ITEM_VALUE = """program dialect=core-functional
metadata {"aot": {"aliased_outputs": [], "differentiable_outputs": [], "extern_ops": []}}

graph forward(%x: i64[s0]{1} cpu):
  symbols s0 in [2, inf] hint=3, u0 in [0, inf]
  %sum: i64[]{} cpu = aten::sum.dim_IntList(%x, [])
  %_local_scalar_dense: int(u0) = aten::_local_scalar_dense.default(%sum)
  %full: i64[]{} cpu = aten::full.default([], sym(u0), dtype=torch.int64)
  %lt: bool[]{} cpu = aten::lt.Scalar(%full, 2)
  %_assert_async = aten::_assert_async.msg(%lt, "n too big")
  %mul: i64[s0]{1} cpu = aten::mul.Tensor(%x, 2)
  return (%mul)  [user_output]
"""


def test_a_kernel_using_an_item_value_runs_after_the_item(backend: str) -> None:
    p = _program(ITEM_VALUE)
    steps = schedule(GraphLowering(p).run())
    binds = next(i for i, s in enumerate(steps)
                 if isinstance(s, ExternCall) and s.target.endswith("_local_scalar_dense.default"))
    uses = [i for i, s in enumerate(steps)
            if isinstance(s, KernelStep) and "u0" in s.kernel.size_args]
    assert uses and min(uses) > binds, format_schedule(steps)
    _, run = _compiled(p)
    x = torch.tensor([1, 0, 0])
    torch.testing.assert_close(run([x])[0], x * 2)
    with pytest.raises(RuntimeError, match="n too big"):
        run([torch.tensor([1, 1, 0])])


def _item_assert(x: torch.Tensor) -> torch.Tensor:
    n = x.sum().item()
    assert torch.tensor(n) < 2, "n too big"
    return x * 2


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_an_assert_on_a_tensor_of_an_item(backend: str) -> None:
    compiled = ef.compile(_item_assert, backend=backend, dynamic=True)
    x = torch.tensor([1, 0, 0])
    torch.testing.assert_close(compiled(x), x * 2)
    with pytest.raises(RuntimeError, match="n too big"):
        compiled(torch.tensor([1, 1, 0]))
    assert compiled.stats.compiles == 1


# -- eager, aot_eager and the inductor agree over data-dependent sizes ----------------------

def _full_of_an_item(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    n = cast(int, (x > 0).sum().item())  # (int() would need the value: a break)
    return torch.full((n,), 1.0) * 3, x * 2


def _masked_then_reduced(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x[x > 0]
    return y.sum(), (y * 2).mean(), y.exp().sum(0, keepdim=True), y.amax(0, keepdim=True)


def _nonzero_then_indexing(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    nz = x.nonzero()
    idx = nz[:, 0]
    return x[idx] * 2, nz.t() + 1, x.index_select(0, idx).sum(), (x[nz] + 1).sum()


SIGNS = [[1.0, -1.0, 2.0], [-1.0, -1.0, -2.0], [1.0, 1.0, 2.0, 4.0], [3.0, -1.0]]
ZEROS = [[1.0, 0.0, 2.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 5.0]]


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize(("fn", "inputs"), [
    (_full_of_an_item, SIGNS),
    (_masked_then_reduced, [x for x in SIGNS if max(x) > 0]),  # amax of nothing raises
    (_nonzero_then_indexing, ZEROS),
])
def test_backends_agree_over_data_dependent_sizes(
        backend: str, fn: Callable[[torch.Tensor], tuple[torch.Tensor, ...]],
        inputs: list[list[float]]) -> None:
    compiled = ef.compile(fn, backend=backend)
    for values in inputs:
        x = torch.tensor(values)
        got, want = compiled(x), fn(x)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype, (values, g, w)
            torch.testing.assert_close(g, w)
    # x[x > 0] in a static capture: captured again symbolic (was a graph break)
    assert compiled.stats.graph_breaks == 0
