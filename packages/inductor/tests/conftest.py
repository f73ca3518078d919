"""Fixtures shared by the inductor tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(params=["cpp", "triton"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a test for C++ and for Triton (through Triton's interpreter on CPU tensors)."""
    if request.param == "cpp":
        yield "cpp"
        return
    pytest.importorskip("triton")
    from ember.inductor.codegen.triton.testing import triton_for_cpu

    with triton_for_cpu():
        yield "triton"



@pytest.fixture
def gpu_convolution_layouts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every CPU convolution asks for channels-last operands, as on a GPU
    (``layout_plan_rules.CONVOLUTION_ANCHORS``): the layout plan's and the channels-last
    passes' mechanics, tested on CPU tensors. The CPU's own policy (only grouped
    convolutions ask) has its tests in ``test_cpu_convolution_layouts.py``."""
    from ember.inductor.lowering import layout_plan_rules

    monkeypatch.setitem(layout_plan_rules.CONVOLUTION_ANCHORS, "cpu", "all")
