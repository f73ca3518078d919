"""A user output that is a view of a computed value comes back with eager's strides and
storage offset (``lowering/output_views.py``): the computed value is stored whole and
the output is a view of it, as in eager. Before, such outputs came back dense:
``(x + 1).expand(3, 4)`` with strides ``(4, 1)`` instead of ``(0, 1)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from ember.inductor.lowering.output_views import OUTPUT_VIEW_OPS
from ember.runtime.ir import OutputKind, OutputSpec
from helpers import compile_and_load, trace

T = torch.Tensor
aten = torch.ops.aten

# one program per view op of the table: the op sits in the output's chain over a
# computed value, and the output's layout is not dense
CASES: dict[str, Callable[[T], T]] = {
    "aten::expand.default": lambda x: (x + 1)[0].expand(3, 4),
    "aten::slice.Tensor": lambda x: (x * 2)[:, ::2],
    "aten::select.int": lambda x: (x * 2)[:, 1],
    "aten::diagonal.default": lambda x: (x * 2).diagonal(),
    "aten::permute.default": lambda x: (x * 2)[:, ::2].permute(1, 0),
    "aten::t.default": lambda x: (x * 2)[:, ::2].t(),
    "aten::transpose.int": lambda x: (x * 2)[:, ::2].transpose(0, 1),
    "aten::unfold.default": lambda x: (x * 2).unfold(1, 2, 1),
    "aten::view.default": lambda x: (x * 2).view(2, 6)[:, ::2],
    "aten::_unsafe_view.default": lambda x: aten._unsafe_view(x * 2, [2, 6])[:, ::2],
    "aten::squeeze.dim": lambda x: (x * 2).unsqueeze(1)[..., ::2].squeeze(1),
    "aten::squeeze.dims": lambda x: aten.squeeze.dims((x * 2).unsqueeze(1)[..., ::2], [1]),
    "aten::squeeze.default": lambda x: (x * 2).unsqueeze(1)[..., ::2].squeeze(),
    "aten::unsqueeze.default": lambda x: (x * 2)[:, ::2].unsqueeze(0),
    "aten::split.Tensor": lambda x: (x * 2).split(2, dim=1)[1],
    "aten::split_with_sizes.default": lambda x: (x * 2).split([1, 3], dim=1)[1],
    "aten::unbind.int": lambda x: (x * 2).unbind(1)[1],
}


def _run(fn: Callable[[T], Any], backend: str, x: T) -> tuple[Any, list[Any]]:
    options = {} if backend == "cpp" else {"precompile": False}
    program, run = compile_and_load(trace(fn, [x]), **options)
    return program, run(x)


def test_every_view_op_of_the_table_has_a_case() -> None:
    assert set(CASES) == OUTPUT_VIEW_OPS


@pytest.mark.parametrize("op", sorted(CASES))
def test_a_view_output_has_eager_strides(backend: str, op: str) -> None:
    fn = CASES[op]
    x = torch.randn(3, 4)
    program = trace(fn, [x])
    assert op in {n.target for n in program.graphs["forward"].nodes}, program
    expected = fn(x)
    _, (got,) = _run(fn, backend, x)
    torch.testing.assert_close(got, expected)
    assert (got.stride(), got.storage_offset()) == (expected.stride(),
                                                    expected.storage_offset())


def test_the_output_is_a_view_of_the_stored_value(backend: str) -> None:
    # the computed value is stored once, [4] elements; the expanded output views it
    program, (got,) = _run(lambda x: (x.sin() + 1).expand(3, 4), backend, torch.randn(4))
    wrapper = program.files["forward/wrapper.py"].decode()  # type: ignore[attr-defined]
    assert "buf0 = _empty((4,), (1,), torch.float32)" in wrapper, wrapper
    assert "return [buf0.as_strided((3, 4), (0, 1))]" in wrapper, wrapper
    assert got.stride() == (0, 1)


def test_a_dense_output_keeps_its_own_buffer(backend: str) -> None:
    # (x * 2)[1:] is dense: only its rows are computed, into a buffer of their own
    fn: Callable[[T], T] = lambda x: (x * 2)[1:]
    _, (got,) = _run(fn, backend, torch.randn(3, 4))
    assert got.stride() == (4, 1)
    assert got.storage_offset() == 0
    assert got.untyped_storage().nbytes() == 2 * 4 * 4


def test_an_output_saved_for_the_backward_stays_compact(backend: str) -> None:
    # a saved tensor is not a user output: only its elements are kept alive
    x = torch.randn(3, 4)
    program = trace(lambda x: (x * 2)[:, ::2], [x])
    program.signature.outputs["forward"] = [OutputSpec(OutputKind.SAVED_TENSOR)]
    options = {} if backend == "cpp" else {"precompile": False}
    _, run = compile_and_load(program, **options)
    (got,) = run(x)
    assert got.stride() == (2, 1)
    torch.testing.assert_close(got, (x * 2)[:, ::2])


def test_a_view_of_an_input_is_still_a_copy(backend: str) -> None:
    # outputs never alias the caller's inputs by accident
    x = torch.randn(3, 4)
    _, (got,) = _run(lambda x: x[:, ::2], backend, x)
    assert got.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    torch.testing.assert_close(got, x[:, ::2])
