"""Issue #12's acceptance suite: whole transformers models in one graph.

Every model of :mod:`hf_cases` (tiny random configs, no download), inference and training
with the model's own loss head, compiled with strict capture (the default): three calls
must give one graph, no graph break and one compile, and match eager (outputs; for
training the loss and every parameter's gradient). ``aot_eager`` covers capture and the
aot backward for every case; ``inductor`` runs a Llama and a ViT end to end.

Cases that do not capture whole yet are ``xfail(strict=True)`` with the exact reason:
when a frontend fix makes one pass, the XPASS fails the run and the marker must go.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")

import ember.frontend as ef
from hf_cases import (
    MODELS,
    build_model,
    make_inputs,
    tensors_of,
    vit_without_problem_type,
)

# (model, mode) -> why the case is not one graph / one compile / eager's gradients yet:
# the break or recompile reason as EMBER_LOGS=graph_breaks,recompiles prints it, and the
# user source line. Empty: every case passes. The causes found and fixed while the
# suite was built are listed in README.md.
XFAIL: dict[tuple[str, str], str] = {}


def _case(name: str, mode: str, backend: str = "aot_eager") -> Any:
    marks = []
    reason = XFAIL.get((name, mode))
    if reason is not None:
        marks.append(pytest.mark.xfail(strict=True, reason=reason))
    return pytest.param(name, mode, backend, marks=marks, id=f"{name}-{mode}-{backend}")


def _close(got: torch.Tensor, want: torch.Tensor, what: str, train: bool) -> None:
    # training adds the backward's reductions in another order: a looser bound
    rtol, atol = (1e-3, 1e-4) if train else (1e-4, 1e-5)
    try:
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol)
    except AssertionError as e:
        raise AssertionError(f"{what}: {e}") from None


def _run(model: torch.nn.Module, kw: dict[str, Any], train: bool) -> Any:
    with torch.set_grad_enabled(train):
        out = model(**kw)
        if train:
            out.loss.backward()
    return out


def check_case(name: str, mode: str, backend: str, layers: int = 2, calls: int = 3,
               compiles: int = 1, build: Any = None) -> Any:
    """Compile model ``name`` and call it ``calls`` times; assert no break, ``compiles``
    compiles of one graph each, no eager fallback, and eager's outputs (and gradients).
    Returns the compiled module."""
    train = mode == "train"
    model = build_model(name, mode, layers, build)
    reference = copy.deepcopy(model)
    kw = make_inputs(name, mode)
    expected = _run(reference, kw, train)
    compiled = ef.compile(model, backend=backend)
    for _ in range(calls):
        model.zero_grad(set_to_none=True)
        got = _run(compiled, kw, train)
        want_t, got_t = tensors_of(expected), tensors_of(got)
        assert len(got_t) == len(want_t), (len(got_t), len(want_t))
        for i, (g, w) in enumerate(zip(got_t, want_t, strict=True)):
            _close(g, w, f"output {i}", train)
    if train:
        pairs = zip(model.named_parameters(), reference.named_parameters(), strict=True)
        for (pname, p), (_, q) in pairs:
            assert (p.grad is None) == (q.grad is None), f"{pname}: grad is None differs"
            if p.grad is not None and q.grad is not None:
                _close(p.grad, q.grad, f"grad of {pname}", train)
    stats = compiled.stats
    reasons = [b.describe() for b in getattr(compiled._compiled, "breaks", [])]
    assert stats.graph_breaks == 0, (stats, reasons[:3])
    assert stats.graphs == compiles, stats
    assert stats.compiles == compiles, stats
    assert stats.eager_fallback_calls == 0, stats
    return compiled


CASES = [_case(n, m) for n in MODELS for m in ("infer", "train")]
CASES += [_case("llama", "infer", "inductor"), _case("vit", "infer", "inductor")]


@pytest.mark.parametrize(("name", "mode", "backend"), CASES)
def test_hf_model(name: str, mode: str, backend: str) -> None:
    check_case(name, mode, backend)


def test_llama_32_layers_compiles_once() -> None:
    """A 32-layer tiny Llama: one compile, and fully compiled by the default backend: no
    call runs eagerly (a per-layer recompile would hit the recompile limit in the first
    call) and every op is a generated kernel or a lowered extern call (no fallback op)."""
    compiled = check_case("llama", "infer", "inductor", layers=32, calls=2)
    # NOTE: the 32 layers' kernels are identical up to names: generated once each
    # (inductor codegen/dedupe.py), so the count is of distinct kernels
    stats = compiled.stats
    assert stats.fallbacks == 0 and stats.eager_fallback_calls == 0, stats
    assert stats.compiles == 1 and (stats.kernels or 0) > 0, stats


def test_loss_writes_problem_type() -> None:
    """A classifier whose config leaves ``problem_type`` unset: the loss head writes it
    on the first call (an attribute write on a ``PretrainedConfig``, which has a
    ``__setattr__``), so the second call reads the new value and compiles once more;
    never a break."""
    check_case("vit", "train", "eager", compiles=2, build=vit_without_problem_type)
