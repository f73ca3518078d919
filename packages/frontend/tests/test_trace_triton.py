"""User Triton kernel launches under trace capture (``options={"capture": "trace"}``,
``ef.capture``): recorded as the same ``ember::triton_kernel`` node strict capture
records (one implementation, ``bytecode/triton_capture.record_launch``), never run on
fake tensors; what cannot be captured is a ``CaptureError`` naming the launch line.

``JITFunction.run`` is replaced by a stub doing the kernels' work with torch (no GPU, no
interpreter); the real kernels run in ``integration_tests/test_user_triton_kernels.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.frontend._torch import is_fake
from ember.runtime.config import patch
from ember.runtime.ir.printer import print_graph

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")
jit_module = pytest.importorskip("triton.runtime.jit")


@triton.jit  # type: ignore[untyped-decorator]
def plus_one(x_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def,name-defined]
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)


@triton.jit  # type: ignore[untyped-decorator]
def double_inplace(x_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def,name-defined]
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ptrs = x_ptr + offs
    tl.store(ptrs, tl.load(ptrs, mask=offs < n) * 2, mask=offs < n)


# NOTE: one config: the eager reference run would benchmark two (no GPU here)
tuned = triton.autotune(configs=[triton.Config({"BLOCK": 4})], key=["n"])(plus_one)
heuristic = triton.heuristics({"BLOCK": lambda args: 8})(plus_one)


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``JITFunction.run`` does the kernels' work with torch; records each launch as
    ``name(grid)``, or ``name(fake)`` if it saw a fake tensor."""
    seen: list[str] = []

    def run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> None:
        name = self.fn.__name__
        meta = dict(zip(self.arg_names, args), **kwargs)
        if any(is_fake(a) for a in args):
            seen.append(f"{name}(fake)")
            return
        seen.append(f"{name}{grid(meta) if callable(grid) else grid}")
        if name == "plus_one":
            args[1].copy_(args[0] + 1)
        else:
            args[0].mul_(2)

    monkeypatch.setattr(jit_module.JITFunction, "run", run)
    return seen


