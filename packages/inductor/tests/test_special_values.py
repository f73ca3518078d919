"""Special values follow eager for every pointwise op (issue 11, item 6).

Every pointwise op of the lowering table (the rules of ``lowering/pointwise.py`` and the
pointwise backward rules) runs on tensors of special values (``special_values.py``: ±0,
±inf, NaN, denormals, the largest/smallest normal numbers, integer extremes; every pair
of them for binary ops, every triple for ternary ones), float32, bfloat16, int32 and
int64 where eager accepts the dtype, through the C++ kernels and through the Triton
kernels run by Triton's interpreter. Results must match eager "bitwise-ish": the same
NaNs, infinities and signed zeros, other values within an ulp or two
(``special_values.mismatch``). The ops are found from the table, not listed by hand: a
new pointwise rule is tested here without touching this file.
"""

from __future__ import annotations

import functools
import itertools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.lowering.registry import LOWERINGS
from helpers import compile_and_load, trace
from special_values import FLOAT_DTYPES, INT_DTYPES, mismatch, scalars, specials

DTYPES = FLOAT_DTYPES + INT_DTYPES
RULE_MODULES = ("ember.inductor.lowering.pointwise", "ember.inductor.lowering.float_math",
                "ember.inductor.lowering.backward")
# Pointwise-module rules that take no tensor of values to test.
NOT_TESTED = {
    "aten::_assert_tensor_metadata.default": "an assertion, no value",
    "aten::empty.memory_format": "uninitialized values",
    "aten::empty_like.default": "uninitialized values",
    "aten::empty_strided.default": "uninitialized values",
    "aten::new_empty.default": "uninitialized values",
    "aten::new_empty_strided.default": "uninitialized values",
    "aten::fill.Tensor": "takes a 0-d value (fill.Scalar runs the special values)",
}
# (op, dtype) pairs that run as eager fallbacks by design: eager sees the values as given
# (no interpreter reads them), so their expected values are not recomputed from flushed
# denormals. nextafter steps in the storage dtype (lowering/float_math.py).
EAGER_FALLBACKS = {("aten::nextafter.default", torch.bfloat16)}
EXTRA_KWARGS: dict[str, list[dict[str, Any]]] = {
    "aten::gelu.default": [{}, {"approximate": "tanh"}],
}


@dataclass(frozen=True)
class SpecialCase:
    """``op(*args)`` where each :data:`TENSOR` in ``args`` is the next tensor input."""

    name: str
    target: str
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]
    n_tensors: int

    def fn(self, *xs: torch.Tensor) -> torch.Tensor:
        ns, rest = self.target.split("::")
        name, overload = rest.split(".")
        op = getattr(getattr(torch.ops.aten, name), overload)
        it = iter(xs)
        args = [next(it) if a == TENSOR else a for a in self.args]
        return op(*args, **dict(self.kwargs))  # type: ignore[no-any-return]

    def inputs(self, dtype: torch.dtype) -> list[torch.Tensor]:
        """Every combination of special values, one tensor per tensor argument (the
        condition of ``where`` is a bool pattern)."""
        v = specials(dtype).tolist()
        combos = list(itertools.product(v, repeat=self.n_tensors))
        cols = [torch.tensor([c[k] for c in combos], dtype=dtype) for k in range(self.n_tensors)]
        if self.target == "aten::where.self":
            cols[0] = torch.arange(len(combos)) % 3 == 0
        return cols


TENSOR = "<tensor>"  # an argument slot that takes the next tensor input


def _is_tensor(t: str) -> bool:
    return t in ("Tensor", "Optional[Tensor]")


