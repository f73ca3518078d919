"""Recording with symbolic shapes (GraphRecorder(dynamic=True)): printed graphs of
symbolic programs, guards with their source lines, specialisation, unbacked sizes, meta
inputs, and the table of torch's size functions."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pytest
import sympy
import torch
from ember.runtime._torch import sympy_functions as F
from ember.runtime.interpreter import run_program
from ember.runtime.ir import InputSpec, SymbolRange, TensorMeta, load, print_graph, save, verify
from ember.runtime.ir import symbolic as S
from ember.runtime.tracing import GraphRecorder, RecordingError
from ember.runtime.tracing_symbolic import TORCH_FUNCTIONS

CPU = torch.device("cpu")


def record(fn: Callable[..., Any], *inputs: torch.Tensor,
           dims: dict[int, tuple[int, int | None]] | None = None) -> str:
    """The printed forward graph of ``fn`` recorded with dim 0 of each input dynamic;
    this file's path printed as ``test.py``."""
    rec = GraphRecorder(dynamic=True)
    fakes = [rec.add_input(x, InputSpec(f"x{i}"), dynamic_dims=dims or {0: (2, None)})
             for i, x in enumerate(inputs)]
    with rec:
        out = fn(*fakes)
    program = rec.finish(list(out) if isinstance(out, tuple) else [out])
    verify(program)
    return print_graph(program.forward).replace(__file__, "test.py")


def at(fn: Callable[..., Any], line: int = 1) -> str:
    """``test.py:N`` for line ``line`` of ``fn``'s body."""
    return f"test.py:{fn.__code__.co_firstlineno + line}"


def test_view_with_a_size_expression() -> None:
    def view(x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0] * 2, -1)

    assert record(view, torch.randn(8, 4)) == (
        "graph forward(%x0: f32[s0, 4]{4,1} cpu):\n"
        "  symbols s0 in [2, inf] hint=8\n"
        "  %view: f32[2*s0, 2]{2,1} cpu = aten::view.default(%x0, [sym(2*s0), -1])"
        f'  # {at(view)} view "return x.view(x.shape[0] * 2, -1)"\n'
        "  return (%view)\n")


def test_slice_to_half_keeps_the_guard_torch_needs_only() -> None:
    def half(x: torch.Tensor) -> torch.Tensor:
        y = x[: x.shape[0] // 2]
        return y * 2

    # s0//2 <= s0 (the slice's bound) is implied by the range and left out; s0//2 != 1
    # is torch's guard for the broadcast in y * 2
    assert record(half, torch.randn(8, 4)) == (
        "graph forward(%x0: f32[s0, 4]{4,1} cpu):\n"
        "  symbols s0 in [2, inf] hint=8\n"
        f'  guard s0//2 != 1  # {at(half, 2)} half "return y * 2"\n'
        "  %slice: f32[s0//2, 4]{4,1} cpu = aten::slice.Tensor(%x0, 0, 0, sym(s0//2))"
        f'  # {at(half)} half "y = x[: x.shape[0] // 2]"\n'
        "  %mul: f32[s0//2, 4]{4,1} cpu = aten::mul.Tensor(%slice, 2)"
        f'  # {at(half, 2)} half "return y * 2"\n'
        "  return (%mul)\n")


def test_cat_of_two_dynamic_inputs() -> None:
    def cat(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, y])

    assert record(cat, torch.randn(8, 4), torch.randn(6, 4)) == (
        "graph forward(%x0: f32[s0, 4]{4,1} cpu, %x1: f32[s1, 4]{4,1} cpu):\n"
        "  symbols s0 in [2, inf] hint=8, s1 in [2, inf] hint=6\n"
        "  %cat: f32[s0+s1, 4]{4,1} cpu = aten::cat.default([%x0, %x1])"
        f'  # {at(cat)} cat "return torch.cat([x, y])"\n'
        "  return (%cat)\n")


