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