def _cases(target: str, dtype: torch.dtype) -> list[SpecialCase]:
    ns, rest = target.split("::")
    name, overload = rest.split(".")
    schema = getattr(getattr(torch.ops.aten, name), overload)._schema
    positional = [a for a in schema.arguments if not a.kwarg_only]
    if not any(_is_tensor(str(a.type)) for a in positional):
        return []  # a constant (full, arange, ...): no special input
    choices: list[list[Any]] = []
    for a in positional:
        t = str(a.type)
        if _is_tensor(t):
            choices.append([TENSOR])
        elif t in ("number", "Optional[number]") and not a.has_default_value():
            choices.append(list(scalars(dtype)))
        elif t == "Optional[number]":  # clamp's bounds: each alone with special values
            choices.append(["default"])
        elif t == "Optional[str]" and not a.has_default_value():
            choices.append([None, "floor", "trunc"])  # div's rounding mode
        elif a.has_default_value():
            choices.append(["default"])
        else:
            return []  # a list of sizes: not a pointwise computation on values
    cases = []
    for picked in itertools.product(*choices):
        args = list(picked)
        while args and args[-1] == "default":
            args.pop()
        if "default" in args:
            continue
        for kw in EXTRA_KWARGS.get(target, _required_kwargs(schema)):
            if kw.get("rounding_mode") == "trunc" and dtype in (torch.int32, torch.int64):
                continue  # eager dies of SIGFPE on MIN / -1 (test_int_safety.py covers it)
            label = ",".join(["x" if a == TENSOR else repr(a) for a in args]
                             + [f"{k}={v}" for k, v in kw.items()])
            n = sum(a == TENSOR for a in args)
            cases.append(SpecialCase(f"{target[6:]}({label})", target, tuple(args),
                                     tuple(kw.items()), n))
    if target == "aten::clamp.default":
        cases += [SpecialCase(f"clamp.default(x,None,{s!r})", target, (TENSOR, None, s), (), 1)
                  for s in scalars(dtype)]
    return cases


def _required_kwargs(schema: Any) -> list[dict[str, Any]]:
    """Variants of the keyword-only arguments without a default (div's rounding_mode)."""
    variants: list[dict[str, Any]] = [{}]
    for a in schema.arguments:
        if a.kwarg_only and not a.has_default_value() and str(a.type) == "Optional[str]":
            variants = [dict(v, **{a.name: m}) for v in variants for m in (None, "floor", "trunc")]
    return variants


def all_cases(dtype: torch.dtype) -> list[SpecialCase]:
    targets = sorted(t for t, rule in LOWERINGS.items()
                     if rule.__module__ in RULE_MODULES and t not in NOT_TESTED)
    return [c for t in targets for c in _cases(t, dtype)]


@functools.cache
def _expected(dtype: torch.dtype) -> dict[str, tuple[SpecialCase, list[torch.Tensor],
                                                     torch.Tensor]]:
    """case name -> (case, inputs, eager's result) for the cases eager accepts."""
    found = {}
    for c in all_cases(dtype):
        xs = c.inputs(dtype)
        try:
            out = c.fn(*[x.clone() for x in xs])
        except (RuntimeError, TypeError, NotImplementedError):
            continue  # eager refuses the dtype or the values (integer / 0)
        if isinstance(out, torch.Tensor):
            found[c.name] = (c, xs, out)
    return found


def _batched(cases: list[tuple[SpecialCase, list[torch.Tensor]]]
             ) -> tuple[Callable[..., list[torch.Tensor]], list[torch.Tensor]]:
    """One function running every case on its own slice of the flat input list."""
    inputs = [x for _, xs in cases for x in xs]

    def fn(*xs: torch.Tensor) -> list[torch.Tensor]:
        outs, i = [], 0
        for c, own in cases:
            outs.append(c.fn(*xs[i:i + len(own)]))
            i += len(own)
        return outs
    return fn, inputs


def _run(cases: list[tuple[SpecialCase, list[torch.Tensor]]], backend: str
         ) -> list[torch.Tensor]:
    fn, inputs = _batched(cases)

    program = trace(fn, inputs)
    if backend == "cpp":
        _, run = compile_and_load(program)
    else:
        from ember.inductor.codegen.triton.testing import triton_for_cpu

        with triton_for_cpu():
            _, run = compile_and_load(program, precompile=False)
    return list(run(*[x.clone() for x in inputs]))


def _flush_denormals(x: torch.Tensor) -> torch.Tensor:
    if not x.dtype.is_floating_point:
        return x
    return torch.where(x.abs() < torch.finfo(x.dtype).tiny, x * 0, x)


@functools.cache
def results(dtype: torch.dtype, backend: str) -> dict[str, str | None]:
    """case name -> None when it matches eager on every special value, else the problem.
    All cases of a dtype compile as one graph; a failing batch is retried case by case."""
    expected = _expected(dtype)
    cases = [(c, xs) for c, xs, _ in expected.values()]
    problems: dict[str, str | None] = {}
    try:
        outs = dict(zip((c.name for c, _ in cases), _run(cases, backend)))
    except Exception:  # noqa: BLE001 - find the case that breaks the batch
        outs = {}
        for c, xs in cases:
            try:
                outs[c.name] = _run([(c, xs)], backend)[0]
            except Exception as e:  # noqa: BLE001 - reported by the test
                problems[c.name] = f"{type(e).__name__}: {str(e)[:300]}"
    for name, got in outs.items():
        case, xs, want = expected[name]
        if backend == "triton" and dtype == torch.bfloat16 and (
                (case.target, dtype) not in EAGER_FALLBACKS):
            # Triton's interpreter reads a bfloat16 denormal as (signed) zero; a GPU
            # does not (test_cuda_special_values)
            xs = [_flush_denormals(x) for x in xs]
            want = case.fn(*[x.clone() for x in xs])
        problems[name] = mismatch(got, want, xs, case.fn)
    return problems