def test_branch_on_a_size_is_a_guard_with_its_source_line() -> None:
    def branch(x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 4:
            return x + 1
        return x - 1

    assert record(branch, torch.randn(8, 4), dims={0: (2, 64)}) == (
        "graph forward(%x0: f32[s0, 4]{4,1} cpu):\n"
        "  symbols s0 in [2, 64] hint=8\n"
        f'  guard s0 > 4  # {at(branch)} branch "if x.shape[0] > 4:"\n'
        f'  %add: f32[s0, 4]{{4,1}} cpu = aten::add.Tensor(%x0, 1)  # {at(branch, 2)} branch '
        '"return x + 1"\n'
        "  return (%add)\n")


def test_equal_sizes_share_one_symbol() -> None:
    text = record(lambda x, y: x + y, torch.randn(8, 4), torch.randn(8, 4))
    assert text.splitlines()[:2] == [
        "graph forward(%x0: f32[s0, 4]{4,1} cpu, %x1: f32[s0, 4]{4,1} cpu):",
        "  symbols s0 in [2, inf] hint=8"]


def test_related_sizes_become_one_expression() -> None:
    text = record(lambda x, y: x.reshape(-1) + y, torch.randn(8, 4), torch.randn(32))
    assert text.splitlines()[:2] == [
        "graph forward(%x0: f32[s0, 4]{4,1} cpu, %x1: f32[4*s0]{1} cpu):",
        "  symbols s0 in [2, inf] hint=8"]


def test_comparing_a_size_to_a_constant_specialises_it() -> None:
    def special(x: torch.Tensor) -> torch.Tensor:
        return x * 2 if x.shape[0] == 8 else x

    assert record(special, torch.randn(8, 4)) == (
        "graph forward(%x0: f32[8, 4]{4,1} cpu):\n"
        f'  %mul: f32[8, 4]{{4,1}} cpu = aten::mul.Tensor(%x0, 2)  # {at(special)} special '
        '"return x * 2 if x.shape[0] == 8 else x"\n'
        "  return (%mul)\n")


def test_nonzero_gets_an_unbacked_symbol() -> None:
    def nz(x: torch.Tensor) -> torch.Tensor:
        return torch.nonzero(x)

    assert record(nz, torch.randn(8, 4)) == (
        "graph forward(%x0: f32[s0, 4]{4,1} cpu):\n"
        "  symbols s0 in [2, inf] hint=8, u0 in [0, inf]\n"
        "  %nonzero: i64[u0, 2]{1,u0} cpu = aten::nonzero.default(%x0)"
        f'  # {at(nz)} nz "return torch.nonzero(x)"\n'
        "  return (%nonzero)\n")


def test_sizes_one_and_zero_stay_static_and_ranges_are_checked() -> None:
    rec = GraphRecorder(dynamic=True)
    x = rec.add_input(torch.randn(1, 3), InputSpec("x"), dynamic_dims={0: (0, 8), 1: (1, 8)})
    assert x.shape[0] == 1 and S.is_symbol(rec.symint_to_ir(x.shape[1]))
    with pytest.raises(RecordingError, match=r"input 'y' dim 0: size 9 is outside its "
                                             r"dynamic range \[2, 8\]"):
        rec.add_input(torch.randn(9), InputSpec("y"), dynamic_dims={0: (1, 8)})
    with pytest.raises(RecordingError, match="dynamic dim 3 is out of range for 1 dims"):
        rec.add_input(torch.randn(9), InputSpec("z"), dynamic_dims={3: (2, None)})
    with pytest.raises(RecordingError, match=r"dynamic_dims needs GraphRecorder\(dynamic"):
        GraphRecorder().add_input(torch.randn(4), InputSpec("x"), dynamic_dims={0: (2, 8)})


def test_meta_inputs_keep_their_symbol_names_and_program_round_trips() -> None:
    rec = GraphRecorder(dynamic=True)
    symbols = {"s3": SymbolRange(2, 64, hint=8)}
    x = rec.add_meta_input(TensorMeta(torch.float32, ("s3", 4), (4, 1), CPU),
                           InputSpec("x"), symbols)
    y = rec.add_meta_input(TensorMeta(torch.float32, ("4*s3",), (1,), CPU),
                           InputSpec("y"), symbols)
    assert rec.shape_env is not None and rec.symint_to_ir(y.shape[0]) == "4*s3"
    with rec:
        out = x.reshape(-1) + y
    program = rec.finish([out])
    verify(program)
    assert program.forward.symbols == symbols
    assert [n.meta.sizes for n in program.forward.nodes[:3]] == [  # type: ignore[union-attr]
        ("s3", 4), ("4*s3",), ("4*s3",)]
    buf = io.BytesIO()
    save(program, buf)
    buf.seek(0)
    loaded = load(buf)
    result = run_program(loaded, [torch.ones(3, 4), torch.ones(12)])
    assert torch.equal(result[0], torch.full((12,), 2.0))


def test_item_used_as_a_size_is_bound_by_its_node() -> None:
    def zeros(x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(x.sum().item())  # type: ignore[arg-type]

    lines = [line.split("  #")[0].rstrip()
             for line in record(zeros, torch.tensor([3, 1])).splitlines()]
    assert lines[1:5] == [
        "  symbols s0 in [2, inf] hint=2, u0 in [0, inf]",
        "  %sum: i64[]{} cpu = aten::sum.default(%x0)",
        "  %_local_scalar_dense: int(u0) = aten::_local_scalar_dense.default(%sum)",
        ('  %zeros: f32[u0]{1} cpu = aten::zeros.default([sym(u0)], device=device("cpu"), '
         "pin_memory=False)"),
    ]


def test_static_recorder_refuses_symbolic_values() -> None:
    rec = GraphRecorder()
    with pytest.raises(RecordingError, match="add_meta_input needs GraphRecorder"):
        rec.add_meta_input(TensorMeta(torch.float32, (2,), (1,), CPU), InputSpec("x"), {})
    assert rec.shape_env is None and rec.symint_to_ir(3) == 3


# ---- torch's size functions ---------------------------------------------------------------

s, t = sympy.Symbol("s", integer=True, positive=True), sympy.Symbol("t", integer=True,
                                                                    positive=True)
# One example of each entry of TORCH_FUNCTIONS and its IR text (s -> s0, t -> s1).
CONVERSIONS: dict[type, tuple[sympy.Basic, str]] = {
    F.FloorDiv: (F.FloorDiv(s, t), "s0//s1"),
    F.CleanDiv: (F.CleanDiv(s * t, t), "s0"),
    F.ModularIndexing: (F.ModularIndexing(s, 4, 8), "s0//4%8"),
    F.PythonMod: (F.PythonMod(s, t), "s0%s1"),
    F.Mod: (F.Mod(s, t), "s0%s1"),
    F.Max: (F.Max(s, t), "Max(s0, s1)"),  # type: ignore[no-untyped-call]
    F.Min: (F.Min(s, 3), "Min(3, s0)"),  # type: ignore[no-untyped-call]
    sympy.Max: (sympy.Max(s, t, evaluate=False), "Max(s0, s1)"),
    sympy.Min: (sympy.Min(s, t, evaluate=False), "Min(s0, s1)"),
    F.CeilToInt: (F.CeilToInt(F.IntTrueDiv(s, 4)), "-(-s0//4)"),
    F.FloorToInt: (F.FloorToInt(F.IntTrueDiv(s, t)), "s0//s1"),
    sympy.floor: (sympy.floor(s / 3), "s0//3"),
    sympy.ceiling: (sympy.ceiling(s / 3), "-(-s0//3)"),
    sympy.Mod: (sympy.Mod(s, 5), "s0%5"),
    F.IntTrueDiv: (F.FloorToInt(F.IntTrueDiv(2 * s, 4)), "s0//2"),
    F.PowByNatural: (F.PowByNatural(s, 3), "s0*s0*s0"),
    sympy.Pow: (s**2, "s0*s0"),
    F.Identity: (F.Identity(s + 1), "s0+1"),
}


def test_every_torch_function_in_the_table_converts() -> None:
    assert set(CONVERSIONS) == set(TORCH_FUNCTIONS)
    rec = GraphRecorder(dynamic=True)
    assert rec.symbols is not None
    rec.symbols._bind_name(s, "s0")
    rec.symbols._bind_name(t, "s1")
    for kind, (expr, expected) in CONVERSIONS.items():
        assert S.format(rec.symbols.to_ir(expr, "test")) == expected, kind.__name__


@pytest.mark.parametrize("expr", [F.OpaqueUnaryFn_sqrt(s), F.BitwiseFn_bitwise_and(s, t),
                                  F.Where(s > 2, s, t)])
def test_a_function_outside_the_table_is_named(expr: sympy.Basic) -> None:
    rec = GraphRecorder(dynamic=True)
    assert rec.symbols is not None
    rec.symbols._bind_name(s, "s0")
    rec.symbols._bind_name(t, "s1")
    with pytest.raises(RecordingError, match=f"uses torch's {type(expr).__name__}, which "
                                             "has no IR form"):
        rec.symbols.to_ir(expr, "test")


def test_dynamic_recorder_without_dynamic_dims_records_the_static_program() -> None:
    weight = torch.randn(4, 3)

    def body(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ weight).sum(0)

    printed = []
    for dynamic in (False, True):
        rec = GraphRecorder(dynamic=dynamic)
        x = rec.add_input(torch.randn(5, 4), InputSpec("x"))
        with rec:
            out = body(x)
        printed.append(print_graph(rec.finish([out]).forward))
    assert printed[0] == printed[1]
    assert "symbols" not in printed[1] and "guard" not in printed[1]


def test_runtime_asserts_on_unbacked_sizes_become_guards() -> None:
    def nz(x: torch.Tensor) -> torch.Tensor:
        n = x.sum().item()  # u0, bound by its node: the assert is its range [1, inf]
        torch._check(n > 0)  # type: ignore[no-untyped-call]
        found = torch.nonzero(x)
        torch._check(found.shape[0] <= x.shape[0])  # type: ignore[no-untyped-call]
        return found * 2

    text = record(nz, torch.tensor([3, 1, 0, 2]))
    assert text.splitlines()[1:3] == [
        "  symbols s0 in [2, inf] hint=4, u0 in [1, inf], u1 in [0, inf]",
        "  guard s0 >= u1"]


def test_padding_keeps_its_symbols() -> None:
    # aten::constant_pad_nd's C++ meta kernel needs concrete sizes: without torch's Python
    # meta kernels the recorder specialised both dims (and on CUDA the op failed).
    def pad(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.pad(x, (1, 2))

    assert record(pad, torch.randn(5, 7), dims={0: (2, None), 1: (2, None)}) == (
        "graph forward(%x0: f32[s0, s1]{s1,1} cpu):\n"
        "  symbols s0 in [2, inf] hint=5, s1 in [2, inf] hint=7\n"
        "  %constant_pad_nd: f32[s0, s1+3]{s1+3,1} cpu = "
        "aten::constant_pad_nd.default(%x0, [1, 2], 0.0)"
        f'  # {at(pad)} pad "return torch.nn.functional.pad(x, (1, 2))"\n'
        "  return (%constant_pad_nd)\n")


def test_a_view_into_a_larger_tensor_gets_stride_expressions() -> None:
    # One head of a fused projection: its strides are no expression of its own sizes
    # alone; the row gap stays an int, the batch stride is row * s1 (tracing_views).
    base = torch.randn(2, 5, 24)
    head = base[..., :8].view(2, 5, 2, 4).transpose(1, 2)
    assert record(lambda q: q * 2, head, dims={0: (2, None), 2: (2, None)}).startswith(
        "graph forward(%x0: f32[s0, 2, s1, 4]{24*s1,4,24,1} cpu):\n")
    dense = torch.randn(2, 5, 8).transpose(1, 2)  # dense in another order: symbolic
    assert record(lambda q: q * 2, dense).startswith(
        "graph forward(%x0: f32[s0, 8, 5]{40,1,8} cpu):\n")
