"""The loop-level IR: index simplification, value levels, reduction passes, printing."""

from __future__ import annotations

import torch
from ember.inductor.loop_ir import (
    Buffer,
    Compute,
    FloorDiv,
    Int,
    Kernel,
    Load,
    Mod,
    Reduce,
    Store,
    Var,
    add,
    floordiv,
    format_kernel,
    mod,
    mul,
    reduction_phases,
    render,
    substitute,
)

X, Y, R = Var("x0", 4), Var("x1", 6), Var("r0", 8)


def test_index_builders_fold_and_flatten() -> None:
    assert add(1, X, 2, add(Y, 3)) == add(X, Y, 6)
    assert mul(add(X, 2), 3) == add(mul(X, 3), 6)
    assert mul(X, 0) == Int(0) and add() == Int(0)


def test_floordiv_and_mod_use_variable_ranges() -> None:
    flat = add(mul(X, 6), Y)  # 0 <= Y < 6
    assert floordiv(flat, 6) == X
    assert mod(flat, 6) == Y
    assert floordiv(flat, 4) == FloorDiv(flat, 4)
    assert mod(mul(X, 6), 3) == Int(0)
    assert floordiv(add(mul(X, 12), Y), 2) == add(mul(X, 6), FloorDiv(Y, 2))
    assert mod(add(mul(X, 12), Y), 4) == Mod(Y, 4)


def test_a_split_dimension_folds_back_into_one_term() -> None:
    # (x0 // 512)*1572864 + (x0 % 512)*3072 + x1: a [16, 512, 3072] view of a [8192, 3072]
    # buffer read over the flat space, is the buffer's own x0*3072 + x1
    a, b = Var("x0", 8192), Var("x1", 3072)
    split = add(mul(floordiv(a, 512), 1572864), mul(mod(a, 512), 3072), b)
    assert split == add(mul(a, 3072), b)
    assert add(floordiv(a, 7), mod(a, 7)) != a  # not a matching pair: kept
    assert add(mul(floordiv(a, 7), 7), mod(a, 7)) == a
    assert add(mul(floordiv(a, 7), 14), mul(mod(a, 7), 2), 5) == add(mul(a, 2), 5)
    # a nested split (x0 split twice) folds step by step
    inner = add(mul(floordiv(mod(a, 64), 8), 8), mod(mod(a, 64), 8))
    assert add(mul(floordiv(a, 64), 64), inner) == a
    for i in (0, 1, 511, 512, 4097, 8191):
        for j in (0, 3071):
            env = {"x0": Int(i), "x1": Int(j)}
            assert substitute(split, lambda v, env=env: env[v.name]) == Int(i * 3072 + j)


def test_floordiv_and_mod_by_a_multiple_of_a_coefficient() -> None:
    # (x0*16384 + x1*128 + x2) over a [8, 128, 128] space, as a 4-d view of it needs
    a, b, c = Var("x0", 8), Var("x1", 128), Var("x2", 128)
    flat = add(mul(a, 16384), mul(b, 128), c)
    assert floordiv(flat, 65536) == FloorDiv(a, 4)
    assert mod(flat, 65536) == add(mul(Mod(a, 4), 16384), mul(b, 128), c)
    assert floordiv(flat, 256) == add(mul(a, 64), FloorDiv(b, 2))
    assert mod(flat, 256) == add(mul(Mod(b, 2), 128), c)
    for i in (0, 3, 4, 7):
        for j in (0, 1, 127):
            for k in (0, 5, 127):
                n = i * 16384 + j * 128 + k
                env = {"x0": Int(i), "x1": Int(j), "x2": Int(k)}
                for d in (256, 65536):
                    q = substitute(floordiv(flat, d), lambda v, env=env: env[v.name])
                    r = substitute(mod(flat, d), lambda v, env=env: env[v.name])
                    assert (q, r) == (Int(n // d), Int(n % d))


def test_render_for_c_and_python() -> None:
    e = add(mul(floordiv(add(mul(X, 6), Y), 4), 2), Int(1))
    assert render(e, lambda v: v.name, str) == "(((x0*6 + x1) / 4)*2 + 1)"
    assert render(e, lambda v: v.name, str, div="//") == "(((x0*6 + x1) // 4)*2 + 1)"
    assert substitute(add(X, Y), lambda v: Int(2) if v == X else v) == add(Y, 2)


def softmax_kernel() -> Kernel:
    i = add(mul(X, 8), R)
    f = torch.float32
    body = (Load("v0", "a", i, f), Reduce("v1", "max", "v0", f),
            Compute("v2", "sub", ("v0", "v1"), f), Compute("v3", "exp", ("v2",), f),
            Reduce("v4", "sum", "v3", f), Compute("v5", "truediv", ("v3", "v4"), f),
            Compute("v6", "mul", ("v4", "v4"), f), Store("b", i, "v5"), Store("c", X, "v6"))
    bufs = (Buffer("a", f, (4, 8), (8, 1)), Buffer("b", f, (4, 8), (8, 1)),
            Buffer("c", f, (4,), (1,)))
    return Kernel("k", (X,), (R,), body, bufs)


def test_reduction_phases_order_passes() -> None:
    k = softmax_kernel()
    assert k.inner_values() == {"v0", "v2", "v3", "v5"}
    before, phases = reduction_phases(k)
    assert before == ()
    names = [[getattr(s, "name", "store") for s in p.inner] for p in phases]
    assert names == [["v0", "v1"], ["v0", "v2", "v3", "v4"], ["v0", "v2", "v3", "v5", "store"]]
    assert [getattr(s, "name", "store") for s in phases[1].after] == ["v6", "store"]


def test_printed_kernel() -> None:
    assert format_kernel(softmax_kernel()) == """\
kernel k(a: float32[4, 8], b: float32[4, 8], c: float32[4]) over [x0<4] reduce [r0<8]:
    v0: float32 = load a[(x0*8 + r0)]
    v1: float32 = reduce_max(v0)
    v2: float32 = sub(v0, v1)
    v3: float32 = exp(v2)
    v4: float32 = reduce_sum(v3)
    v5: float32 = truediv(v3, v4)
    v6: float32 = mul(v4, v4)
    store b[(x0*8 + r0)] = v5
    store c[x0] = v6"""


def test_is_affine_sees_floordiv_and_mod_anywhere() -> None:
    from ember.inductor.loop_ir import Indirect, is_affine

    assert is_affine(add(mul(X, 6), Y, Indirect("v0"), 3))
    assert not is_affine(add(mul(X, 6), FloorDiv(Y, 4)))
    assert not is_affine(mul(Mod(add(X, Y), 5), 2))
