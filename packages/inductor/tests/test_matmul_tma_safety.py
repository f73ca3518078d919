"""The persistent TMA matmul variant is safe to call anywhere: a descriptor operand
whose address is not 16-byte aligned at run time is copied for the call (the wrapper's
test, printed; ``aligned_copy``; numerics, the log and the count through Triton's
interpreter), and a TMA binary asks for global scratch memory (its sm_90 metadata),
which the runtime's launcher provides in every thread (``test_triton_allocator.py``).
The CUDA tests (``-m cuda``, an sm_90 GPU) call a TMA GEMM from a ``threading.Thread``
and with a misaligned input view."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.codegen.triton.matmul_choice import forced_matmul
from ember.inductor.codegen.triton.matmul_tma import HOPPER, assume_capability
from ember.inductor.codegen.triton.testing import triton_for_cpu
from ember.runtime.compiled.triton_alignment import aligned_copy, unaligned_copies
from ember.runtime.config import patch
from ember.runtime.ir import Program
from helpers import compile_and_load, trace

triton = pytest.importorskip("triton")

BF = torch.bfloat16
TMA_SMALL = "tma_bm32_bn32_bk16_g8_s3_w4"
POINTER_SMALL = "bm32_bn32_bk16_g8_s3_w4"


def _interpreter_has_descriptors() -> bool:
    from triton.runtime import interpreter

    return hasattr(interpreter.InterpreterBuilder, "create_make_tensor_descriptor")


needs_descriptors = pytest.mark.skipif(
    not _interpreter_has_descriptors(),
    reason="this Triton's interpreter has no tensor descriptors")


@pytest.fixture
def hopper() -> Iterator[None]:
    with assume_capability(HOPPER, sms=2):
        yield


def _linear_gelu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.gelu(F.linear(x, w, b))


def _inputs(device: str = "cpu", m: int = 64, n: int = 48, k: int = 32
            ) -> list[torch.Tensor]:
    g = torch.Generator(device=device).manual_seed(0)
    return [torch.randn(m, k, generator=g, device=device).to(BF),
            (torch.randn(n, k, generator=g, device=device) / k ** 0.5).to(BF),
            torch.randn(n, generator=g, device=device).to(BF)]


def _unaligned(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values in a view starting one element (2 bytes) into its storage."""
    base = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    view = base[1:].view(t.shape)
    view.copy_(t)
    assert view.data_ptr() % 16 != 0
    return view


def _compiled(fn: Callable[..., Any], inputs: Sequence[torch.Tensor], config: str
              ) -> tuple[Program, Callable[..., list[Any]]]:
    program = trace(fn, inputs)
    with triton_for_cpu(matmul_templates=True), forced_matmul(config):
        compiled, run = compile_and_load(program, precompile=False)
    return compiled, run


def _kernel_lines(compiled: Program) -> list[str]:
    """The wrapper's lines from the first kernel's comment to its launch."""
    lines = [line.strip() for line in compiled.files["forward/wrapper.py"].decode().splitlines()]
    start = lines.index("# kernel0: fused from addmm, gelu")
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("kernel0("))
    return lines[start:end + 1]


def test_the_wrapper_tests_each_descriptor_operands_address(hopper: None) -> None:
    """x and the weight are read through descriptors (tested, copied when unaligned);
    the bias through pointers (not tested); the pointer template tests nothing."""
    compiled, _ = _compiled(_linear_gelu, _inputs(), TMA_SMALL)
    assert _kernel_lines(compiled) == [
        "# kernel0: fused from addmm, gelu",
        "buf1 = _empty((64, 48), (48, 1), torch.bfloat16)",
        ("# arg0, arg1: read through TMA descriptors (16-byte aligned base; else copied for "
         "this call)"),
        ("kernel0(arg0 if arg0.data_ptr() % 16 == 0 else _aligned(arg0, 'arg0', 'kernel0'), "
         "arg1 if arg1.data_ptr() % 16 == 0 else _aligned(arg1, 'arg1', 'kernel0'), arg2, buf1)"),
    ]
    pointer, _ = _compiled(_linear_gelu, _inputs(), POINTER_SMALL)
    assert _kernel_lines(pointer)[-1] == "kernel0(arg0, arg1, arg2, buf1)"


def test_a_tma_kernel_that_falls_back_to_pointers_tests_nothing(hopper: None) -> None:
    """An operand with a fused prologue (a cast) is not TMA-loaded: the kernel is the
    pointer template and its launch has no test."""
    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.gelu(F.linear(x.float().to(BF) * 2, w, b))

    compiled, _ = _compiled(fn, _inputs(), TMA_SMALL)
    wrapper = compiled.files["forward/wrapper.py"].decode()
    assert "_aligned" not in wrapper and "kernel0(arg0, arg1, arg2, buf1)" in wrapper


def test_sm90_tma_binary_asks_for_global_scratch(hopper: None) -> None:
    """The binary's metadata the launcher reads: the TMA kernel's device-side
    descriptors take global scratch memory, the pointer template's kernel none."""
    from ember.runtime.compiled.triton_aot import compile_for_target
    from ember.runtime.compiled.triton_launcher import spec_from_entry

    def scratch(config: str) -> list[int]:
        compiled, _ = _compiled(_linear_gelu, _inputs(), config)
        graphs: Any = compiled.metadata["compiled"]["graphs"]  # type: ignore[index]
        return [compile_for_target(spec_from_entry(e, compiled.files)).global_scratch_bytes
                for e in graphs["forward"]["kernels"]]

    (tma,) = scratch(TMA_SMALL)
    assert tma > 0
    assert scratch(POINTER_SMALL) == [0]


