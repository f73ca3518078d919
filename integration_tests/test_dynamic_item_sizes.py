"""``.item()`` of an integer tensor used as a size (issue #15): a strict capture gives it
an unbacked symbol ``u0`` bound by the ``aten::_local_scalar_dense`` node's result
(printed ``int(u0)``); the guards torch's fake tensors ask for are checked when ``u0`` is
bound (a ``ShapeError`` naming the guard, not a silent wrong result); one compile serves
every value, on the eager backend and through aot + inductor; the symbolic program
round-trips through ``.ember``. Code that needs the value as a Python int still breaks at
the ``.item()`` and says why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ember.frontend
import pytest
import torch
from ember.runtime.config import patch
from ember.runtime.interpreter import run_program
from ember.runtime.ir import (
    InputSpec,
    load,
    parse_program,
    print_graph,
    print_program,
    save,
    verify,
)
from ember.runtime.ir.symbolic import ShapeError
from ember.runtime.tracing import GraphRecorder


def sizes_from_item(x: torch.Tensor, n: torch.Tensor) -> tuple[torch.Tensor, ...]:
    k: Any = n.item()  # an int (u0 while captured)
    return x[:k] * 2, torch.zeros(k) + 1, x.view(k, -1).sum(1)


def test_item_as_a_size_prints_an_unbacked_symbol_and_round_trips(tmp_path: Path) -> None:
    rec = GraphRecorder(dynamic=True)
    x = rec.add_input(torch.randn(12, 2), InputSpec("x"))
    n = rec.add_input(torch.tensor(3), InputSpec("n"))
    with rec:
        k: Any = n.item()
        out = torch.zeros(k) + x.sum()
    program = rec.finish([out])
    verify(program)
    text = print_graph(program.forward)
    lines = [line.split("  #")[0].rstrip() for line in text.splitlines()]
    assert lines[:3] == [
        "graph forward(%x: f32[12, 2]{2,1} cpu, %n: i64[]{} cpu):",
        "  symbols u0 in [0, inf]",
        "  %_local_scalar_dense: int(u0) = aten::_local_scalar_dense.default(%n)",
    ], text
    assert any(line.startswith("  %zeros: f32[u0]{1} cpu = aten::zeros.default([sym(u0)]")
               for line in lines), text
    assert print_program(parse_program(print_program(program))) == print_program(program)
    save(program, tmp_path / "item.ember")
    loaded = load(tmp_path / "item.ember")
    assert print_graph(loaded.forward) == text
    for value in (0, 5, 9):
        (got,) = run_program(loaded, [torch.ones(12, 2), torch.tensor(value)])
        torch.testing.assert_close(got, torch.full((value,), 24.0))


@pytest.mark.parametrize("capture", ["strict", "trace"])
@pytest.mark.parametrize("backend", ["eager", None])  # None: the default, aot + inductor
def test_one_compile_serves_every_value(backend: str | None, capture: str) -> None:
    kwargs: dict[str, Any] = {} if backend is None else {"backend": backend}
    fast = ember.frontend.compile(sizes_from_item, options={"capture": capture}, **kwargs)
    for value in (2, 5, 4, 10, 6):
        x, n = torch.randn(20, 3), torch.tensor(value)
        for got, want in zip(fast(x, n), sizes_from_item(x, n), strict=True):
            torch.testing.assert_close(got, want, msg=f"n={value}")
    assert (fast.stats.compiles, fast.stats.graph_breaks) == (1, 0)


@pytest.mark.parametrize("backend", ["eager", None])
def test_the_guards_torch_asks_for_are_checked_when_u0_is_bound(backend: str | None) -> None:
    kwargs: dict[str, Any] = {} if backend is None else {"backend": backend}
    fast = ember.frontend.compile(sizes_from_item, **kwargs)
    x = torch.randn(20, 3)
    fast(x, torch.tensor(4))
    with pytest.raises(ShapeError, match=r"guard '60%u0 == 0' fails for u0=7"):
        fast(x, torch.tensor(7))  # eager: "shape '[7, -1]' is invalid"
    with pytest.raises(ShapeError, match=r"guard 'u0 != 0' fails for u0=0"):
        fast(x, torch.tensor(0))


def int_of_item(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    return x[: int(n.item())] * 2


def branch_on_item(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    k: Any = n.item()  # an int (u0 while captured)
    if k > 3:
        return x * 2
    return x


@pytest.mark.parametrize("fn", [int_of_item, branch_on_item])
def test_code_that_needs_the_int_breaks_at_the_item_and_says_why(
        fn: Any, capsys: pytest.CaptureFixture[str]) -> None:
    fast = ember.frontend.compile(fn, backend="eager")
    with patch(logs=frozenset({"graph_breaks"})):
        for value in (2, 5):
            x, n = torch.randn(6, 2), torch.tensor(value)
            torch.testing.assert_close(fast(x, n), fn(x, n))
    assert fast.stats.graph_breaks == 1 and fast.stats.eager_fallback_calls == 0
    err = capsys.readouterr().err
    assert "Tensor.item() needs the tensor's data (its value is a data-dependent size " \
           "the code after a graph break would need)" in err, err
    line = fn.__code__.co_firstlineno + 1
    assert f"test_dynamic_item_sizes.py:{line} in {fn.__name__}" in err, err  # the .item()


def any_positive(x: torch.Tensor) -> torch.Tensor:
    return x + 10 if any(x > 0) else x - 10


def all_positive(x: torch.Tensor) -> torch.Tensor:
    return x + 10 if all(x > 0) else x - 10


def largest(x: torch.Tensor) -> torch.Tensor:
    return max(x) * 2


def in_order(x: torch.Tensor) -> torch.Tensor:
    return torch.stack(sorted(x)) + 1


@pytest.mark.parametrize("fn", [any_positive, all_positive, largest, in_order])
@pytest.mark.parametrize("dynamic", [None, True])
def test_python_builtins_over_a_tensor_of_symbolic_length_break(fn: Any,
                                                                dynamic: bool | None) -> None:
    """``any(t > 0)``, ``max(t)``, ``sorted(t)``: Python asks for each element's truth
    value, which breaks the graph. Over a tensor of symbolic length, torch's fake tensor
    gives the read a value before the break, and the dead read was left in the graph
    for aot to run on no data (an InterpreterError at the second size)."""
    fast = ember.frontend.compile(fn, backend="inductor", dynamic=dynamic)
    for x in (torch.ones(4), -torch.ones(5), torch.tensor([-1.0, 2.0, 0.5])):
        torch.testing.assert_close(fast(x), fn(x))
    assert fast.stats.graph_breaks >= 1 and fast.stats.eager_fallback_calls == 0


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_item_sizes_on_cuda_through_the_inductor() -> None:
    fast = ember.frontend.compile(sizes_from_item)
    for value in (2, 5, 12):
        x, n = torch.randn(24, 5, device="cuda"), torch.tensor(value, device="cuda")
        for got, want in zip(fast(x, n), sizes_from_item(x, n), strict=True):
            torch.testing.assert_close(got, want, msg=f"n={value}")
    assert fast.stats.compiles == 1
    with pytest.raises(ShapeError, match=r"guard '120%u0 == 0' fails for u0=7"):
        fast(torch.randn(24, 5, device="cuda"), torch.tensor(7, device="cuda"))


def test_item_sizes_through_triton_kernels_on_cpu(tmp_path: Path) -> None:
    # a reduction over 120 // u0 rows: at u0's fallback hint (8192) the row length
    # floors to 0, and the kernel got a block of 0 elements (Triton: "arange's end
    # argument must be greater than the start argument"); Triton's interpreter here
    pytest.importorskip("triton")
    from ember.inductor.codegen.triton.testing import triton_for_cpu

    with triton_for_cpu(), patch(cache_dir=tmp_path):
        fast = ember.frontend.compile(sizes_from_item)
        for value in (2, 5, 12):
            x, n = torch.randn(24, 5), torch.tensor(value)
            for got, want in zip(fast(x, n), sizes_from_item(x, n), strict=True):
                torch.testing.assert_close(got, want, msg=f"n={value}")
    assert fast.stats.compiles == 1


def test_training_through_an_item_size_matches_eager() -> None:
    # the forward keeps the node that binds u0 (the partitioner follows symbols), the
    # backward binds it from the size carrier
    def loss(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        k: Any = n.item()
        return (x[:k] * 2).sin().sum()

    fast = ember.frontend.compile(loss)
    for value in (2, 5, 3):
        x, n = torch.randn(8, 3, requires_grad=True), torch.tensor(value)
        ref = x.detach().clone().requires_grad_(True)
        fast(x, n).backward()
        loss(ref, n).backward()  # type: ignore[no-untyped-call]
        torch.testing.assert_close(x.grad, ref.grad, msg=f"n={value}")
    assert fast.stats.compiles == 1


def item_as_numbers(x: torch.Tensor, n: torch.Tensor) -> tuple[torch.Tensor, ...]:
    k: Any = n.item()  # an int used as a number, not a size: it may be negative
    return x * k, torch.full((3,), k), x.clamp(min=k), x.roll(k, 0), x + n.tolist()


@pytest.mark.parametrize("capture", ["strict", "trace"])
def test_an_item_used_as_a_number_may_be_negative(capture: str) -> None:
    # its symbol's range is [-inf, inf]: the kernels' index arithmetic over it (roll's
    # start, (5 - u0) % 5) rounds as Python does for a negative value too
    fast = ember.frontend.compile(item_as_numbers, options={"capture": capture})
    for value in (3, -7, 0, -1, 12):
        x, n = torch.arange(5), torch.tensor(value)
        for got, want in zip(fast(x, n), item_as_numbers(x, n), strict=True):
            torch.testing.assert_close(got, want, msg=f"n={value}")
    assert fast.stats.compiles == 1


def test_a_symbol_unbounded_below_prints_and_parses() -> None:
    rec = GraphRecorder(dynamic=True)
    x = rec.add_input(torch.arange(5), InputSpec("x"))
    n = rec.add_input(torch.tensor(3), InputSpec("n"))
    with rec:
        out = x * n.item()
    program = rec.finish([out])
    text = print_program(program)
    assert "symbols u0 in [-inf, inf]" in text, text
    assert print_program(parse_program(text)) == text
    (got,) = run_program(program, [torch.arange(5), torch.tensor(-4)])
    torch.testing.assert_close(got, torch.arange(5) * -4)


def views_with_item_sizes(x: torch.Tensor, n: torch.Tensor) -> tuple[torch.Tensor, ...]:
    k: Any = n.item()
    return x.narrow(0, 1, k), x[:k].t(), x.view(k, -1)


@pytest.mark.parametrize("capture", ["strict", "trace"])
@pytest.mark.parametrize("backend", ["eager", None])
def test_views_of_an_input_with_item_sizes_stay_views(backend: str | None,
                                                      capture: str) -> None:
    # the runtime reads u0 off the computed copy's sizes to rebuild each view of x
    kwargs: dict[str, Any] = {} if backend is None else {"backend": backend}
    fast = ember.frontend.compile(views_with_item_sizes, options={"capture": capture},
                                  **kwargs)
    for value in (2, 3, 1):
        x, n = torch.randn(6, 3), torch.tensor(value)
        outs = fast(x, n)
        for got, want in zip(outs, views_with_item_sizes(x, n), strict=True):
            torch.testing.assert_close(got, want, msg=f"n={value}")
            assert got._base is x and got.stride() == want.stride(), f"n={value}"
            assert got.storage_offset() == want.storage_offset(), f"n={value}"
        outs[0].zero_()  # writes through to x, as eager's view does
        assert (x[1:1 + value] == 0).all()
    assert fast.stats.compiles == 1
