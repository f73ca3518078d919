"""Captured user Triton launches in detail: which arguments a kernel writes (read from
its source), symbolic grids, saved programs (the kernel is found by name in this process,
its source hash checked), and ``triton_op``'s derived fake kernel.

Launches run through a stub of ``JITFunction.run`` that does the kernel's work with torch
(no GPU, no interpreter); the real kernels run in ``integration_tests``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.frontend.bytecode.triton_writes import written_parameters
from ember.runtime.config import patch
from ember.runtime.interpreter import run_program
from ember.runtime.ir import IRFormatError, load, save

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")
jit_module = pytest.importorskip("triton.runtime.jit")

# ---- kernels (never launched for real here) ----------------------------------------------


@triton.jit  # type: ignore[untyped-decorator]
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit  # type: ignore[untyped-decorator]
def gather_kernel(idx_ptr, src_ptr, out_ptr, n):  # type: ignore[no-untyped-def]
    i = tl.program_id(0)
    j = tl.load(idx_ptr + i)  # loaded: data, so idx_ptr is only read
    tl.store(out_ptr + i, tl.load(src_ptr + j))


@triton.jit  # type: ignore[untyped-decorator]
def loop_alias_kernel(x_ptr, y_ptr, n, STEP: tl.constexpr):  # type: ignore[no-untyped-def]
    ptrs = y_ptr + tl.arange(0, STEP)
    for _ in range(0, n, STEP):
        tl.store(ptrs, tl.load(ptrs) + 1)
        ptrs += STEP
    other = x_ptr + 1
    tl.load(other)


@triton.jit  # type: ignore[untyped-decorator]
def atomic_kernel(x_ptr, acc_ptr):  # type: ignore[no-untyped-def]
    tl.atomic_add(acc_ptr, tl.load(x_ptr))


@triton.jit  # type: ignore[untyped-decorator]
def block_ptr_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    src = tl.make_block_ptr(base=x_ptr, shape=(n,), strides=(1,), offsets=(0,),
                            block_shape=(BLOCK,), order=(0,))
    dst = tl.make_block_ptr(base=out_ptr, shape=(n,), strides=(1,), offsets=(0,),
                            block_shape=(BLOCK,), order=(0,))
    tl.store(tl.advance(dst, (0,)), tl.load(src))


@triton.jit  # type: ignore[untyped-decorator]
def _store_through(ptr, value):  # type: ignore[no-untyped-def]
    tl.store(ptr, value)


@triton.jit  # type: ignore[untyped-decorator]
def helper_kernel(a_ptr, b_ptr, c_ptr):  # type: ignore[no-untyped-def]
    _store_through(c_ptr + 1, tl.load(a_ptr) + tl.load(b_ptr))


HELPERS = (_store_through,)


@triton.jit  # type: ignore[untyped-decorator]
def unresolved_kernel(a_ptr, b_ptr):  # type: ignore[no-untyped-def]
    HELPERS[0](b_ptr, tl.load(a_ptr))


@pytest.mark.parametrize(("kernel", "written"), [
    (copy_kernel, {"out_ptr"}),
    (gather_kernel, {"out_ptr"}),
    (loop_alias_kernel, {"y_ptr"}),
    (atomic_kernel, {"acc_ptr"}),
    (helper_kernel, {"c_ptr"}),
    (triton.autotune(configs=[triton.Config({"BLOCK": 4})], key=["n"])(copy_kernel),
     {"out_ptr"}),
], ids=["store", "loaded_index", "loop_alias", "atomic", "jit_helper", "autotuned"])
def test_written_parameters(kernel: Any, written: set[str]) -> None:
    assert written_parameters(kernel) == written


def test_block_pointers_are_followed() -> None:
    found = written_parameters(block_ptr_kernel)
    assert found is not None and "out_ptr" in found and "x_ptr" not in found


def test_unsure_means_every_argument_is_written() -> None:
    assert written_parameters(unresolved_kernel) is None


# ---- capture, run, save --------------------------------------------------------------------


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """``JITFunction.run`` does ``copy_kernel``'s work (out = x + 1) with torch; records
    each launch's grid (evaluated) and sizes."""
    seen: list[tuple[Any, ...]] = []

    def run(self: Any, x: torch.Tensor, out: torch.Tensor, n: int, *rest: Any,
            grid: Any, warmup: bool, **kwargs: Any) -> None:
        seen.append((grid(dict(kwargs, n=n)) if callable(grid) else grid, n))
        out.copy_(x + 1)

    monkeypatch.setattr(jit_module.JITFunction, "run", run)
    return seen


