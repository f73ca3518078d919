"""Combo kernels (``codegen/triton/combo.py``): a pointwise kernel of independent parts,
fused side by side, runs one part per program (``tl.program_id(1)``) instead of every
program doing every part in lockstep; constants are computed again in each part; parts
that share a buffer stay one. Source checks and runs through Triton's interpreter."""

from __future__ import annotations

import re

import pytest
import torch
from ember.inductor.codegen.triton.combo import combo_parts
from ember.inductor.codegen.triton.testing import triton_for_cpu
from ember.inductor.compile import compile_graph
from helpers import compile_for, trace

pytest.importorskip("triton")


def _kernels(fn, inputs):  # type: ignore[no-untyped-def]
    """The generated kernels' ``KernelSource`` of ``fn`` (Triton for CPU tensors)."""
    with triton_for_cpu():
        compiled = compile_graph(trace(fn, inputs), "forward", torch.device("cpu"))
    return [source for _, source in compiled.kernels]


def _updates(*xs: torch.Tensor) -> list[torch.Tensor]:
    # an optimizer-like step: independent updates sharing only constants
    return [xs[i] * 0.9 + xs[i + 1] * (1 - 0.9) for i in range(0, len(xs), 2)]


def _checked_source(fn, inputs):  # type: ignore[no-untyped-def]
    """The one kernel's source of ``fn``, after its interpreter run matched eager."""
    with triton_for_cpu():
        _, run = compile_for(fn, *inputs, backend="triton")
        outs = run(*inputs)
    for got, want in zip(outs, fn(*inputs)):
        torch.testing.assert_close(got, want)
    (kernel,) = _kernels(fn, inputs)
    return kernel.source


def test_independent_updates_run_one_part_a_program() -> None:
    inputs = [torch.randn(300) for _ in range(8)]
    source = _checked_source(_updates, inputs)
    assert "part = tl.program_id(1)" in source, source
    assert [int(n) for n in re.findall(r"if part == (\d+):", source)] == [0, 1, 2, 3], source
    # each part computes its own constants: 0.9 appears once per part
    assert source.count("tl.full([], 0.9,") == 4, source


def test_parts_sharing_an_input_stay_one() -> None:
    def shared(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
        return [x + a, x * b]

    inputs = [torch.randn(300) for _ in range(3)]
    source = _checked_source(shared, inputs)
    assert "program_id(1)" not in source, source  # x is loaded once, in lockstep


def test_the_combo_grid_has_a_program_row_per_part() -> None:
    inputs = [torch.randn(2048) for _ in range(6)]
    (kernel,) = _kernels(_updates, inputs)
    assert list(kernel.meta["grid"])[1] == 3, kernel.meta


def test_a_reduction_kernel_is_no_combo() -> None:
    from ember.inductor.loop_ir import Kernel

    kernel = Kernel.__new__(Kernel)
    object.__setattr__(kernel, "template", None)
    object.__setattr__(kernel, "reduction_ranges", (object(),))
    assert combo_parts(kernel) is None


def test_a_combo_kernel_compiles_for_sm90(monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: object) -> None:
    """Triton's compiler (no GPU: an sm_90 target) takes the ``if part == i:`` blocks,
    constants defined again in each."""
    from ember.runtime.compiled.triton_aot import compile_for_target
    from ember.runtime.compiled.triton_launcher import spec_from_entry
    from helpers import compile_and_load

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    inputs = [torch.randn(4096) for _ in range(6)]
    with triton_for_cpu():
        compiled, _ = compile_and_load(trace(_updates, inputs), precompile=False)
    (entry,) = compiled.metadata["compiled"]["graphs"]["forward"]["kernels"]
    spec = spec_from_entry(entry, compiled.files)
    ptx = compile_for_target(spec).asm["ptx"]
    assert ".target sm_90" in ptx
    assert ptx.count("st.global") >= 3, ptx  # each part's store