def launch_getitem(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    out = torch.empty_like(y)
    plus_one[(1,)](y, out, y.numel(), BLOCK=8)
    return out * 3


def launch_run(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    out = torch.empty_like(y)
    plus_one.run(y, out, y.numel(), BLOCK=8, grid=(1,), warmup=False)
    return out * 3


def launch_autotuned(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    out = torch.empty_like(y)
    tuned[lambda meta: (triton.cdiv(y.numel(), meta["BLOCK"]),)](y, out, y.numel())
    return out * 3


def launch_heuristic(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    out = torch.empty_like(y)
    heuristic[lambda meta: (triton.cdiv(y.numel(), meta["BLOCK"]),)](y, out, y.numel())
    return out * 3


def two_launches_and_inplace(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    plus_one[(1,)](x, out, x.numel(), BLOCK=8)
    double_inplace[(1,)](x, x.numel(), BLOCK=8)  # writes its input: x is mutated
    out2 = torch.empty_like(out)
    plus_one[(1,)](out, out2, out.numel(), BLOCK=8)
    return out2 + x


LAUNCHES = [launch_getitem, launch_run, launch_autotuned, launch_heuristic,
            two_launches_and_inplace]


def _without_specs(text: str) -> str:
    """``text`` without source comments, each node's spec JSON shown as ``{spec}``."""
    return re.sub(r'"\{.*?\}"\)', '"{spec}")', re.sub(r"  +# .*", "", text))


def _graphs(err: str) -> list[str]:
    """The programs ``EMBER_LOGS=graphs`` printed (each mode heads them its own way),
    without source comments."""
    return [_without_specs(block.split("\n[ember.")[0]).strip()
            for block in err.split("program dialect=aten")[1:]]


@pytest.mark.parametrize("launch", LAUNCHES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_trace_records_the_node_strict_records(
    launch: Callable[[torch.Tensor], torch.Tensor], dynamic: bool, launches: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    results = {}
    for capture in ("strict", "trace"):
        compiled = ef.compile(launch, backend="aot_eager", dynamic=dynamic,
                              options={"capture": capture})
        with patch(logs="graphs"):
            for n in (6, 9):
                x, expected_x = torch.randn(n), None
                expected_x = x.clone()
                expected = launch(expected_x)
                torch.testing.assert_close(compiled(x), expected)
                torch.testing.assert_close(x, expected_x)  # the in-place kernel too
        assert compiled.stats.graph_breaks == 0
        assert compiled.stats.compiles == (1 if dynamic else 2), capture
        results[capture] = _graphs(capsys.readouterr().err)
    assert results["trace"] == results["strict"]
    assert "ember::triton_kernel.default" in results["trace"][0]
    assert not any("(fake)" in seen for seen in launches)  # never run on fake tensors


def test_trace_program_text(launches: list[str]) -> None:
    """The printed form: one node a launch; the kernel writing its input is a copy_ into
    the input; every node of a launch carries the user's launch line."""
    program = ef.capture(two_launches_and_inplace, torch.randn(8))
    text = _without_specs(print_graph(program.forward))
    k = f'ember::triton_kernel.default("{__name__}:'
    assert text.splitlines() == [
        "graph forward(%x: f32[8]{1} cpu):",
        "  %empty_like: f32[8]{1} cpu = aten::empty_like.default(%x, pin_memory=False)",
        "  %detach: f32[8]{1} cpu = aten::detach.default(%empty_like)",
        (f'  %triton_kernel: (f32[8]{{1}} cpu) = {k}plus_one", [%x, %detach], [8, 8, 1], '
         '"{spec}")'),
        "  %copy_: f32[8]{1} cpu = aten::copy_.default(%detach, %triton_kernel.0)",
        (f'  %triton_kernel_1: (f32[8]{{1}} cpu) = {k}double_inplace", [%x], [8, 8, 1], '
         '"{spec}")'),
        "  %copy__1: f32[8]{1} cpu = aten::copy_.default(%x, %triton_kernel_1.0)",
        "  %empty_like_1: f32[8]{1} cpu = aten::empty_like.default(%copy_, pin_memory=False)",
        "  %detach_1: f32[8]{1} cpu = aten::detach.default(%empty_like_1)",
        (f'  %triton_kernel_2: (f32[8]{{1}} cpu) = {k}plus_one", [%copy_, %detach_1], '
         '[8, 8, 1], "{spec}")'),
        "  %copy__2: f32[8]{1} cpu = aten::copy_.default(%detach_1, %triton_kernel_2.0)",
        "  %add: f32[8]{1} cpu = aten::add.Tensor(%copy__2, %copy__1)",
        "  return (%add)",
    ], text
    lines = {n.name: n.source for n in program.forward.nodes}
    for name, text_of_line in [
        ("triton_kernel", "plus_one[(1,)](x, out, x.numel(), BLOCK=8)"),
        ("copy__1", ("double_inplace[(1,)](x, x.numel(), BLOCK=8)  # writes its input: x "
                     "is mutated")),
    ]:
        source = lines[name]
        assert source is not None and source.file == __file__, source
        assert source.text == text_of_line and source.function == "two_launches_and_inplace"
    # plus_one and double_inplace, once each
    assert [re.sub("_[0-9a-f]{16}", "_<sha>", f) for f in sorted(program.files)] == [
        "user_kernels/double_inplace_<sha>.py", "user_kernels/plus_one_<sha>.py"]
    assert launches == []


def test_trace_triton_op_and_wrap_triton(launches: list[str]) -> None:
    """A ``triton_op`` is one opaque call (its derived fake kernel skips the launch);
    ``wrap_triton`` used in the traced code itself launches like the kernel."""

    plus_one_op = ef.triton_op("ember_test_trace::plus_one", mutates_args=())

    @plus_one_op  # type: ignore[untyped-decorator]
    def op(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        ef.wrap_triton(plus_one)[(1,)](x, out, x.numel(), BLOCK=8)
        return out

    def f(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        ef.wrap_triton(plus_one)[(2,)](op(x * 2), out, x.numel(), BLOCK=8)
        return out

    compiled = ef.compile(f, backend="aot_eager", options={"capture": "trace"})
    x = torch.randn(8)
    torch.testing.assert_close(compiled(x), x * 2 + 2)
    assert launches == ["plus_one(1,)", "plus_one(2,)"]  # only when the graph ran
    text = _without_specs(print_graph(ef.capture(f, x).forward))
    assert text.splitlines()[3:6] == [
        "  %mul: f32[8]{1} cpu = aten::mul.Tensor(%x, 2)",
        "  %plus_one: f32[8]{1} cpu = ember_test_trace::plus_one.default(%mul)",
        (f'  %triton_kernel: (f32[8]{{1}} cpu) = ember::triton_kernel.default("{__name__}:'
         'plus_one", [%plus_one, %detach], [8, 8, 2], "{spec}")'),
    ], text


@pytest.mark.parametrize("capture", ["strict", "trace"])
def test_bare_launch_in_a_triton_op_is_skipped_by_its_fake_kernel(
        capture: str, launches: list[str]) -> None:
    """Not through ``wrap_triton``: the derived fake kernel still never launches on fake
    tensors (capture, the aot stage), and the op is one opaque call (no break)."""

    def plus_one_bare(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        plus_one[(1,)](x, out, x.numel(), BLOCK=8)
        return out

    op: Callable[[torch.Tensor], torch.Tensor] = ef.triton_op(
        f"ember_test_trace::bare_{capture}", plus_one_bare)

    def f(x: torch.Tensor) -> torch.Tensor:
        return op(x * 2) * 3

    compiled = ef.compile(f, backend="aot_eager", options={"capture": capture})
    x = torch.randn(8)
    torch.testing.assert_close(compiled(x), (x * 2 + 1) * 3)
    assert compiled.stats.graph_breaks == 0 and compiled.stats.graphs == 1
    assert launches == ["plus_one(1,)"]  # once, when the graph ran


TABLE = torch.arange(8.0)  # a global tensor: a constant of a trace


def reads_a_global(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    plus_one[(1,)](TABLE, out, 8, BLOCK=8)
    return out + x


def test_a_global_tensor_read_by_the_kernel_is_a_constant(launches: list[str]) -> None:
    compiled = ef.compile(reads_a_global, backend="aot_eager", options={"capture": "trace"})
    x = torch.randn(8)
    torch.testing.assert_close(compiled(x), TABLE + 1 + x)
    text = _without_specs(print_graph(ef.capture(reads_a_global, x).forward))
    assert text.splitlines()[3:5] == [
        "  %_tensor_constant0: f32[8]{1} cpu = constant _tensor_constant0",
        (f'  %triton_kernel: (f32[8]{{1}} cpu) = ember::triton_kernel.default("{__name__}:'
         'plus_one", [%_tensor_constant0, %detach], [8, 8, 1], "{spec}")'),
    ], text


def test_unsupported_launch_names_the_launch_line(launches: list[str]) -> None:
    local = triton.autotune(configs=[triton.Config({"BLOCK": 4})], key=["n"])(plus_one)

    def grid_of(meta: dict[str, Any]) -> tuple[int]:
        return (meta["MISSING"],)

    def grid_raises(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        plus_one[grid_of](x, out, 8, BLOCK=8)  # the grid's launch
        return out

    def writes_a_global(x: torch.Tensor) -> torch.Tensor:
        plus_one[(1,)](x, TABLE, 8, BLOCK=8)  # the global's line
        return x

    def made_in_a_function(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        local[(1,)](x, out, x.numel())  # the launch line
        return out

    def warmup(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        plus_one.warmup(x, out, x.numel(), BLOCK=8, grid=(1,))  # the warmup line
        return out

    for fn, line, reason in [
        (made_in_a_function, "local[(1,)](x, out, x.numel())  # the launch line",
         ("launch of the user Triton kernel plus_one (Autotuner) is not captured by trace "
          "capture: no module attribute holds the Triton kernel object")),
        (warmup, "plus_one.warmup(x, out, x.numel(), BLOCK=8, grid=(1,))  # the warmup line",
         ("launch of the user Triton kernel plus_one (JITFunction) is not captured by trace "
          "capture: warmup of the kernel")),
        (grid_raises, "plus_one[grid_of](x, out, 8, BLOCK=8)  # the grid's launch",
         "KeyError: 'MISSING'"),
        (writes_a_global, "plus_one[(1,)](x, TABLE, 8, BLOCK=8)  # the global's line",
         ("is not captured by trace capture: the kernel may write argument out_ptr, a "
          "tensor from outside the traced function (a constant of the graph)")),
    ]:
        compiled = ef.compile(fn, backend="eager", options={"capture": "trace"})
        with pytest.raises(ef.CaptureError) as info:
            compiled(torch.randn(4))
        message = str(info.value)
        assert f"could not trace {fn.__qualname__} at {__file__}:" in message, message
        assert message.splitlines()[0].endswith(f": {line}"), message
        assert reason in message, message
    assert launches == []
