"""Eager's semantics at the edges, through both captures and ``torch.compile(backend=
"ember")``: each case either matches eager's values (the function's results and its
inputs after the call) or raises where eager raises. Every case failed before its fix:

- a signed right shift by the width less one (``x >> 31``) gave the sign inverted;
- conjugate and negative views (``x.conj()``, ``x.mH``, ``torch._neg_view``) came back
  as plain aliases, and a write through one landed unconjugated;
- ``set_`` of a tensor to another crashed in aot;
- ``_pack_padded_sequence``'s ``batch_sizes`` came back float32 (its fake kernel's dtype);
- inputs ``(b[0], b[1], b)`` with a write through one row raised ``InputAliasingError``
  (and recursed without end under Dynamo);
- writes eager refuses computed something: ``int32.mul_(1.5)`` (a cast eager refuses),
  ``x[1:] += x[:-1]`` (partly overlapping), ``int ** -1``, ``argmax`` of bool, and
  under Dynamo a write of an inference tensor outside inference mode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.runtime.callable import InputAliasingError, ProgramCallable

Case = tuple[Callable[..., Any], Callable[[], tuple[Any, ...]]]


def _c64() -> torch.Tensor:
    return torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)


def _rows() -> tuple[torch.Tensor, ...]:
    b = torch.arange(6.0).view(2, 3)
    return b[0], b[1], b


def _set_to(x: torch.Tensor) -> torch.Tensor:
    y = torch.zeros(2)
    y.set_(x)
    y.mul_(2)  # a write through y is a write of x
    return y + 1


def _write_conj(x: torch.Tensor) -> torch.Tensor:
    x.conj().mul_(1j)
    return x


def _write_neg_slice(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = torch._neg_view(x)[1:]
    y.mul_(2)
    return x, y + 0


def _add_rows(x: torch.Tensor, y: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    x.add_(y)
    return b * 1


MATCHING: dict[str, Case] = {
    "rshift_int32_31": (lambda x: x >> 31,
                        lambda: (torch.tensor([-8, 8, -1, 5], dtype=torch.int32),)),
    "rshift_int8_7": (lambda x: (x >> 7, x >> 6),
                      lambda: (torch.tensor([-128, 127, -1, 0, 5], dtype=torch.int8),)),
    "rshift_int64_63": (lambda x: x >> 63, lambda: (torch.tensor([-3, 3, 0]),)),
    "conj_returned": (lambda x: x.conj(), lambda: (_c64(),)),
    "mH_returned": (lambda x: x.view(1, 2).mH, lambda: (_c64(),)),
    "conj_read": (lambda x: x.conj() * 2, lambda: (_c64(),)),
    "write_through_conj": (_write_conj, lambda: (_c64(),)),
    "neg_view_returned": (lambda x: torch._neg_view(x), lambda: (torch.tensor([1.0, -3.0]),)),
    "neg_view_read": (lambda x: torch._neg_view(x) + 1, lambda: (torch.tensor([1.0, -3.0]),)),
    "write_through_neg_view": (_write_neg_slice, lambda: (torch.tensor([1.0, -3.0, 5.0]),)),
    "set_to_input": (_set_to, lambda: (torch.arange(3.0),)),
    "input_rows_and_base": (_add_rows, _rows),
    "full_overlap_allowed": (lambda x: x.add_(x), lambda: (torch.arange(4.0),)),
    "disjoint_self_add": (lambda x: x[:2].add_(x[2:4]), lambda: (torch.arange(6.0),)),
    "pack_padded_batch_sizes": (lambda x, n: torch._pack_padded_sequence(x, n, True),
                                lambda: (torch.arange(60.0).view(3, 5, 4),
                                         torch.tensor([5, 3, 2]))),
}

RAISING: dict[str, Case] = {
    "mul_int_by_float": (lambda x: x.mul_(1.5),
                         lambda: (torch.tensor([1, 2], dtype=torch.int32),)),
    "mul_float_by_complex": (lambda x: x.mul_(1j), lambda: (torch.tensor([1.0, 2.0]),)),
    "shifted_self_add": (lambda x: x[1:].add_(x[:-1]), lambda: (torch.arange(6.0),)),
    "copy_of_own_transpose": (lambda x: x.copy_(x.t()), lambda: (torch.arange(9.0).view(3, 3),)),
    "add_own_transpose": (lambda x: x.add_(x.t()), lambda: (torch.arange(16.0).view(4, 4),)),
    "mul_by_own_element": (lambda x: x.mul_(x[0]), lambda: (torch.arange(4.0),)),
    "int_to_negative_power": (lambda x: x ** -1,
                              lambda: (torch.tensor([1, 2], dtype=torch.int32),)),
    "argmax_of_bool": (lambda x: x.argmax(), lambda: (torch.tensor([True, False]),)),
    "write_of_inference_tensor": (lambda x: x.add_(1), lambda: (_inference_ones(),)),
}


def _inference_ones() -> torch.Tensor:
    with torch.inference_mode():
        return torch.ones(2)


def _compilers() -> dict[str, Callable[[Any], Any]]:
    return {
        "strict": lambda fn: ef.compile(fn),
        "trace": lambda fn: ef.compile(fn, options={"capture": "trace"}),
        # symbolic sizes: the overlap of two views is judged for every size
        "strict dynamic": lambda fn: ef.compile(fn, dynamic=True),
        "torch.compile": lambda fn: torch.compile(fn, backend="ember"),
    }


def _values(result: Any) -> list[torch.Tensor]:
    items = result if isinstance(result, (tuple, list)) else (result,)
    return [t.resolve_conj().resolve_neg() for t in items]


@pytest.mark.parametrize("compiler", list(_compilers()))
@pytest.mark.parametrize("case", list(MATCHING))
def test_matches_eager(case: str, compiler: str) -> None:
    torch.compiler.reset()
    fn, make = MATCHING[case]
    eager_args, args = make(), make()
    expected = fn(*eager_args)
    got = _compilers()[compiler](fn)(*args)
    for e, g in zip(_values(expected), _values(got), strict=True):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
    for e, g in zip(_values(eager_args), _values(args), strict=True):
        torch.testing.assert_close(g, e, rtol=0, atol=0)  # the inputs after the call


@pytest.mark.parametrize("compiler", list(_compilers()))
@pytest.mark.parametrize("case", list(RAISING))
def test_raises_where_eager_raises(case: str, compiler: str) -> None:
    torch.compiler.reset()
    fn, make = RAISING[case]
    with pytest.raises(RuntimeError) as eager_error:
        fn(*make())
    with pytest.raises(RuntimeError) as ember_error:
        _compilers()[compiler](fn)(*make())
    first_line = str(eager_error.value).splitlines()[0][:40]
    assert first_line in str(ember_error.value)


def test_set_of_an_input_runs_eagerly_and_repoints_it() -> None:
    def g(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.set_(y)
        return x * 1

    for name, compile_ in _compilers().items():
        torch.compiler.reset()
        a, b = torch.zeros(6), torch.ones(3)
        if name == "torch.compile":  # Dynamo runs set_ of an input itself
            out = compile_(g)(a, b)
        else:
            with pytest.warns(UserWarning, match="points graph input x at other memory"):
                out = compile_(g)(a, b)
        assert a.data_ptr() == b.data_ptr() and a.shape == (3,)
        torch.testing.assert_close(out, torch.ones(3))


def test_dynamo_variant_for_a_sharing_pattern_does_not_recompile_itself(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A variant compiled for the very inputs that refused, refusing them again, raises
    instead of compiling yet another variant (it recursed without end)."""
    def refuse(self: ProgramCallable, full: list[Any]) -> None:
        raise InputAliasingError("refused")

    torch.compiler.reset()
    compiled = torch.compile(lambda x, y: x.add_(y), backend="ember")
    compiled(torch.zeros(3), torch.ones(3))
    monkeypatch.setattr(ProgramCallable, "_check_input_aliasing", refuse)
    with pytest.raises(InputAliasingError, match="refused"):
        compiled(torch.zeros(3), torch.ones(3))


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("compiler", list(_compilers()))
def test_a_backward_without_a_symbolic_kernel_trains_at_a_second_size(compiler: str) -> None:
    """``affine_grid``'s backward reads sizes as plain ints: the symbolic compile of the
    second size raised "SymIntArrayRef expected to contain only concrete integers"; the
    aot stage now declines it (eager run, or per-shape programs under Dynamo)."""
    def f(theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.affine_grid(theta, list(x.size()), align_corners=False)

    torch.compiler.reset()
    compiled = _compilers()[compiler](f)
    for batch, size in ((2, 10), (3, 8)):
        theta = torch.arange(batch * 6.0).view(batch, 2, 3).requires_grad_()
        x = torch.zeros(batch, 1, size, size)
        compiled(theta, x).square().sum().backward()
        expected = theta.detach().clone().requires_grad_()
        f(expected, x).square().sum().backward()
        torch.testing.assert_close(theta.grad, expected.grad)


@pytest.mark.parametrize("compiler", list(_compilers()))
def test_an_output_and_its_detached_twin_keep_their_own_autograd(compiler: str) -> None:
    """The kernels return one buffer for ``y`` and ``y.detach()``: marking the detached
    one non-differentiable took ``y``'s gradient away (backward raised "does not require
    grad")."""
    torch.compiler.reset()
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 4)

    def f(x: torch.Tensor) -> dict[str, torch.Tensor]:
        y = layer(x)
        return {"logits": y, "raw": y.detach()}

    x = torch.randn(3, 4)
    out = _compilers()[compiler](f)(x)
    assert out["logits"].requires_grad and not out["raw"].requires_grad
    out["logits"].square().sum().backward()
    got = layer.weight.grad.clone()
    layer.weight.grad = None
    f(x)["logits"].square().sum().backward()
    torch.testing.assert_close(got, layer.weight.grad)