@pytest.mark.parametrize("layout", ["row-major", "transposed", "strided", "expanded"])
def test_aligned_copy_keeps_sizes_strides_and_values(layout: str) -> None:
    base = torch.arange(1, 4 * 8 * 3 + 2, dtype=BF)
    if layout == "row-major":
        t = base[1:33].view(4, 8)
    elif layout == "transposed":
        t = base[1:33].view(8, 4).t()
    elif layout == "strided":  # rows with a gap between them
        t = base[1:1 + 4 * 12].view(4, 12)[:, :8]
    else:
        t = base[1:9].view(1, 8).expand(4, 8)
    assert t.data_ptr() % 16 != 0
    copy = aligned_copy(t)
    assert copy.data_ptr() % 16 == 0
    assert (copy.shape, copy.stride(), copy.dtype) == (t.shape, t.stride(), t.dtype)
    assert copy.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()
    torch.testing.assert_close(copy, t, rtol=0, atol=0)


def test_aligned_copy_returns_an_aligned_or_empty_tensor_itself() -> None:
    t = torch.randn(4, 8).to(BF)
    assert aligned_copy(t) is t
    empty = torch.empty(3, dtype=BF)[1:1]
    assert aligned_copy(empty) is empty


@needs_descriptors
def test_misaligned_inputs_are_copied_for_the_call(hopper: None,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Both descriptor operands arrive 2 bytes past an aligned address: each call
    copies both (counted), the first logs once, the inputs are left as they were."""
    xs = _inputs()
    _, run = _compiled(_linear_gelu, xs, TMA_SMALL)
    x, w = _unaligned(xs[0]), _unaligned(xs[1])
    before = unaligned_copies()
    with patch(logs="autotune"):
        (out1,) = run(x, w, xs[2])
        (out2,) = run(x, w, xs[2])
    assert unaligned_copies() - before == 4
    err = capsys.readouterr().err
    assert err.count("through a TMA descriptor") == 1
    assert ("arg0 (read by kernel0 through a TMA descriptor) is at an address 2 bytes past "
            "a multiple of 16: copied into aligned memory") in err
    expected = _linear_gelu(*xs)
    for out in (out1, out2):
        assert (out.float() - expected.float()).abs().max().item() <= 0.1
    assert torch.equal(x, xs[0]) and torch.equal(w, xs[1])


# --- on an sm_90 GPU (the lead's H200) ---------------------------------------------

hopper_gpu = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
    reason="needs an sm_90 (Hopper) GPU")


def _check(out: torch.Tensor, expected: torch.Tensor, k: int) -> None:
    scale = expected.float().abs().max().item() + 1
    err = (out.float() - expected.float()).abs().max().item()
    assert err <= (1e-2 + 1e-6 * k ** 0.5) * scale * 2, err


def _cuda_compiled(xs: Sequence[torch.Tensor]) -> tuple[str, Callable[..., list[Any]]]:
    with forced_matmul("tma"):
        compiled, run = compile_and_load(trace(_linear_gelu, xs))
    sources = "\n".join(v.decode() for k, v in compiled.files.items()
                        if k.endswith(".py") and not k.endswith("wrapper.py"))
    assert "(TMA, persistent)" in sources
    return compiled.files["forward/wrapper.py"].decode(), run


@pytest.mark.cuda
@hopper_gpu
def test_cuda_tma_gemm_called_from_threads() -> None:
    """Compiled (and first launched) here, then called from two fresh threads at once:
    neither has Triton's allocator until the launcher installs it."""
    xs = _inputs("cuda", 1024, 768, 512)
    _, run = _cuda_compiled(xs)
    (first,) = run(*xs)
    results: dict[int, torch.Tensor] = {}
    errors: list[BaseException] = []

    def call(i: int) -> None:
        try:
            (results[i],) = run(*xs)
            torch.cuda.synchronize()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    expected = _linear_gelu(*xs)
    for out in (first, *results.values()):
        _check(out, expected, 512)


@pytest.mark.cuda
@hopper_gpu
def test_cuda_tma_gemm_first_called_in_a_thread() -> None:
    """The first launch (Triton's JIT path) in a thread that never had an allocator."""
    xs = _inputs("cuda", 512, 256, 128)
    _, run = _cuda_compiled(xs)
    outs: list[torch.Tensor] = []
    thread = threading.Thread(target=lambda: outs.extend(run(*xs)))
    thread.start()
    thread.join()
    assert len(outs) == 1
    _check(outs[0], _linear_gelu(*xs), 128)


@pytest.mark.cuda
@hopper_gpu
def test_cuda_tma_gemm_with_a_misaligned_input_view() -> None:
    n, k = 1024, 512
    xs = _inputs("cuda", 1000, n, k)
    wrapper, run = _cuda_compiled(xs)
    assert "_aligned(arg0, 'arg0'" in wrapper
    x = torch.empty(1000 * k + 1, dtype=BF, device="cuda")[1:].view(1000, k)
    x.copy_(xs[0])
    before = unaligned_copies()
    (out,) = run(x, xs[1], xs[2])
    torch.cuda.synchronize()
    assert unaligned_copies() - before == 1
    _check(out, _linear_gelu(*xs), k)
    (out,) = run(*xs)  # aligned again: no copy
    assert unaligned_copies() - before == 1
    _check(out, _linear_gelu(*xs), k)
