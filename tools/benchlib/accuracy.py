"""Model-level accuracy against an fp64 reference (docs/architecture.md, "Correctness").

The reference is the model deep-copied to float64 and run on the same inputs upcast.
A compiled result passes when it is ``allclose`` to eager (atol = rtol = tol), or when
``rmse(fp64, compiled) <= m * rmse(fp64, eager) + tol / 10``: a compiler may be as far
from the exact answer as eager is, up to a factor ``m``.
Inputs and module buffers are compared after the call as well as outputs (to catch wrong
mutations), and in training mode the gradients of parameters and inputs too.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

# dtype -> (tol, m)
_TOLERANCES = {
    torch.float32: (1e-4, 2.0),
    torch.float16: (1e-2, 3.0),
    torch.bfloat16: (1e-2, 3.0),
    torch.float64: (1e-7, 2.0),
}


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """``(tol, m)`` for results computed in ``dtype``."""
    return _TOLERANCES.get(dtype, (1e-4, 2.0))


def flatten_tensors(obj: Any) -> list[torch.Tensor]:
    """Every tensor in a (nested) output: tensors, tuples, lists, dicts (HF ModelOutput)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in flatten_tensors(v)]
    if isinstance(obj, (tuple, list)):
        return [t for v in obj for t in flatten_tensors(v)]
    return []


def clone_inputs(inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """Fresh copies of the tensor inputs (so a mutation by one run is not seen by the next)."""
    return tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in inputs)


def upcast_inputs(inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """Floating-point tensor inputs in float64; others unchanged."""
    return tuple(
        x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
        for x in inputs
    )


def scalar_loss(output: Any) -> torch.Tensor:
    """A scalar to call ``backward`` on: the sum of the means of the floating outputs."""
    tensors = [t for t in flatten_tensors(output) if t.is_floating_point()]
    if not tensors:
        raise ValueError("the model has no floating-point output to differentiate")
    # At least float32 (a half-precision sum loses the loss), float64 kept for the reference.
    means = (t.to(torch.promote_types(t.dtype, torch.float32)).mean() for t in tensors)
    return sum(means, torch.zeros((), device=tensors[0].device))


def training_inputs(inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """Copies of ``inputs`` as leaves, floating ones requiring grad: a training step also
    differentiates with respect to its inputs (and parameter-free models have nothing
    else to differentiate)."""
    return tuple(
        x.detach().clone().requires_grad_(x.is_floating_point())
        if isinstance(x, torch.Tensor) else x
        for x in inputs
    )


def observe(
    fn: Callable[..., Any], module: torch.nn.Module, inputs: tuple[Any, ...], train: bool
) -> list[torch.Tensor]:
    """Run ``fn`` once on copies of ``inputs``; return the outputs, the inputs and
    ``module``'s buffers after the call and, when ``train``, the gradients of ``module``'s
    parameters and of the floating inputs (in that order)."""
    if train:
        args = training_inputs(inputs)
        module.zero_grad(set_to_none=True)
        out = fn(*args)
        torch.autograd.backward(scalar_loss(out))
        leaves = list(module.parameters()) + [
            a for a in args if isinstance(a, torch.Tensor) and a.requires_grad
        ]
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in leaves]
    else:
        args = clone_inputs(inputs)
        with torch.no_grad():
            out = fn(*args)
        grads = []
    tensors_in = [a for a in args if isinstance(a, torch.Tensor)]
    # Buffers are inputs too (batch norm's running statistics change in training).
    values = flatten_tensors(out) + tensors_in + list(module.buffers()) + grads
    return [v.detach().clone() for v in values]


@dataclass(frozen=True)
class Reference:
    """Eager results in the model's dtype and the fp64 results, for one model and input."""

    dtype: torch.dtype
    eager: list[torch.Tensor]
    fp64: list[torch.Tensor]


def compute_reference(module: torch.nn.Module, inputs: tuple[Any, ...], train: bool) -> Reference:
    """Run ``module`` eagerly (deep copies: ``module`` is left untouched) and in float64."""
    dtype = next((p.dtype for p in module.parameters()), None) or _input_dtype(inputs)
    eager_module = copy.deepcopy(module)
    eager = observe(eager_module, eager_module, inputs, train)
    fp64_module = copy.deepcopy(module).double()
    fp64 = observe(fp64_module, fp64_module, upcast_inputs(inputs), train)
    return Reference(dtype, eager, fp64)


def _input_dtype(inputs: tuple[Any, ...]) -> torch.dtype:
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            return x.dtype
    return torch.float32


@dataclass(frozen=True)
class AccuracyResult:
    """``passed``; the largest |compiled - eager|; the worst rmse(fp64, compiled) /
    rmse(fp64, eager) over the tensors not allclose to eager (0 when all are; ``inf`` when
    eager is exact and compiled is not); and a reason when it failed."""

    passed: bool
    max_abs_error: float
    rmse_ratio: float
    reason: str = ""

    @property
    def label(self) -> str:
        return "pass" if self.passed else "fail_accuracy"


def _rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.sqrt(torch.mean((a.double() - b.double()) ** 2)))


def judge(reference: Reference, compiled: list[torch.Tensor]) -> AccuracyResult:
    """Compare ``compiled`` results against ``reference`` by the rule of docs/architecture.md."""
    tol, m = tolerance(reference.dtype)
    if len(compiled) != len(reference.eager):
        return AccuracyResult(False, math.inf, math.inf,
                              f"{len(compiled)} result tensors, eager has {len(reference.eager)}")
    max_err, worst_ratio = 0.0, 0.0
    for i, (got, want, exact) in enumerate(zip(compiled, reference.eager, reference.fp64)):
        if got.shape != want.shape or got.dtype != want.dtype:
            return AccuracyResult(False, math.inf, math.inf,
                                  f"result {i}: {got.dtype}{list(got.shape)}, eager has "
                                  f"{want.dtype}{list(want.shape)}")
        if not want.is_floating_point():
            if not torch.equal(got.cpu(), want.cpu()):
                return AccuracyResult(False, math.inf, math.inf, f"result {i}: values differ")
            continue
        got64, want64 = got.double(), want.double()
        finite = torch.isfinite(want64)
        if not torch.equal(finite, torch.isfinite(got64)):
            return AccuracyResult(False, math.inf, math.inf, f"result {i}: inf/nan pattern differs")
        err = float((got64 - want64)[finite].abs().max()) if finite.any() else 0.0
        max_err = max(max_err, err)
        if torch.allclose(got64, want64, atol=tol, rtol=tol, equal_nan=True):
            continue
        eager_rmse = _rmse(exact[finite], want64[finite])
        compiled_rmse = _rmse(exact[finite], got64[finite])
        ratio = compiled_rmse / eager_rmse if eager_rmse > 0 else math.inf
        worst_ratio = max(worst_ratio, ratio)
        if compiled_rmse > m * eager_rmse + tol / 10:
            return AccuracyResult(
                False, max_err, ratio,
                f"result {i}: rmse vs fp64 {compiled_rmse:.3g} > {m:g} x eager's "
                f"{eager_rmse:.3g} + {tol / 10:g} (max |compiled - eager| {err:.3g})",
            )
    return AccuracyResult(True, max_err, worst_ratio)
