"""The loop IR over symbolic sizes: Sym terms, sympy-proved divisions, size arguments,
printed kernels and C++ sources."""

from __future__ import annotations

import sympy
import torch
from ember.inductor.codegen.cpp.kernel import generate_function
from ember.inductor.loop_ir import (
    Buffer,
    FloorDiv,
    Kernel,
    Load,
    Mod,
    Reduce,
    Store,
    Sym,
    Var,
    add,
    canonical,
    floordiv,
    format_kernel,
    mod,
    mul,
    render,
    render_size,
)
from ember.inductor.loop_ir.symbolic_index import size_symbol

S0, S1 = size_symbol("s0"), size_symbol("s1")
X, Y = Var("x0", S0), Var("x1", S1)


def _c(x: object) -> str:
    return render(x, lambda v: v.name, str)  # type: ignore[arg-type]


def test_sym_terms_merge_into_one_canonical_term() -> None:
    assert canonical(add(x := mul(X, S1), Y)) == canonical(add(Y, mul(S1, X)))
    assert add(S0, Sym(-S0), 4) == add(4)
    assert mul(Sym(S0), S1, 2) == Sym(2 * S0 * S1)
    assert str(mul(add(X, Y), S1)) == "(x0*s1 + x1*s1)"
    assert str(mul(X, Sym(S1 + 1))) == "x0*(s1 + 1)"
    assert str(x) == "x0*s1"


def test_symbolic_division_is_proved_with_sympy() -> None:
    flat = add(mul(X, S1), Y)  # 0 <= x1 < s1
    assert floordiv(flat, S1) == X
    assert mod(flat, S1) == Y
    # not provable: x1 + 3 may reach s1
    assert floordiv(add(flat, 3), S1) == add(X, FloorDiv(add(Y, 3), Sym(S1)))
    assert mod(X, S1) == Mod(X, Sym(S1))
    # (x0*s0*s1 + x1*s0 + z) // (s0*s1) with z < s0
    z = Var("z", S0)
    assert floordiv(add(mul(X, S1, S0), mul(Y, S0), z), S0 * S1) == X
    # a static divisor of a symbolic index keeps the static rules
    assert floordiv(add(mul(X, 64), Var("y", 64)), 64) == X


def test_sizes_print_for_c_and_python() -> None:
    assert render_size(sympy.floor((S0 + 1) / 2)) == "((s0 + 1) / 2)"
    assert render_size(sympy.floor((S0 + 1) / 2), "//") == "((s0 + 1) // 2)"
    assert render_size(3 * sympy.Max(S0, S1) - S1, "//") == "3*max(s0, s1) - s1"
    assert render_size(sympy.Max(S0, S1)) == "std::max<int64_t>(s0, s1)"
    assert _c(floordiv(add(mul(X, S1), Y, 3), S1)) == "(x0 + ((x1 + 3) / s1))"


def _softmax_rows() -> Kernel:
    r = Var("r0", S1)
    idx = add(mul(X, S1), r)
    body = (
        Load("v0", "arg0", idx, torch.float32),
        Reduce("v1", "sum", "v0", torch.float32),
        Store("buf0", X, "v1"),
    )
    return Kernel("k0", (X,), (r,), body,
                  (Buffer("arg0", torch.float32, (S0, S1), (S1, 1)),
                   Buffer("buf0", torch.float32, (S0,), (1,))))


def test_kernel_size_args_and_printed_form() -> None:
    k = _softmax_rows()
    assert k.size_args == ("s0", "s1")
    assert format_kernel(k) == (
        "kernel k0(arg0: float32[s0, s1], buf0: float32[s0], s0: int64, s1: int64) "
        "over [x0<s0] reduce [r0<s1]:\n"
        "    v0: float32 = load arg0[(x0*s1 + r0)]\n"
        "    v1: float32 = reduce_sum(v0)\n"
        "    store buf0[x0] = v1")


def test_cpp_kernel_takes_sizes_and_loops_to_them() -> None:
    src = generate_function(_softmax_rows())
    assert ("void k0(const float* __restrict__ arg0, float* __restrict__ buf0, "
            "const int64_t s0, const int64_t s1)") in src
    assert "for (int64_t x0 = 0; x0 < s0; x0++)" in src
    # the run-time work (s0*s1) against the parallel threshold picks the team's size
    assert "EmberTeam ember_team(s0*s1, 32768, s0);" in src
    # a run-time row length: the float sums are blocked (correct for any length)
    assert "r0b < s1; r0b += 256" in src and "std::min<int64_t>(r0b + 256, s1)" in src


def test_symbolic_divisors_print_in_parentheses() -> None:
    # x0 // (3*s0), never (x0 // 3)*s0
    assert _c(floordiv(X, 3 * S0)) == "(x0 / (3*s0))"
    wide = Var("x2", 4 * S0)  # may pass 3*s0
    assert str(mod(wide, 3 * S0)) == "(x2 % (3*s0))"
    assert mod(X, 3 * S0) == X  # x0 < s0 <= 3*s0


def test_int_coefficients_of_symbolic_strides_divide() -> None:
    # a [s0, s1, 128] row-major index read as [s0*s1, 128]: affine again
    r = Var("r0", 128)
    linear = add(mul(X, 128 * S1), mul(Y, 128), r)
    assert str(linear) == "(x0*s1*128 + x1*128 + r0)"
    assert floordiv(linear, 128) == add(mul(X, S1), Y)
    assert mod(linear, 128) == r


def test_a_symbolic_divisor_splits_at_a_common_factor() -> None:
    # rows of 512 read through a [s0, s1, 512] view: a division per row, not per element
    row, col = Var("x0", S0 * S1), Var("x1", 512)
    flat = add(mul(row, 512), col)
    assert floordiv(flat, 512 * S1) == FloorDiv(row, Sym(S1))
    assert mod(flat, 512 * S1) == add(mul(Mod(row, Sym(S1)), 512), col)
