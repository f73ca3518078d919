"""The wrapper tests an extern call's result layout after the call (eager's kernel may
return another layout or dtype than traced), except for the public matmuls it calls
(``codegen/wrapper.OUT_VARIANTS``: ``torch.mm``, ``torch.addmm``, ``torch.bmm``,
``torch.baddbmm``), which return a new row-major tensor of their operands' dtype: a
training step of HF Llama ran 148 such tests a step."""

from __future__ import annotations

import sys
from unittest import mock
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))

from helpers import compile_and_load, trace


def _wrapper(compiled: object) -> str:
    source = compiled.files["forward/wrapper.py"]  # type: ignore[attr-defined]
    return source if isinstance(source, str) else source.decode()


def test_matmul_results_are_not_tested_after_the_call() -> None:
    a, b, c = torch.randn(6, 5), torch.randn(5, 7), torch.randn(3, 6, 5)
    bias = torch.randn(7)

    def fn(x: torch.Tensor, w: torch.Tensor, xb: torch.Tensor, v: torch.Tensor
           ) -> list[torch.Tensor]:
        return [x @ w, torch.addmm(v, x, w), torch.bmm(xb, w.expand(3, 5, 7))]

    compiled, run = compile_and_load(trace(fn, [a, b, c, bias]))
    source = _wrapper(compiled)
    assert "torch.mm(" in source and "torch.bmm(" in source, source
    assert "_layout(" not in source, source
    for got, want in zip(run(a, b, c, bias), fn(a, b, c, bias)):
        torch.testing.assert_close(got, want)
        assert got.stride() == want.stride()


def test_other_extern_results_keep_their_test() -> None:
    x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)

    def fn(a: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return F.conv2d(a, k, padding=1)

    compiled, run = compile_and_load(trace(fn, [x, w]))
    source = _wrapper(compiled)
    assert "convolution" in source and "_layout(" in source, source
    torch.testing.assert_close(run(x, w)[0], fn(x, w))


def test_matmul_operands_are_read_views_and_outputs_keep_as_strided() -> None:
    # w.t() and the [2, 3, 4] input seen as [6, 4] are views only the matmul reads:
    # _read_view (no autograd view record); the output that is a view of the matmul's
    # result is returned through as_strided, an autograd view of it
    x, w = torch.randn(2, 3, 4), torch.randn(5, 4)

    def fn(a: torch.Tensor, k: torch.Tensor) -> list[torch.Tensor]:
        y = (a.reshape(6, 4) @ k.t()).t()
        return [y, y.sin()]

    compiled, run = compile_and_load(trace(fn, [x, w]))
    source = _wrapper(compiled)
    assert "torch.mm(_read_view(arg0, (6, 4), (4, 1), 0), _read_view(arg1, (4, 5), (1, 4), 0))" \
        in source, source
    assert "from ember.runtime.compiled.wrapper_support import read_view" in source
    assert ".as_strided((5, 6), (1, 5))" in source, source
    for got, want in zip(run(x, w), fn(x, w)):
        torch.testing.assert_close(got, want)


def test_a_wrapper_with_read_views_runs_on_a_runtime_without_them() -> None:
    # an older ember-runtime (0.4.1) has no wrapper_support.read_view: the wrapper's
    # own definition, Tensor.as_strided
    from ember.inductor.codegen.wrapper_header import READ_VIEW_LINES

    namespace: dict[str, object] = {}
    with mock.patch.dict(sys.modules, {"ember.runtime.compiled.wrapper_support": None}):
        exec("\n".join(READ_VIEW_LINES), namespace)  # noqa: S102 - the header's own lines
    base = torch.arange(12.0)[2:]
    got = namespace["_read_view"](base, (2, 3), (1, 2), 1)  # type: ignore[operator]
    assert torch.equal(got, base.as_strided((2, 3), (1, 2), 3)) and got._is_view()