def launch_symbolic(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    out = torch.empty_like(y)
    copy_kernel[lambda meta: (triton.cdiv(y.numel(), meta["BLOCK"]),)](
        y, out, y.numel(), BLOCK=4)
    return out * 3


def test_symbolic_sizes_reach_the_grid(launches: list[tuple[Any, ...]],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    compiled = ef.compile(launch_symbolic, backend="aot_eager", dynamic=True)
    with patch(logs="graphs"):
        for n in (5, 9):
            x = torch.randn(n)
            torch.testing.assert_close(compiled(x), (x * 2 + 1) * 3)
    assert launches == [((2,), 5), ((3,), 9)]  # one capture, the grid from the sizes
    assert compiled.stats.graphs == 1 and compiled.stats.graph_breaks == 0
    assert compiled.stats.compiles == 1
    err = capsys.readouterr().err
    assert f'ember::triton_kernel.default("{__name__}:copy_kernel", [%mul, %detach], ' \
           "[sym(s0), 4, sym((s0+3)//4)]" in err


def _captured(tmp_path: Path) -> Path:
    """The ``core-functional`` program of ``launch_symbolic`` (the aot stage kept the
    kernel's source file), as the pipeline saved it."""
    compiled = ef.compile(launch_symbolic, backend="aot_eager")
    with patch(debug_dir=tmp_path):
        compiled(torch.randn(6))
    return tmp_path / "1_aot.ember"


def _run(program: Any) -> torch.Tensor:
    x = torch.randn(6)
    (out,) = run_program(program, [x])
    torch.testing.assert_close(out, (x * 2 + 1) * 3)
    return out


def _user_kernel_cause(error: BaseException) -> IRFormatError:
    current: BaseException | None = error
    while current is not None and not isinstance(current, IRFormatError):
        current = current.__cause__
    assert isinstance(current, IRFormatError), repr(error)
    return current


def test_saved_program_runs_and_carries_the_source(
        tmp_path: Path, launches: list[tuple[Any, ...]]) -> None:
    program = load(_captured(tmp_path), trusted=True)  # it calls an ember:: op
    (name,) = program.files
    assert name.startswith("user_kernels/copy_kernel_") and name.endswith(".py")
    text = program.files[name].decode()
    assert text.startswith(f"# {__name__}.copy_kernel\ndef copy_kernel(x_ptr, out_ptr, n,")
    _run(program)
    again = tmp_path / "again.ember"
    save(program, again)
    assert load(again, trusted=True).files == program.files


def test_unresolvable_kernel_is_an_ir_format_error(
        tmp_path: Path, launches: list[tuple[Any, ...]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    program = load(_captured(tmp_path), trusted=True)  # it calls an ember:: op
    monkeypatch.delitem(globals(), "copy_kernel")
    with pytest.raises(Exception) as info:
        _run(program)
    message = str(_user_kernel_cause(info.value))
    assert f"user Triton kernel {__name__}:copy_kernel: module {__name__!r} has no " \
           "attribute 'copy_kernel'" in message


def test_changed_kernel_source_is_an_ir_format_error(
        tmp_path: Path, launches: list[tuple[Any, ...]]) -> None:
    program = load(_captured(tmp_path), trusted=True)  # it calls an ember:: op
    node = next(n for n in program.forward.nodes if n.target == "ember::triton_kernel.default")
    spec = json.loads(node.args[3])
    spec["source_sha256"] = "0" * 64
    node.args = (*node.args[:3], json.dumps(spec))
    with pytest.raises(Exception) as info:
        _run(program)
    assert "its source differs from the one the program was captured with" in str(
        _user_kernel_cause(info.value))


# ---- triton_op ----------------------------------------------------------------------------


def test_triton_op_derives_its_fake_kernel(launches: list[tuple[Any, ...]]) -> None:
    @ef.triton_op("ember_test_capture::plus_one", mutates_args=())
    def plus_one(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        ef.wrap_triton(copy_kernel)[(1,)](x, out, x.numel(), BLOCK=8)
        return out

    def f(x: torch.Tensor) -> torch.Tensor:
        return plus_one(x * 2) * 3

    compiled = ef.compile(f, backend="aot_eager")
    x = torch.randn(8)
    torch.testing.assert_close(compiled(x), (x * 2 + 1) * 3)
    torch.testing.assert_close(plus_one(x), x + 1)  # eager too
    assert compiled.stats.graph_breaks == 0
    assert len(launches) == 2  # on real tensors only: never while capturing
    with pytest.raises(TypeError, match="wrap_triton takes a @triton.jit kernel"):
        ef.wrap_triton(f)

    def direct(x: torch.Tensor) -> torch.Tensor:  # wrap_triton in compiled code itself
        out = torch.empty_like(x)
        ef.wrap_triton(copy_kernel)[(1,)](x, out, x.numel(), BLOCK=8)
        return out

    compiled_direct = ef.compile(direct, backend="aot_eager")
    torch.testing.assert_close(compiled_direct(x), x + 1)
    assert compiled_direct.stats.graph_breaks == 0 and len(launches) == 3


def test_kernel_no_module_holds_is_a_named_break(launches: list[tuple[Any, ...]]) -> None:
    local = triton.autotune(configs=[triton.Config({"BLOCK": 4})], key=["n"])(copy_kernel)

    def f(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        local[(1,)](x, out, x.numel())
        return out * 2

    compiled = ef.compile(f, backend="eager")
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), (x + 1) * 2)
    assert compiled.stats.graph_breaks == 1 and len(launches) == 1
    (info,) = compiled.breaks
    assert info.reason == ("launch of the user Triton kernel copy_kernel (Autotuner): no "
                           "module attribute holds the Triton kernel object (made inside a "
                           "function?): a compiled launch finds its kernel by name")


def test_a_tl_dtype_constexpr_is_captured(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[Any] = []

    def run(self: Any, x: torch.Tensor, out: torch.Tensor, n: int, *rest: Any,
            grid: Any, warmup: bool, **kwargs: Any) -> None:
        seen.append(kwargs["OUT_DTYPE"])
        out.copy_(x + 1)

    monkeypatch.setattr(jit_module.JITFunction, "run", run)

    def f(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        copy_kernel[(1,)](x, out, x.numel(), BLOCK=8, OUT_DTYPE=tl.float16)
        return out

    compiled = ef.compile(f, backend="eager")
    with patch(logs="graphs"):
        x = torch.randn(8)
        torch.testing.assert_close(compiled(x), x + 1)
    assert compiled.stats.graph_breaks == 0
    assert seen == [tl.float16]  # rebuilt from its name when the node runs
    assert '{\\"kind\\":\\"tl_dtype\\",\\"name\\":\\"OUT_DTYPE\\",\\"value\\":\\"fp16\\"}' in (
        capsys.readouterr().err)
