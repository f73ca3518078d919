"""The matmul suite's workloads (issue #16): square GEMMs, GEMM + bias + GELU, the
transformer MLP block and hand-written attention, each at three scales.

A workload is a family (what is computed, as a module) at one shape. The families are a
table, :data:`FAMILIES`; each lists its shapes per scale: ``full`` (sized for an H200:
the issue's shapes), ``quick`` (CPU-sized, seconds on 2 cores) and ``test`` (tiny, for the
harness's own tests). Every workload is built deterministically (seeded weights, fresh
random inputs, never zeros), in ``eval()`` mode, so a subprocess (the warm-autotune
measurement) rebuilds exactly the same one from its name.

Each family names the issue's target it is measured against (:class:`Target`): the
speed of Ember, as the baseline's time divided by Ember's, and the threshold it must
reach.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from zoo.registry import build, seeded_randn

SCALES = ("test", "quick", "full")
"""``full``: the issue's H200 shapes; ``quick``: CPU-sized; ``test``: the tests' tiny ones."""

Shape = tuple[int, ...]
Built = tuple[nn.Module, tuple[torch.Tensor, ...]]


class Gemm(nn.Module):
    """``a @ b``: the plain GEMM (a template against cuBLAS)."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


class GemmBiasGelu(nn.Module):
    """``gelu(x @ w + b)``: a GEMM with a pointwise epilogue (bias, then exact GELU)."""

    def __init__(self, k: int, n: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(k, n) / math.sqrt(k))
        self.b = nn.Parameter(0.1 * torch.randn(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x @ self.w + self.b)


class MLPBlock(nn.Module):
    """``x + fc2(gelu(fc1(layer_norm(x))))`` with a 4x hidden width: the pre-norm
    transformer MLP (a prologue, two GEMMs with epilogues and a residual)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(F.gelu(self.fc1(self.norm(x))))
        return x + out


class Attention(nn.Module):
    """``softmax(q @ k^T / sqrt(d), -1) @ v``, written out (no SDPA call); with
    ``causal`` the scores above the diagonal are masked to ``-inf`` first (a ``tril``
    mask)."""

    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.causal = causal

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if self.causal:
            seq = q.shape[-2]
            mask = torch.ones(seq, seq, dtype=torch.bool, device=q.device).tril()
            scores = scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v


def _gemm(shape: Shape, device: torch.device, dtype: torch.dtype) -> Built:
    m, n, k = shape
    a = seeded_randn(m, k, device=device, dtype=dtype, seed=11)
    b = seeded_randn(k, n, device=device, dtype=dtype, seed=12)
    return build(Gemm, device, dtype), (a, b)


def _gemm_bias_gelu(shape: Shape, device: torch.device, dtype: torch.dtype) -> Built:
    m, n, k = shape
    module = build(lambda: GemmBiasGelu(k, n), device, dtype, seed=13)
    return module, (seeded_randn(m, k, device=device, dtype=dtype, seed=14),)


def _mlp(shape: Shape, device: torch.device, dtype: torch.dtype) -> Built:
    tokens, width = shape
    module = build(lambda: MLPBlock(width), device, dtype, seed=15)
    return module, (seeded_randn(tokens, width, device=device, dtype=dtype, seed=16),)


def _attention(causal: bool) -> Callable[[Shape, torch.device, torch.dtype], Built]:
    def make(shape: Shape, device: torch.device, dtype: torch.dtype) -> Built:
        module = build(lambda: Attention(causal), device, dtype)
        q, k, v = (seeded_randn(*shape, device=device, dtype=dtype, seed=17 + i)
                   for i in range(3))
        return module, (q, k, v)

    return make


@dataclass(frozen=True)
class Target:
    """An issue #16 target: Ember's speed against ``baseline`` (the baseline variant's time
    divided by Ember's) must reach ``threshold`` (``strict``: exceed it)."""

    baseline: str
    threshold: float
    strict: bool
    text: str

    def met(self, speed: float) -> bool:
        """Whether ``speed`` (baseline time / Ember time) meets the target."""
        return speed > self.threshold if self.strict else speed >= self.threshold


@dataclass(frozen=True)
class Family:
    """What a workload computes: ``make(shape, device, dtype) -> (module, inputs)``, its
    shapes per scale, how its shape reads (``dims``: the letters of ``shape``), its
    floating-point operations (for TFLOP/s) and the issue's targets for it."""

    name: str
    description: str
    dims: str
    make: Callable[[Shape, torch.device, torch.dtype], Built]
    shapes: dict[str, tuple[Shape, ...]]
    flops: Callable[[Shape], float]
    targets: tuple[Target, ...]


def _attention_flops(shape: Shape) -> float:
    b, h, s, d = shape
    return 4.0 * b * h * s * s * d


FAMILIES: tuple[Family, ...] = (
    Family(
        "gemm", "a @ b", "MxNxK", _gemm,
        {"test": ((32, 32, 32),), "quick": ((128, 128, 128), (256, 256, 256)),
         "full": ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096),
                  (8192, 8192, 8192))},
        lambda s: 2.0 * s[0] * s[1] * s[2],
        (Target("eager", 0.90, False, "template GEMM >= 90% of cuBLAS (eager)"),),
    ),
    Family(
        "gemm_bias_gelu", "gelu(x @ w + b)", "MxNxK", _gemm_bias_gelu,
        {"test": ((32, 48, 16),), "quick": ((256, 256, 256),),
         "full": ((4096, 4096, 4096), (8192, 3072, 768))},
        lambda s: 2.0 * s[0] * s[1] * s[2],
        (Target("eager", 1.0, True,
                "GEMM + fused epilogue faster than cuBLAS + a separate epilogue (eager)"),),
    ),
    Family(
        "mlp", "x + fc2(gelu(fc1(layer_norm(x)))), hidden 4x", "TOKENSxWIDTH", _mlp,
        {"test": ((16, 32),), "quick": ((256, 128),), "full": ((8192, 768), (8192, 1024))},
        lambda s: 16.0 * s[0] * s[1] * s[1],
        (Target("torch", 1.10, False, ">= 1.1x torch.compile default"),
         Target("torch-max-autotune", 0.95, False,
                "within 5% of torch.compile max-autotune")),
    ),
    Family(
        "attention", "softmax(q @ k^T / sqrt(d)) @ v", "BxHxSxD", _attention(False),
        {"test": ((1, 2, 16, 8),), "quick": ((2, 4, 128, 32),), "full": ((8, 16, 1024, 64),)},
        _attention_flops,
        (Target("torch", 1.0, False, ">= torch.compile default (the rewrite fires)"),),
    ),
    Family(
        "attention_causal", "the same with a tril mask (masked_fill -inf)", "BxHxSxD",
        _attention(True),
        {"test": ((1, 2, 16, 8),), "quick": ((2, 4, 128, 32),), "full": ((8, 16, 1024, 64),)},
        _attention_flops,
        (Target("torch", 1.0, False, ">= torch.compile default (the rewrite fires)"),),
    ),
)


