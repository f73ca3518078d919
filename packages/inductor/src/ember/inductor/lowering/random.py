"""Lowering rules for random ops: counter-based random numbers in the kernels.

Eager draws from torch's stateful generator; a kernel cannot, so every random op here
computes its values as a pure function of a key and an element position, with the
loop-IR ops ``rand`` / ``randn`` (Philox 4x32-10, the conventions of Triton's
``tl.rand``; see :mod:`ember.inductor.loop_ir.body`):

- **seed**: the graph draws one 0-d int64 seed per call, at its first random op, from
  torch's default generator of its device (:meth:`.GraphSeed.seed`), so
  ``torch.manual_seed`` makes a call reproducible and consecutive calls differ;
- **key**: the ``k``-th random op of the graph (:meth:`.GraphSeed.stream`)
  uses ``seed + k``, so two random ops never share values;
- **counter**: the row-major linear index of the element in the op's result (int64).

Values are therefore the same wherever an element is computed: a random value inlined
into several kernels (a dropout mask the forward output and the saved mask both read)
is recomputed identically, and the C++ and Triton backends give the same uniform values
for the same seed. They do not equal eager's: the compile option ``eager_random`` runs
these ops on torch's generator instead (for tests that compare with eager).

Uniform values are float32 with 24 significant bits in [0, 1); results of other float
dtypes are casts of them (float64 results have float32 resolution). ``randint`` scales
them, so its range (``high - low``) is limited to :data:`MAX_RANDINT_RANGE`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from ember.inductor.loop_ir import IndexExpr, add, mul
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.common import LOWP, compute_dtype, element, out_meta, sizes_of
from ember.inductor.lowering.registry import NotLowerable, lowering
from ember.inductor.lowering.values import Lazy, contiguous_strides
from ember.runtime.ir import Node

# randint draws floor(u * (high - low)) from a float32 uniform u: beyond 2**24 values
# some integers could never be drawn, so wider ranges run eagerly.
MAX_RANDINT_RANGE = 2**24

RandomFn = Callable[[BodyBuilder, tuple[IndexExpr, ...]], str]


def random_values(ctx: Any, node: Node, op: str) -> RandomFn:
    """The element function of ``node``'s own random stream: ``op`` (``rand`` or
    ``randn``) keyed by ``seed + k``, counted by the row-major element index; float32.

    Raises:
        NotLowerable: under the ``eager_random`` option, or for a result of another
            device than the graph's.
    """
    if ctx.eager_random:
        raise NotLowerable("the eager_random option: torch's generator draws it")
    meta = out_meta(node)
    if meta.device.type != ctx.device.type:
        raise NotLowerable("a random tensor on another device")
    strides = contiguous_strides(sizes_of(node))
    seed = ctx.rng.seed(node.name)
    stream = ctx.rng.stream()

    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        key = b.compute("add", seed.element(b, ()), b.literal(stream, torch.int64))
        offset = b.index_value(add(*(mul(i, s) for i, s in zip(index, strides))))
        return b.compute(op, key, offset, dtype=torch.float32)

    return fn


def _check_options(node: Node, kwargs: dict[str, Any]) -> None:
    """Refuse what the rules do not model: an explicit generator, a non-strided layout,
    pinned memory."""
    if kwargs.get("generator") is not None:
        raise NotLowerable(f"{node.name}: an explicit generator")
    if kwargs.get("layout") not in (None, torch.strided):
        raise NotLowerable(f"{node.name}: layout {kwargs['layout']}")
    if kwargs.get("pin_memory"):
        raise NotLowerable(f"{node.name}: pinned memory")


def _floating(node: Node) -> torch.dtype:
    dtype = out_meta(node).dtype
    if not dtype.is_floating_point:
        raise NotLowerable(f"{node.name}: random floats as {dtype}")
    return dtype


def _drawn(ctx: Any, node: Node, op: str,
           then: Callable[[BodyBuilder, str, tuple[IndexExpr, ...]], str] | None = None) -> Lazy:
    """``node``'s result: ``op`` values cast to its dtype, or ``then(b, value, index)``
    (a value in the compute dtype) cast to it."""
    dtype = out_meta(node).dtype
    values = random_values(ctx, node, op)

    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        v = values(b, index)
        return b.cast(v if then is None else then(b, v, index), dtype)

    return Lazy(fn, dtype, sizes_of(node))


def _kept_below(b: BodyBuilder, r: str, low: float, high: float,
                out_dtype: torch.dtype) -> str:
    """``r``, or ``low`` where ``r`` rounds (to ``out_dtype``) up to ``high``, so results
    stay in ``[low, high)`` as eager's do (as eager's CUDA kernel maps them)."""
    dtype = b.dtype(r)
    rounded = b.cast(b.cast(r, out_dtype), dtype)
    below = b.compute("lt", rounded, b.literal(high, dtype))
    return b.compute("where", below, r, b.literal(low, dtype))


def _rand_values(ctx: Any, node: Node, op: str) -> Lazy:
    dtype = _floating(node)
    if op == "randn" or dtype not in LOWP:
        return _drawn(ctx, node, op)
    # NOTE: a float32 value just below 1 rounds to 1 in float16/bfloat16
    return _drawn(ctx, node, op, lambda b, u, i: _kept_below(b, u, 0.0, 1.0, dtype))


@lowering("aten::rand.default", "aten::randn.default")
def _rand(ctx: Any, node: Node, size: Any, **kwargs: Any) -> Lazy:
    _check_options(node, kwargs)
    return _rand_values(ctx, node, "randn" if "randn" in node.target else "rand")


@lowering("aten::rand_like.default", "aten::randn_like.default")
def _rand_like(ctx: Any, node: Node, x: Any, **kwargs: Any) -> Lazy:
    _check_options(node, kwargs)
    return _rand_values(ctx, node, "randn" if "randn" in node.target else "rand")


@lowering("aten::uniform.default")
def _uniform(ctx: Any, node: Node, x: Any, low: float = 0.0, high: float = 1.0,
             **kwargs: Any) -> Lazy:
    """``low + u * (high - low)``, kept in ``[low, high)`` (see :func:`_kept_below`)."""
    _check_options(node, kwargs)
    out_dtype = _floating(node)
    dtype = compute_dtype(out_dtype)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high)):
        raise NotLowerable(f"{node.name}: run-time bounds")

    def scale(b: BodyBuilder, u: str, index: tuple[IndexExpr, ...]) -> str:
        r = b.compute("add", b.literal(low, dtype), b.compute(
            "mul", b.cast(u, dtype), b.literal(high - low, dtype)))
        return _kept_below(b, r, low, high, out_dtype)

    return _drawn(ctx, node, "rand", scale)


def _below(threshold: Callable[[BodyBuilder, tuple[IndexExpr, ...]], str]
           ) -> Callable[[BodyBuilder, str, tuple[IndexExpr, ...]], str]:
    """``u < threshold(index)`` (a bool), compared in the threshold's dtype."""
    def body(b: BodyBuilder, u: str, index: tuple[IndexExpr, ...]) -> str:
        p = threshold(b, index)
        return b.compute("lt", b.cast(u, b.dtype(p)), p)

    return body