REINTERPRETING_VIEWS: dict[str, Case] = {
    "real_written": (lambda a: a.real.mul_(2), lambda: (_c64().view(1, 2).expand(2, 2).clone(),)),
    "imag_returned": (lambda a: a.imag, lambda: (_c64(),)),
    "view_as_real_written": (lambda a: torch.view_as_real(a).add_(1), lambda: (_c64(),)),
    "int_view_written": (lambda x: x.view(torch.int32).bitwise_xor_(1),
                         lambda: (torch.arange(4.0),)),
}


@pytest.mark.parametrize("compiler", list(_compilers()))
@pytest.mark.parametrize("case", list(REINTERPRETING_VIEWS))
def test_a_view_of_another_dtype_is_returned_as_a_view(case: str, compiler: str) -> None:
    # before: a copy (`aot/output_aliases.py` had no dtype), so the caller's later writes
    # through the result missed the input
    torch.compiler.reset()
    fn, make = REINTERPRETING_VIEWS[case]
    (eager_arg,), (arg,) = make(), make()
    expected, got = fn(eager_arg), _compilers()[compiler](fn)(arg)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert got.dtype == expected.dtype and got.stride() == expected.stride()
    assert got.untyped_storage().data_ptr() == arg.untyped_storage().data_ptr()
    got.zero_()
    expected.zero_()
    torch.testing.assert_close(arg, eager_arg, rtol=0, atol=0)  # the write reached it