@dataclass(frozen=True)
class Workload:
    """A family at one shape; ``name`` is ``family shape`` (``gemm 4096x4096x4096``)."""

    family: Family
    shape: Shape

    @property
    def name(self) -> str:
        return f"{self.family.name} {'x'.join(map(str, self.shape))}"

    def make(self, device: torch.device, dtype: torch.dtype) -> Built:
        """The module (``eval()`` mode, seeded weights) and its inputs on ``device``."""
        module, inputs = self.family.make(self.shape, device, dtype)
        return module.eval(), inputs

    @property
    def flops(self) -> float:
        """Floating-point operations of one call (matmuls only: 2 per multiply-add)."""
        return self.family.flops(self.shape)


def family(name: str) -> Family:
    """The family ``name``.

    Raises:
        KeyError: naming the known families.
    """
    for f in FAMILIES:
        if f.name == name:
            return f
    raise KeyError(f"no matmul family {name!r}; known: {', '.join(f.name for f in FAMILIES)}")


def workloads(scale: str, families: list[str] | None = None) -> list[Workload]:
    """Every workload of ``scale``, in table order; with ``families``, only those: an item
    is a family name (its shapes at ``scale``) or ``family:SHAPE`` (that shape, at any
    scale: ``gemm:4096x4096x4096``, ``mlp:8192x768``).

    Raises:
        ValueError: an unknown scale, or a shape that is not the family's ``dims``.
        KeyError: an unknown family.
    """
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; expected one of {SCALES}")
    if not families:
        return [Workload(f, shape) for f in FAMILIES for shape in f.shapes[scale]]
    chosen: list[Workload] = []
    for item in families:
        name, _, shape_text = item.partition(":")
        fam = family(name)
        if not shape_text:
            chosen += [Workload(fam, shape) for shape in fam.shapes[scale]]
            continue
        try:
            shape = tuple(int(n) for n in shape_text.split("x"))
        except ValueError:
            shape = ()
        if len(shape) != len(fam.dims.split("x")) or min(shape) < 1:
            raise ValueError(f"{item!r}: expected {name}:{fam.dims} with positive sizes")
        chosen.append(Workload(fam, shape))
    return chosen