@lowering("aten::bernoulli.p")
def _bernoulli_p(ctx: Any, node: Node, x: Any, p: Any = 0.5, **kwargs: Any) -> Lazy:
    """``u < p`` as the node's dtype: 1 with probability ``p``."""
    _check_options(node, kwargs)
    if not isinstance(p, (int, float)) or isinstance(p, bool):
        raise NotLowerable(f"{node.name}: run-time probability")
    return _drawn(ctx, node, "rand", _below(lambda b, i: b.literal(p, torch.float32)))


@lowering("aten::bernoulli.default")
def _bernoulli(ctx: Any, node: Node, probs: Any, **kwargs: Any) -> Lazy:
    """``u < probs[i]`` as the node's dtype (the probabilities' dtype)."""
    _check_options(node, kwargs)
    dtype = compute_dtype(_floating(node))
    return _drawn(ctx, node, "rand", _below(lambda b, i: element(b, probs, i, dtype)))


@lowering("aten::randint.low")
def _randint(ctx: Any, node: Node, low: Any, high: Any, size: Any, **kwargs: Any) -> Lazy:
    """``low + min(floor(u * n), n - 1)`` with ``n = high - low`` (the ``min`` guards
    against a product that rounds up to ``n``).

    Raises:
        NotLowerable: for ``n`` above :data:`MAX_RANDINT_RANGE`, or an empty range.
    """
    _check_options(node, kwargs)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high)):
        raise NotLowerable(f"{node.name}: run-time bounds")
    n = high - low
    if not 0 < n <= MAX_RANDINT_RANGE:
        raise NotLowerable(f"{node.name}: a range of {n} values (at most "
                           f"{MAX_RANDINT_RANGE} are drawn in kernels)")

    def scale(b: BodyBuilder, u: str, index: tuple[IndexExpr, ...]) -> str:
        drawn = b.compute("floor", b.compute("mul", u, b.literal(n, torch.float32)))
        k = b.compute("minimum", b.cast(drawn, torch.int64), b.literal(n - 1, torch.int64))
        return b.compute("add", b.literal(low, torch.int64), k)

    return _drawn(ctx, node, "rand", scale)


@lowering("aten::native_dropout.default")
def _native_dropout(ctx: Any, node: Node, x: Any, p: Any, train: Any = None,
                    **kwargs: Any) -> tuple[Lazy, Lazy]:
    """``(x * mask / (1 - p), mask)`` with ``mask = u < 1 - p``; both results read the
    same random stream, so the mask is the one applied."""
    if train is False:
        raise NotLowerable(f"{node.name}: dropout outside training")
    if not isinstance(p, (int, float)) or isinstance(p, bool):
        raise NotLowerable(f"{node.name}: run-time probability")
    out_dtype = out_meta(node, 0).dtype
    dtype = compute_dtype(out_dtype)
    keep = 1.0 - p
    scale = 0.0 if keep == 0 else 1.0 / keep
    values = random_values(ctx, node, "rand")
    sizes = sizes_of(node, 0)

    def mask(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        return b.compute("lt", values(b, index), b.literal(keep, torch.float32))

    def output(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        scaled = b.compute("mul", element(b, x, index, dtype), b.literal(scale, dtype))
        kept = b.compute("where", mask(b, index), scaled, b.literal(0, dtype))
        return b.cast(kept, out_dtype)

    return Lazy(output, out_dtype, sizes), Lazy(mask, torch.bool, sizes)


RANDOM_LOWERINGS = (
    "aten::rand.default", "aten::randn.default", "aten::rand_like.default",
    "aten::randn_like.default", "aten::uniform.default", "aten::bernoulli.p",
    "aten::bernoulli.default", "aten::randint.low", "aten::native_dropout.default",
)