# Where Triton's *interpreter* (numpy on the CPU), not the generated code, differs from
# eager; a GPU runs libdevice (test_cuda_special_values in this file checks it there).
INTERPRETER_GAPS: dict[tuple[str, torch.dtype], str] = {}


def _params() -> list[Any]:
    params = []
    for d in DTYPES:
        for c in all_cases(d):
            for backend in ("cpp", "triton"):
                params.append(pytest.param(c.name, d, backend,
                                           id=f"{c.name}-{str(d)[6:]}-{backend}"))
    return params


@pytest.mark.parametrize("name,dtype,backend", _params())
def test_special_values_match_eager(name: str, dtype: torch.dtype, backend: str) -> None:
    if backend == "triton":
        pytest.importorskip("triton")
        if (name, dtype) in INTERPRETER_GAPS:
            pytest.xfail(INTERPRETER_GAPS[name, dtype])
    found = results(dtype, backend)
    if name not in found:
        pytest.skip(f"eager does not run {name} on {dtype}")
    assert found[name] is None, f"{name} {dtype} ({backend}): {found[name]}"


def test_every_pointwise_rule_is_covered() -> None:
    """Each pointwise rule of the table has a case that eager runs for some dtype (the
    table is read, so a new rule cannot be missed silently)."""
    targets = {t for t, rule in LOWERINGS.items()
               if rule.__module__ in RULE_MODULES and t not in NOT_TESTED}
    constants = {t for t in targets if not _cases(t, torch.float32)}
    covered = {c.target for d in DTYPES for c, _, _ in _expected(d).values()}
    assert not targets - constants - covered, sorted(targets - constants - covered)
    assert len(covered) > 80


# Where eager on CUDA is not eager on CPU, and Ember follows the CPU.
CUDA_GAPS = {
    "clamp.default(x,None,nan)": "eager's CUDA clamp ignores a NaN upper bound given as a "
                                 "scalar (its clamp_max and its CPU clamp return NaN)",
}


# Ops whose Triton GPU code gives another value than eager for a denormal operand:
# libdevice's pow and fmod flush it (pow(1e-45, -1) is 1.7e38, eager inf; float floor
# division, built on fmod, gives NaN for 1e-38 // 1e-40, eager 128).
CUDA_DENORMAL_GAPS = {"aten::pow.Tensor_Tensor", "aten::pow.Scalar", "aten::pow.Tensor_Scalar",
                      "aten::floor_divide.default", "aten::floor_divide.Scalar",
                      "aten::div.Tensor_mode", "aten::div.Scalar_mode"}


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_special_values(dtype: torch.dtype) -> None:
    """Every case on the GPU against eager on the GPU. NOTE: Triton's float code
    flushes denormal inputs of some ops to zero (atan2, ceil, floor, rsqrt, pow): an
    element also passes when it matches eager on its inputs with denormals flushed."""
    cases = [(c, [x.cuda() for x in xs]) for c, xs, _ in _expected(dtype).values()
             if c.name not in CUDA_GAPS]
    fn, inputs = _batched(cases)

    _, run = compile_and_load(trace(fn, inputs))
    problems = []
    for (c, xs), got in zip(cases, run(*[x.clone() for x in inputs])):
        if c.target in CUDA_DENORMAL_GAPS:
            keep = ~torch.stack([_flush_denormals(x) != x for x in xs]).any(0)
            xs, got = [x[keep] for x in xs], got[keep]
        def flushed(*one: torch.Tensor, c: SpecialCase = c) -> torch.Tensor:
            return c.fn(*[_flush_denormals(y).cuda() for y in one]).cpu()

        problem = mismatch(got.cpu(), c.fn(*[x.clone() for x in xs]).cpu(),
                           [x.cpu() for x in xs], flushed)
        if problem:
            problems.append(f"{c.name}: {problem}")
    assert not problems, "\n".join(problems)
