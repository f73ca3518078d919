"""NumPy code on tensors in strict capture: traced as tensor ops (bytecode/numpy_rules.py).

Every program runs eagerly and compiled (three calls on new inputs) and must give the
same values and dtypes, ``np.ndarray`` where eager gives one (NumPy scalars where eager
gives scalars), in one graph with no break and one compile. The per-entry tables at
the bottom exercise every entry of the NumPy rule tables.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import ember.frontend as ef
import numpy as np
import pytest
import torch
from ember.frontend.bytecode.numpy_rules import (
    ARRAY_ATTRIBUTES,
    ARRAY_METHODS,
    NUMPY_FUNCTIONS,
    NUMPY_METADATA_FUNCTIONS,
    TORCH_CONVERSIONS,
)
from strict_helpers import strict


def assert_same_numpy(got: Any, expected: Any) -> None:
    """Same structure, types, dtypes and values (NumPy arrays, NumPy scalars, tensors)."""
    assert type(got) is type(expected), (type(got), type(expected))
    if isinstance(expected, (np.ndarray, np.generic)):
        assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
        assert np.shape(got) == np.shape(expected)
        np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-5,
                                   atol=1e-6, equal_nan=True)
    elif isinstance(expected, torch.Tensor):
        # NumPy's and torch's float32 exp/log may differ in the last bit
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6, equal_nan=True)
    elif isinstance(expected, (list, tuple)):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert_same_numpy(g, e)
    elif isinstance(expected, dict):
        assert got.keys() == expected.keys()
        for k in expected:
            assert_same_numpy(got[k], expected[k])
    else:
        assert got == expected


def check_numpy(fn: Callable[..., Any], make_args: Callable[[int], tuple[Any, ...]],
                calls: int = 3) -> Any:
    """Compile ``fn``; each call on new arguments matches eager; one graph, no break,
    one compile."""
    compiled = strict(fn)
    for i in range(calls):
        expected = fn(*make_args(i))
        got = compiled(*make_args(i))
        assert_same_numpy(got, expected)
    stats = compiled.stats
    assert (stats.graphs, stats.graph_breaks, stats.compiles) == (1, 0, 1), stats
    return compiled


def floats(i: int) -> tuple[torch.Tensor]:
    return (torch.rand(4, 3, generator=torch.Generator().manual_seed(i)) + 0.1,)


def two_floats(i: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(i)
    return torch.rand(4, 3, generator=g) + 0.1, torch.rand(4, 3, generator=g) + 0.1


# ---- the corpus: programs a user writes ----------------------------------------------

def reductions(x: torch.Tensor) -> Any:
    a = x.numpy()
    return (np.mean(a), np.mean(a, axis=0), np.sum(a, axis=1, keepdims=True),
            np.max(a, axis=-1), np.std(a), np.var(a, axis=0, ddof=1), np.argmax(a),
            a.min(axis=0), a.prod(), np.cumsum(a, axis=1))


def int_reductions(x: torch.Tensor) -> Any:
    i = (x.numpy() * 10).astype(np.int32)
    # NumPy: the mean of ints is float64; sum/cumsum of int32 accumulate in int64
    return np.mean(i), np.sum(i), np.cumsum(i), i.sum(axis=0), np.argmin(i, axis=1)


def broadcasting(x: torch.Tensor, y: torch.Tensor) -> Any:
    a, b = x.numpy(), y.numpy()
    col = a[:, :1]
    row = b[0]
    return a - col, a * row + 1.0, (a[:, None, :] - b[None, :, :]).sum(axis=-1), a / 2


def meshgrid(x: torch.Tensor) -> Any:
    n, m = x.shape
    xs, ys = np.meshgrid(np.arange(m), np.linspace(0.0, 1.0, n))
    grid = np.stack([xs, ys], axis=-1)
    return torch.from_numpy(grid) * x.unsqueeze(-1), xs, ys.dtype


def attributes(x: torch.Tensor) -> Any:
    a = x.numpy()
    return a.shape, a.ndim, a.size, a.dtype, a.T, a.itemsize, a.nbytes, len(a), \
        a.dtype == np.float32, str(a.dtype), isinstance(a, np.ndarray), type(a) is np.ndarray


def methods(x: torch.Tensor) -> Any:
    a = x.numpy()
    b = a.reshape(3, 4).astype(np.float64).transpose()
    c = a.copy()
    c.sort(axis=1)
    return b, b.flatten(), a.ravel().argsort(), c, a.clip(0.3, 0.7).round(2), a.squeeze()


def dtype_promotion(x: torch.Tensor) -> Any:
    a = x.numpy()
    i = np.arange(3)  # int64
    return (a + i, a * 2, a * 2.5, i / 2, i // 2, i ** 2, a + np.float64(1.0),
            np.sqrt(i), np.exp(i.astype(np.int8)), i.mean(), np.zeros(3),
            np.ones(2, dtype=np.int32) + 1, np.float32(2.0) * a)


def round_trips(x: torch.Tensor) -> Any:
    a = np.asarray(x)
    b = np.exp(a) - 1.0
    t = torch.from_numpy(b)
    u = torch.as_tensor(np.log1p(t.numpy()), dtype=torch.float64)
    v = torch.tensor(np.tanh(u.numpy()))
    return t.sum(), u, v, np.array(x).sum()


def indexing(x: torch.Tensor) -> Any:
    a = x.numpy().copy()
    a[0] = 0.0
    a[:, 1] += 1.0
    a[1:3, ::2] *= 2
    rows = [row.sum() for row in a]
    return a, a[-1], a[1, 2], a[..., 0], a[np.newaxis].shape, rows


def linalg(x: torch.Tensor, y: torch.Tensor) -> Any:
    a, b = x.numpy(), y.numpy()
    return (a @ b.T, np.matmul(a.T, b), np.dot(a[0], b[0]), np.einsum("ij,ij->i", a, b),
            np.outer(a[0], b[0]), np.where(a > b, a, -b), np.concatenate([a, b], axis=0))


def array_input(a: np.ndarray, t: torch.Tensor) -> Any:
    return a * 2.0 + t.numpy(), np.mean(a, axis=0), a


def returns_views(x: torch.Tensor) -> Any:
    a = x.numpy()  # shares memory with x, as in eager
    a[0, 0] = 5.0
    return x.clone(), a.T


def views_and_copies(x: torch.Tensor) -> Any:
    a = x.numpy().copy()
    r = a.reshape(3, 4)  # views: writes through them change a
    r[0, 0] = 100.0
    t = a.T
    t[1, 0] = -1.0
    s = a[1:3]
    s *= 2
    f = a.flatten()  # a copy: writes to it do not
    f[0] = 7.0
    c = a.conj()  # a real array's conj() is the array itself
    c[3, 2] = 0.5
    return a, f, r


def copy_module(x: torch.Tensor) -> Any:
    a = x.numpy()
    b, c = copy.deepcopy(a), copy.copy(a)  # new arrays: writes do not reach a
    b[0] = 5.0
    c[1] = 6.0
    return a, b, c


WEIGHTS = np.linspace(0.5, 1.5, 3)  # a global array: a graph input, read at every call


def mixed_scalars_and_globals(x: torch.Tensor) -> Any:
    a = x.numpy()
    scale = np.mean(a)  # a NumPy scalar: tensors take it as a number
    picked = a[np.array([0, 2])]  # integer-array indexing
    return x * scale, scale * x, torch.from_numpy(WEIGHTS) * x, picked @ WEIGHTS


CORPUS: list[tuple[Callable[..., Any], Callable[[int], tuple[Any, ...]]]] = [
    (reductions, floats),
    (int_reductions, floats),
    (broadcasting, two_floats),
    (meshgrid, floats),
    (attributes, floats),
    (methods, floats),
    (dtype_promotion, floats),
    (round_trips, floats),
    (indexing, floats),
    (linalg, two_floats),
    (array_input, lambda i: (np.full((4, 3), float(i)), floats(i)[0])),
    (returns_views, floats),
    (mixed_scalars_and_globals, floats),
    (views_and_copies, floats),
    (copy_module, floats),
]


@pytest.mark.parametrize("fn,make_args", CORPUS, ids=[fn.__name__ for fn, _ in CORPUS])
def test_corpus_matches_eager_in_one_graph(fn: Callable[..., Any],
                                           make_args: Callable[[int], tuple[Any, ...]]) -> None:
    check_numpy(fn, make_args)


def test_returned_arrays_are_ndarrays_and_scalars_are_numpy_scalars() -> None:
    def f(x: torch.Tensor) -> Any:
        a = x.numpy()
        return np.mean(a), np.asarray(x.sum()), a * 2

    got = strict(f)(torch.ones(2, 2))
    assert type(got[0]) is np.float32 and type(got[1]) is np.ndarray
    assert got[1].shape == () and type(got[2]) is np.ndarray


def test_input_array_mutation_reaches_the_caller() -> None:
    def f(a: np.ndarray) -> Any:
        a[0] += 1.0
        return a * 2

    a = np.zeros(3)
    out = strict(f)(a)
    np.testing.assert_array_equal(a, [1.0, 0.0, 0.0])
    np.testing.assert_array_equal(out, [2.0, 0.0, 0.0])


def test_new_array_shape_recompiles() -> None:
    def f(a: np.ndarray) -> Any:
        return a.sum(axis=0)

    compiled = strict(f)
    for shape in ((2, 3), (2, 3), (4, 3)):
        a = np.ones(shape)
        np.testing.assert_array_equal(compiled(a), f(a))
    assert compiled.stats.compiles == 2


def test_unsupported_function_breaks_naming_it() -> None:
    def f(x: torch.Tensor) -> Any:
        a = x.numpy() + 1.0
        return np.unique(a)

    x = torch.tensor([1.0, 2.0, 1.0])
    compiled = strict(f)
    np.testing.assert_array_equal(compiled(x), f(x))
    assert compiled.stats.graph_breaks == 1
    reasons = [b.reason for b in ef.explain(f)(x).breaks]
    assert reasons == ["numpy function numpy.unique is not supported in capture"]


def test_arrays_live_at_a_break_are_real_then_inputs_again() -> None:
    def f(x: torch.Tensor) -> Any:
        a = np.exp(x.numpy())
        b = a.sum(axis=0)
        print("break")  # a and b are real arrays here, graph inputs of the next graph
        return torch.from_numpy(a / b), b.dtype

    compiled = strict(f)
    for i in range(3):
        x = floats(i)[0]
        assert_same_numpy(compiled(x), f(x))
    assert (compiled.stats.graphs, compiled.stats.graph_breaks) == (2, 1)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("program", [reductions, views_and_copies])
def test_numpy_program_compiles_through_the_backends(backend: str, program: Any) -> None:
    compiled = ef.compile(program, backend=backend)
    x = floats(0)[0]
    assert_same_numpy(compiled(x), program(x))
    assert compiled.stats.graph_breaks == 0


def test_array_escaping_to_eager_code_is_real(capsys: pytest.CaptureFixture[str]) -> None:
    def f(x: torch.Tensor) -> Any:
        a = x.numpy() * 2
        print(a)  # a break: print runs for real on a real array
        return a.sum()

    x = torch.arange(3.0)
    expected = f(x)
    eager_out = capsys.readouterr().out
    compiled = strict(f)
    assert_same_numpy(compiled(x), expected)
    assert capsys.readouterr().out == eager_out == "[0. 2. 4.]\n"
    assert compiled.stats.graph_breaks == 1


def test_break_with_a_bound_array_method_on_the_stack() -> None:
    def f(x: torch.Tensor) -> Any:
        a = x.numpy() * 2
        return a.astype(_dtype_from_eager_code())  # a.astype is live across the break

    compiled = strict(f)
    x = torch.arange(3.0)
    assert_same_numpy(compiled(x), f(x))
    # the state at the break is rebuilt (the method of the real array), not given up on
    reasons = [b.reason for b in ef.explain(f)(x).breaks]
    assert reasons and not any("cannot rebuild" in r for r in reasons), reasons


def _dtype_from_eager_code() -> Any:
    print("break")
    return np.int16


def test_array_stored_on_a_module_is_real() -> None:
    class Keep(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.last = np.exp(x.numpy())
            return x + 1

    m = Keep()
    compiled = ef.compile(m, backend="eager")
    x = torch.zeros(2)
    compiled(x)
    assert type(m.last) is np.ndarray and m.last.dtype == np.float32
    np.testing.assert_array_equal(m.last, [1.0, 1.0])
    assert compiled.stats.graph_breaks == 0


def test_array_and_tensor_operator_raises_as_in_eager() -> None:
    def f(x: torch.Tensor) -> Any:
        return x.numpy() + x

    x = torch.ones(3)
    with pytest.raises(TypeError) as eager:
        f(x)
    with pytest.raises(TypeError) as compiled:
        strict(f)(x)
    assert str(compiled.value) == str(eager.value)


def test_data_dependent_use_breaks() -> None:
    def f(x: torch.Tensor) -> Any:
        m = np.mean(x.numpy())
        return x * 2 if m > 0 else x

    x = torch.ones(3)
    compiled = strict(f)
    torch.testing.assert_close(compiled(x), f(x))
    assert compiled.stats.graph_breaks == 1


def test_numpy_of_a_tensor_requiring_grad_raises_as_in_eager() -> None:
    def f(x: torch.Tensor) -> Any:
        return np.sum(x.numpy())

    with pytest.raises(RuntimeError, match="requires grad"):
        strict(f)(torch.ones(2, requires_grad=True))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_cuda_tensor_numpy_raises_and_cpu_round_trip_is_one_graph() -> None:
    def f(x: torch.Tensor) -> Any:
        return np.sum(x.numpy())

    def g(x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(np.exp(x.cpu().numpy())).cuda() + x

    x = torch.ones(3, device="cuda")
    with pytest.raises(TypeError) as eager:
        f(x)
    with pytest.raises(TypeError) as compiled:
        strict(f)(x)
    assert str(compiled.value) == str(eager.value)
    compiled_g = strict(g)
    torch.testing.assert_close(compiled_g(x), g(x))
    assert compiled_g.stats.graph_breaks == 0


def test_numpy_of_a_bfloat16_tensor_raises_as_in_eager() -> None:
    def f(x: torch.Tensor) -> Any:
        return np.sum(x.numpy())

    x = torch.ones(2, dtype=torch.bfloat16)
    with pytest.raises(TypeError) as eager:
        f(x)
    with pytest.raises(TypeError) as compiled:
        strict(f)(x)
    assert str(compiled.value) == str(eager.value)


# ---- every table entry is exercised -------------------------------------------------

A = "a"  # the float array of shape (4, 3), values in (0.1, 1.1)

FUNCTION_CASES: dict[str, Callable[[np.ndarray], Any]] = {
    "sum": lambda a: np.sum(a, axis=0), "prod": lambda a: np.prod(a),
    "mean": lambda a: np.mean(a, axis=1), "std": lambda a: np.std(a),
    "var": lambda a: np.var(a, axis=0), "max": lambda a: np.max(a),
    "min": lambda a: np.min(a, axis=0), "amax": lambda a: np.amax(a, axis=1),
    "amin": lambda a: np.amin(a), "argmax": lambda a: np.argmax(a, axis=0),
    "argmin": lambda a: np.argmin(a), "any": lambda a: np.any(a > 0.5, axis=0),
    "all": lambda a: np.all(a > 0.5), "cumsum": lambda a: np.cumsum(a, axis=0),
    "cumprod": lambda a: np.cumprod(a, axis=1), "median": lambda a: np.median(a, axis=0),
    "ptp": lambda a: np.ptp(a, axis=0), "average": lambda a: np.average(a, axis=1),
    "count_nonzero": lambda a: np.count_nonzero(a > 0.5, axis=0),
    "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log2": np.log2,
    "log10": np.log10, "log1p": np.log1p, "sqrt": np.sqrt, "square": np.square,
    "abs": lambda a: np.abs(a - 0.5), "absolute": lambda a: np.absolute(a - 0.5),
    "fabs": lambda a: np.fabs(a - 0.5), "sign": lambda a: np.sign(a - 0.5),
    "negative": np.negative, "reciprocal": np.reciprocal, "sin": np.sin, "cos": np.cos,
    "tan": np.tan, "arcsin": lambda a: np.arcsin(a - 0.5),
    "arccos": lambda a: np.arccos(a - 0.5), "arctan": np.arctan, "sinh": np.sinh,
    "cosh": np.cosh, "tanh": np.tanh, "floor": lambda a: np.floor(a * 4),
    "ceil": lambda a: np.ceil(a * 4), "rint": lambda a: np.rint(a * 4),
    "trunc": lambda a: np.trunc(a * 4), "isnan": lambda a: np.isnan(np.log(a - 0.5)),
    "isinf": lambda a: np.isinf(a / (a > 0.5)), "isfinite": lambda a: np.isfinite(a),
    "logical_not": lambda a: np.logical_not(a > 0.5), "deg2rad": np.deg2rad,
    "rad2deg": np.rad2deg, "sinc": np.sinc,
    "add": lambda a: np.add(a, 1), "subtract": lambda a: np.subtract(a, a.T[0][:, None]),
    "multiply": lambda a: np.multiply(a, 2.5), "divide": lambda a: np.divide(a, 3),
    "true_divide": lambda a: np.true_divide(np.arange(3), 2),
    "floor_divide": lambda a: np.floor_divide(a, 0.3), "power": lambda a: np.power(a, 3),
    "mod": lambda a: np.mod(a, 0.3), "remainder": lambda a: np.remainder(a * 10, 3),
    "maximum": lambda a: np.maximum(a, 0.5), "minimum": lambda a: np.minimum(a, 0.5),
    "fmax": lambda a: np.fmax(a, 0.5), "fmin": lambda a: np.fmin(a, 0.5),
    "arctan2": lambda a: np.arctan2(a, a.T[0][:, None]), "hypot": lambda a: np.hypot(a, 1),
    "logical_and": lambda a: np.logical_and(a > 0.3, a < 0.8),
    "logical_or": lambda a: np.logical_or(a > 0.8, a < 0.3),
    "logical_xor": lambda a: np.logical_xor(a > 0.5, a < 0.7),
    "equal": lambda a: np.equal(a, a[0]), "not_equal": lambda a: np.not_equal(a, a[0]),
    "less": lambda a: np.less(a, 0.5), "less_equal": lambda a: np.less_equal(a, 0.5),
    "greater": lambda a: np.greater(a, 0.5),
    "greater_equal": lambda a: np.greater_equal(a, 0.5),
    "round": lambda a: np.round(a, 1), "clip": lambda a: np.clip(a, 0.3, 0.6),
    "where": lambda a: np.where(a > 0.5, a, 0), "nan_to_num": lambda a: np.nan_to_num(
        np.log(a - 0.5)),
    "arange": lambda a: np.arange(a.shape[0]) * a[:, 0],
    "linspace": lambda a: np.linspace(0, 1, a.shape[1]) + a,
    "logspace": lambda a: np.logspace(0, 1, 3) * a, "zeros": lambda a: np.zeros((2, 3)) + a[0],
    "ones": lambda a: np.ones(3, dtype=np.int32) * a, "full": lambda a: np.full(3, 7) - a,
    "zeros_like": lambda a: np.zeros_like(a), "ones_like": lambda a: np.ones_like(a, dtype=int),
    "full_like": lambda a: np.full_like(a, 2.0), "eye": lambda a: np.eye(3) @ a.T,
    "identity": lambda a: np.identity(3) + a[0], "asarray": lambda a: np.asarray(a[0]),
    "array": lambda a: np.array(a, dtype=np.float64), "copy": lambda a: np.copy(a[1]),
    "meshgrid": lambda a: np.meshgrid(a[0], a[:, 0]),
    "broadcast_arrays": lambda a: np.broadcast_arrays(a, a[0]),
    "reshape": lambda a: np.reshape(a, (2, 6)), "transpose": lambda a: np.transpose(a),
    "concatenate": lambda a: np.concatenate([a, a], axis=1),
    "stack": lambda a: np.stack([a, a * 2]), "vstack": lambda a: np.vstack([a, a[0]]),
    "hstack": lambda a: np.hstack([a, a]), "dstack": lambda a: np.dstack([a, a]),
    "column_stack": lambda a: np.column_stack([a[0], a[1]]),
    "expand_dims": lambda a: np.expand_dims(a, 1), "squeeze": lambda a: np.squeeze(a[:1]),
    "ravel": lambda a: np.ravel(a), "broadcast_to": lambda a: np.broadcast_to(a[0], (2, 3)),
    "tile": lambda a: np.tile(a[0], 2), "repeat": lambda a: np.repeat(a, 2, axis=0),
    "flip": lambda a: np.flip(a, 0), "flipud": np.flipud, "fliplr": np.fliplr,
    "rot90": np.rot90, "swapaxes": lambda a: np.swapaxes(a, 0, 1),
    "moveaxis": lambda a: np.moveaxis(a[None], 0, -1), "atleast_1d": lambda a: np.atleast_1d(a[0, 0]),
    "atleast_2d": lambda a: np.atleast_2d(a[0]), "split": lambda a: np.split(a, 2),
    "roll": lambda a: np.roll(a, 1, axis=0), "diff": lambda a: np.diff(a, axis=0),
    "take": lambda a: np.take(a, [0, 2], axis=1),
    "take_along_axis": lambda a: np.take_along_axis(a, np.argsort(a, axis=1), axis=1),
    "matmul": lambda a: np.matmul(a, a.T), "dot": lambda a: np.dot(a, a.T),
    "einsum": lambda a: np.einsum("ij,kj->ik", a, a), "outer": lambda a: np.outer(a[0], a[1]),
    "inner": lambda a: np.inner(a[0], a[1]), "tensordot": lambda a: np.tensordot(a, a, 2),
    "trace": lambda a: np.trace(a), "tril": np.tril, "triu": np.triu,
    "diag": lambda a: np.diag(a[0]), "kron": lambda a: np.kron(a[0], a[1]),
    "cross": lambda a: np.cross(a[0], a[1]), "sort": lambda a: np.sort(a, axis=0),
    "argsort": lambda a: np.argsort(a, axis=1),
    "shape": lambda a: np.ones(np.shape(a)[::-1]) @ a, "size": lambda a: a * np.size(a),
}

METADATA_CASES: dict[str, Callable[[np.ndarray], Any]] = {
    "dtype": lambda a: a.astype(np.dtype("float64")),
    "finfo": lambda a: a + np.finfo(a.dtype).eps,
    "iinfo": lambda a: (a * 10).astype(np.int32) % np.iinfo(np.int16).max,
    "result_type": lambda a: a.astype(np.result_type(a, np.int64)),
    "promote_types": lambda a: a.astype(np.promote_types(a.dtype, np.int8)),
    "can_cast": lambda a: a * 2 if np.can_cast(a.dtype, np.float64) else a,
    "issubdtype": lambda a: a * 2 if np.issubdtype(a.dtype, np.floating) else a,
    "isscalar": lambda a: a * 2 if not np.isscalar(a) else a,
    "ndim": lambda a: a.reshape(-1) * np.ndim(a),
}

METHOD_CASES: dict[str, Callable[[np.ndarray], Any]] = {
    "sum": lambda a: a.sum(axis=0), "prod": lambda a: a.prod(axis=1),
    "mean": lambda a: a.mean(), "std": lambda a: a.std(axis=0), "var": lambda a: a.var(),
    "max": lambda a: a.max(axis=1), "min": lambda a: a.min(),
    "argmax": lambda a: a.argmax(axis=1), "argmin": lambda a: a.argmin(axis=0),
    "any": lambda a: (a > 0.9).any(), "all": lambda a: (a > 0.2).all(axis=1),
    "cumsum": lambda a: a.cumsum(axis=0), "cumprod": lambda a: a.cumprod(),
    "reshape": lambda a: a.reshape(-1, 2), "transpose": lambda a: a.transpose(1, 0),
    "astype": lambda a: (a * 10).astype(np.int16), "flatten": lambda a: a.flatten(),
    "ravel": lambda a: a.ravel(), "squeeze": lambda a: a[None].squeeze(0),
    "copy": lambda a: a.copy(), "clip": lambda a: a.clip(0.2, 0.5),
    "round": lambda a: a.round(2), "dot": lambda a: a.dot(a.T),
    "swapaxes": lambda a: a.swapaxes(0, 1), "repeat": lambda a: a.repeat(2),
    "argsort": lambda a: a.argsort(axis=0), "sort": lambda a: _sorted_copy(a),
    "fill": lambda a: _filled_copy(a), "take": lambda a: a.take([1, 0], axis=0),
    "diagonal": lambda a: a.diagonal(), "trace": lambda a: a.trace(),
    "conj": lambda a: (a * 2).conj(), "conjugate": lambda a: (a + 1).conjugate(),
}

def _attribute_case(name: str) -> Callable[[np.ndarray], Any]:
    def case(a: np.ndarray) -> Any:
        return getattr(a * 2, name)

    return case


ATTRIBUTE_CASES: dict[str, Callable[[np.ndarray], Any]] = {
    name: _attribute_case(name) for name in ARRAY_ATTRIBUTES
}

CONVERSION_CASES: dict[Any, Callable[[np.ndarray], Any]] = {
    torch.from_numpy: lambda a: torch.from_numpy(a * 2),
    torch.as_tensor: lambda a: torch.as_tensor(a * 2, dtype=torch.float64),
    torch.asarray: lambda a: torch.asarray(np.exp(a)),
    torch.tensor: lambda a: torch.tensor(np.sin(a)),
}


def _sorted_copy(a: np.ndarray) -> np.ndarray:
    b = a.copy()
    b.sort(axis=0)
    return b


def _filled_copy(a: np.ndarray) -> np.ndarray:
    b = a.copy()
    b.fill(3.0)
    return b


def test_every_table_entry_has_a_case() -> None:
    assert set(FUNCTION_CASES) == set(NUMPY_FUNCTIONS)
    assert set(METADATA_CASES) == set(NUMPY_METADATA_FUNCTIONS)
    assert set(METHOD_CASES) == set(ARRAY_METHODS)
    assert set(ATTRIBUTE_CASES) == set(ARRAY_ATTRIBUTES)
    assert set(CONVERSION_CASES) == set(TORCH_CONVERSIONS)


def _case_program(case: Callable[[np.ndarray], Any]) -> Callable[[torch.Tensor], Any]:
    def program(x: torch.Tensor) -> Any:
        return case(x.numpy())

    return program


ALL_CASES = [(f"np.{k}", v) for k, v in FUNCTION_CASES.items()] + \
    [(f"np.{k}", v) for k, v in METADATA_CASES.items()] + \
    [(f"ndarray.{k}", v) for k, v in METHOD_CASES.items()] + \
    [(f"ndarray.{k}", v) for k, v in ATTRIBUTE_CASES.items()] + \
    [(f"torch.{k.__name__}", v) for k, v in CONVERSION_CASES.items()]


@pytest.mark.parametrize("case", [c for _, c in ALL_CASES], ids=[n for n, _ in ALL_CASES])
def test_table_entry_matches_eager(case: Callable[[np.ndarray], Any]) -> None:
    check_numpy(_case_program(case), floats, calls=2)


MEDIAN_CASES: list[Callable[[np.ndarray], Any]] = [
    lambda a: np.median(a),  # even count: the mean of the middle two
    lambda a: np.median(a[:3], axis=1, keepdims=True),
    lambda a: np.median(a, axis=-2),
    lambda a: np.median(a, keepdims=True),
    lambda a: np.median((a * 10).astype(np.int64), axis=0),  # ints give float64
    lambda a: np.median(np.where(a > 0.9, np.nan, a), axis=1),  # NaN propagates
]


@pytest.mark.parametrize("case", MEDIAN_CASES)
def test_median_matches_numpy(case: Callable[[np.ndarray], Any]) -> None:
    check_numpy(_case_program(case), floats, calls=2)


def test_numpy_functions_resolve_to_numpy_objects() -> None:
    # every table name is a NumPy function of this NumPy version (no silent gaps)
    missing = [name for name in [*NUMPY_FUNCTIONS, *NUMPY_METADATA_FUNCTIONS]
               if not hasattr(np, name)]
    assert missing == []
