"""Custom operators in the inductor: extern calls by design (not fallbacks), and a
mutating one (``mutates_args``) writing a buffer only it holds: the argument's own when
nothing reads it after the call (no copy), a copy otherwise. Read as the printed lowered
graph and schedule."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.inductor.scheduler import format_schedule, schedule
from helpers import compile_and_load, trace


@torch.library.custom_op("ember_inductor_test::expm", mutates_args=())
def expm(x: torch.Tensor) -> torch.Tensor:
    return x.exp()


@expm.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("ember_inductor_test::scale_", mutates_args=("x",))
def scale_(x: torch.Tensor, k: float) -> None:
    x.mul_(k)


@scale_.register_fake
def _(x: torch.Tensor, k: float) -> None:
    return None


def _dead_after(x: torch.Tensor) -> torch.Tensor:
    t = expm(x)
    c = t.clone()  # the aot stage's fresh buffer: t is not read again
    scale_(c, 2.0)
    return torch.sin(c)


def _read_after(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    t = expm(x)
    c = t.clone()
    scale_(c, 2.0)
    return c + t, t


def _lazy_reader(x: torch.Tensor) -> torch.Tensor:
    t = expm(x)
    a = t * 3  # computed after the call by the fused output kernel: must see old t
    c = t.clone()
    scale_(c, 2.0)
    return torch.add(a, c)


def _graph_input(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    c = x.clone()  # an input's buffer is never written
    scale_(c, 2.0)
    return c, x * 2


def _lowered(fn: Any, x: torch.Tensor) -> str:
    return str(GraphLowering(trace(fn, [x])).run())


DEAD_AFTER = """\
lowered graph 'forward' on cpu
  input arg0: float32[4] strides [1]
  buffer buf0: float32[4] strides [1] (extern)
  buffer buf2: float32[4] strides [1] (computed)
  buf0 = extern ember_inductor_test::expm.default(arg0) (custom operator)  # from expm
  buf1 = extern ember_inductor_test::scale_.default(buf0, 2.0) (custom operator, writes buf0)  # from scale_
  buf2 = pointwise over [4]:  # from sin
      v0: float32 = load buf0[i0]
      v1: float32 = sin(v0)
      store buf2[i0] = v1
  outputs buf2
"""


def test_dead_input_is_written_in_place() -> None:
    # the clone is elided: scale_ writes expm's buffer, which nothing reads after it
    assert _lowered(_dead_after, torch.randn(4)) == DEAD_AFTER.rstrip("\n")


READ_AFTER = """\
lowered graph 'forward' on cpu
  input arg0: float32[4] strides [1]
  buffer buf0: float32[4] strides [1] (extern)
  buffer buf1: float32[4] strides [1] (computed)
  buffer buf3: float32[4] strides [1] (computed)
  buf0 = extern ember_inductor_test::expm.default(arg0) (custom operator)  # from expm
  buf1 = pointwise over [4]:  # from clone
      v0: float32 = load buf0[i0]
      store buf1[i0] = v0
  buf2 = extern ember_inductor_test::scale_.default(buf1, 2.0) (custom operator, writes buf1)  # from scale_
  buf3 = pointwise over [4]:  # from add
      v0: float32 = load buf1[i0]
      v1: float32 = load buf0[i0]
      v2: float32 = add(v0, v1)
      store buf3[i0] = v2
  outputs buf3, buf0
"""


def test_input_read_after_the_call_is_copied_first() -> None:
    # t is read after scale_: the copy (buf1) is what scale_ writes
    assert _lowered(_read_after, torch.randn(4)) == READ_AFTER.rstrip("\n")


def test_graph_inputs_are_never_written() -> None:
    lowered = GraphLowering(trace(_graph_input, [torch.randn(4)])).run()
    call = lowered.extern_nodes[0]
    assert call.mutates == ("buf0",) and lowered.buffers["buf0"].kind == "computed"


def test_a_reader_of_the_old_value_runs_before_the_write() -> None:
    lowered = GraphLowering(trace(_lazy_reader, [torch.randn(4)])).run()
    assert format_schedule(schedule(lowered)) == """\
extern ember_inductor_test::expm.default(arg0) -> buf0
kernel0 [4]: buf1 (pointwise); loads buf0; stores buf1
extern ember_inductor_test::scale_.default(buf1) -> buf2; writes buf1
kernel1 [4]: buf3 (pointwise); loads buf0, buf1; stores buf3"""


def test_values_match_eager_and_custom_ops_are_not_fallbacks(backend: str) -> None:
    options = {} if backend == "cpp" else {"precompile": False}
    for fn in (_dead_after, _read_after, _lazy_reader, _graph_input):
        x = torch.randn(5)
        compiled, run = compile_and_load(trace(fn, [x]), **options)
        expected = fn(x.clone())
        expected = expected if isinstance(expected, tuple) else (expected,)
        for got, want in zip(run(x), expected):
            torch.testing.assert_close(got, want)
        assert not compiled.metadata.get("fallbacks"), fn.__name__


@torch.library.custom_op("ember_inductor_test::liar", mutates_args=())
def liar(x: torch.Tensor) -> torch.Tensor:
    return x.t().contiguous()  # its fake kernel says x's shape


@liar.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def test_the_wrapper_checks_a_custom_op_result_against_its_fake_kernel() -> None:
    from ember.runtime.custom_ops import FakeKernelMismatch

    x = torch.randn(3, 4)
    compiled, run = compile_and_load(trace(lambda t: liar(t) + 1, [x]))
    wrapper = next(v for k, v in compiled.files.items() if k.endswith(".py"))
    assert "_custom_result(buf0, 'ember_inductor_test::liar.default', None, " \
           "torch.float32, (3, 4), (4, 1))" in wrapper.decode()
    with pytest.raises(FakeKernelMismatch, match=re.escape(
            "custom operator ember_inductor_test::liar.default: its result has sizes "
            "[4, 3], but its fake kernel said [3, 4]")):
        run(x)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_mutating_custom_op_on_cuda_matches_eager() -> None:
    for fn in (_dead_after, _read_after, _lazy_reader, _graph_input):
        x = torch.randn(1000, device="cuda")
        compiled, run = compile_and_load(trace(fn, [x]))
        expected = fn(x.clone())
        expected = expected if isinstance(expected, tuple) else (expected,)
        for got, want in zip(run(x), expected):
            torch.testing.assert_close(got, want)
        assert not compiled.metadata.get("fallbacks"), fn.__name__


@torch.library.custom_op("ember_inductor_test::flat", mutates_args=())
def flat(x: torch.Tensor) -> torch.Tensor:
    return x.view(-1) * 1  # needs the dense layout eager gives it


@flat.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.numel())


def _expanded_copy(t: torch.Tensor) -> torch.Tensor:
    return flat(t.expand(3, 4).clone())  # the lowering's clone is a stride-0 view


def test_operands_reach_the_operator_in_their_traced_layout() -> None:
    lowered = GraphLowering(trace(_expanded_copy, [torch.randn(1, 4)])).run()
    call = lowered.extern_nodes[0]
    assert [str(a) for a in call.args] == ["buf0"]  # a dense copy, not arg0.view(...)
    assert lowered.buffers["buf0"].strides == (4, 1)
    t = torch.randn(1, 4)
    _, run = compile_and_load(trace(_expanded_copy, [t]))
    torch.testing.assert_close(run(t)[0], _expanded_copy(t))
