"""Idle matmul templates (``idle_templates.py``): a template chosen for an epilogue that
did not fuse runs as the extern call. Its schedule step is replaced by the call the
lowering recorded, so the graph is lowered and scheduled once; the program is the one
the second lowering with the matmul as an extern gave (compared file by file with that
path, which stays for what the replacement cannot give: a seed drawn before the
template, an operand the extern stores transposed, a K the extern pads); the outputs
match eager (Triton's interpreter on CPU tensors)."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor import idle_templates
from ember.inductor.codegen.triton import matmul_choice
from ember.inductor.codegen.triton.testing import triton_for_cpu
from ember.runtime.ir import Program
from ember.runtime.phases import CompileProfile, last_compile_profile
from helpers import compile_and_load, trace

pytest.importorskip("triton")

BF = torch.bfloat16


@pytest.fixture(autouse=True)
def _templates_at_small_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    # NOTE: the occupancy rule off: these shapes would all stay on cuBLAS
    monkeypatch.setattr(matmul_choice, "MIN_PROGRAMS", 1)


def _randn(*sizes: int) -> torch.Tensor:
    return torch.randn(*sizes).to(BF)


def _new_gelu(x: torch.Tensor) -> torch.Tensor:
    # HF GPT-2's tanh GELU op by op: longer than an epilogue may be (EPILOGUE_MAX_WORK)
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi)
                                       * (x + 0.044715 * torch.pow(x, 3.0))))


def _compile(fn: Callable[..., Any], inputs: Sequence[torch.Tensor]
             ) -> tuple[Program, CompileProfile, Callable[..., list[Any]]]:
    """``fn`` compiled with templates on the CPU's Triton backend, its compile profile
    and a runner."""
    program = trace(fn, inputs)
    with triton_for_cpu(matmul_templates=True):
        compiled, run = compile_and_load(program, precompile=False)
    profile = last_compile_profile()
    assert profile is not None
    return compiled, profile, run


def _relowering(monkeypatch: pytest.MonkeyPatch) -> None:
    """The old way: every graph with an idle template lowered and scheduled again."""
    monkeypatch.setattr(idle_templates, "_replaceable", lambda step: False)


def _close(out: torch.Tensor, expected: torch.Tensor) -> None:
    assert out.dtype == expected.dtype and out.shape == expected.shape
    err = (out.float() - expected.float()).abs().max().item()
    assert err <= 2e-2 * (1 + expected.float().abs().max().item()), err


def _residual_ln(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, r: torch.Tensor
                 ) -> torch.Tensor:
    # GPT-2's blocks: the residual add joins the layer norm's kernel, not the template
    return F.layer_norm(F.linear(x, w, b) + r, (36,))


def _long_gelu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _new_gelu(F.linear(x, w, b))


def _idle_then_fused(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, w2: torch.Tensor
                     ) -> torch.Tensor:
    # the first template idle (its GELU too long), the second with its ReLU fused: the
    # kernels after the first are numbered as without its kernel
    return torch.relu(_new_gelu(F.linear(x, w, b)) @ w2)


def _stored_operand(p: torch.Tensor, q: torch.Tensor, s: torch.Tensor, w: torch.Tensor,
                    r: torch.Tensor) -> torch.Tensor:
    # an operand loading 3 buffers is stored first, by the template as by the extern
    return F.layer_norm((p + q + s) @ w + r, (36,))


def _scores_softmax(q: torch.Tensor, k: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    # attention's scores: the scale and mask go into the softmax's kernel
    return (torch.bmm(q, k) * 0.125 + m).softmax(-1)


CASES: dict[str, tuple[Callable[..., torch.Tensor], Callable[[], list[torch.Tensor]]]] = {
    "residual_ln": (_residual_ln, lambda: [_randn(40, 24), _randn(36, 24), _randn(36),
                                           _randn(40, 36)]),
    "long_gelu": (_long_gelu, lambda: [_randn(40, 24), _randn(36, 24), _randn(36)]),
    "idle_then_fused": (_idle_then_fused, lambda: [_randn(40, 24), _randn(36, 24),
                                                   _randn(36), _randn(36, 32)]),
    "stored_operand": (_stored_operand, lambda: [_randn(40, 24), _randn(40, 24),
                                                 _randn(40, 24), _randn(24, 36),
                                                 _randn(40, 36)]),
    "scores_softmax": (_scores_softmax, lambda: [_randn(3, 40, 24), _randn(3, 24, 36),
                                                 _randn(40, 36)]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_idle_template_is_lowered_once_and_gives_the_second_lowerings_program(
        case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fn, make = CASES[case]
    torch.manual_seed(0)
    inputs = make()
    compiled, profile, run = _compile(fn, inputs)
    assert profile.counts.get("idle matmul templates") == 1, profile.format()
    assert "idle matmul template relowerings" not in profile.counts, profile.format()
    assert profile.phases["lowering"].calls == 1, profile.format()
    assert profile.phases["scheduling"].calls == 2, profile.format()  # + the replacement
    _close(run(*inputs)[0], fn(*inputs))
    _relowering(monkeypatch)
    old, old_profile, _ = _compile(fn, inputs)
    assert old_profile.phases["lowering"].calls == 2
    assert compiled.files == old.files
    assert compiled.metadata["kernels"] == old.metadata["kernels"]


def test_the_idle_template_is_the_extern_call_in_the_wrapper() -> None:
    inputs = CASES["idle_then_fused"][1]()
    compiled, _, _ = _compile(_idle_then_fused, inputs)
    wrapper = compiled.files["forward/wrapper.py"].decode()
    # the extern's result is the template's buffer; the kernels numbered without it
    assert "    # extern: aten::addmm.default\n    buf0 = torch.addmm(arg2, arg0, " in wrapper
    assert "# kernel0: fused from mul_3\n" in wrapper, wrapper
    assert "# kernel1: fused from mm, relu\n" in wrapper, wrapper
    sources = [v.decode() for k, v in compiled.files.items() if k != "forward/wrapper.py"]
    assert len(sources) == 2 and sum(s.count("# matmul template") for s in sources) == 1


def _dropout_after(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    y = _new_gelu(F.linear(x, w, b))
    return y * (torch.rand_like(y) > 0.3) / 0.7


def _transposed_operand(p: torch.Tensor, w: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    # tanh is no prologue (costly): the template stores tanh(p)ᵀ row-major, the extern
    # stores tanh(p) and takes its transposed view
    return F.layer_norm(torch.tanh(p).t() @ w + r, (36,))


@pytest.mark.parametrize(("fn", "make"), [
    # the seed's draw (a call reading nothing) went before the template: as an extern
    # call, the template would have moved it after itself
    (_dropout_after, lambda: [_randn(40, 24), _randn(36, 24), _randn(36)]),
    (_transposed_operand, lambda: [_randn(24, 40), _randn(24, 36), _randn(40, 36)]),
], ids=["seed_drawn_before_the_template", "operand_stored_transposed_by_the_extern"])
def test_what_the_schedule_cannot_replace_is_lowered_again(
        fn: Callable[..., torch.Tensor], make: Callable[[], list[torch.Tensor]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = make()
    compiled, profile, run = _compile(fn, inputs)
    assert profile.counts.get("idle matmul template relowerings") == 1, profile.format()
    assert profile.phases["lowering"].calls == 2
    if fn is _transposed_operand:
        _close(run(*inputs)[0], fn(*inputs))
    _relowering(monkeypatch)
    old, _, _ = _compile(fn, inputs)
    assert compiled.files == old.files


def test_a_k_the_extern_would_pad_is_lowered_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # HF Llama's down projection (K 2730): the extern pads K, storing both operands
    # padded first, which the template's lowering did not
    from ember.inductor.codegen.triton import testing
    from ember.inductor.lowering import matmul_padding

    monkeypatch.setattr(matmul_padding, "PAD_MATMUL_MIN_NUMEL", 1)
    monkeypatch.setattr(matmul_padding, "PAD_MIN_INTENSITY", 0.0)
    monkeypatch.setattr(testing.TritonOnCpuTemplatesBackend, "pads_unaligned_matmuls", True)

    def fn(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x @ w + r, (40,))

    inputs = [_randn(40, 30), _randn(30, 40), _randn(40, 40)]
    compiled, profile, run = _compile(fn, inputs)
    assert profile.counts.get("idle matmul template relowerings") == 1, profile.format()
    assert "# extern: aten::mm.default (padded for aligned loads: K 30 -> 32)" in (
        compiled.files["forward/wrapper.py"].decode())
    _close(run(*inputs)[0], fn(*inputs))
    _relowering(monkeypatch)
    old, _, _ = _compile(fn, inputs)
    assert compiled.files == old.files


SYMBOLIC_M = """program dialect=core-functional

graph forward(%x: bf16[s0, 24]{24,1} cpu, %w: bf16[24, 36]{36,1} cpu, %r: bf16[s0, 36]{36,1} cpu):
  symbols s0 in [2, inf] hint=40
  %h: bf16[s0, 36]{36,1} cpu = aten::mm.default(%x, %w)
  %a: bf16[s0, 36]{36,1} cpu = aten::add.Tensor(%h, %r)
  %s: bf16[s0]{1} cpu = aten::sum.dim_IntList(%a, [-1])
  return (%s,)  [user_output]
"""


def test_an_idle_template_of_symbolic_size_becomes_the_extern(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from ember.inductor.compile import compile_program
    from ember.runtime.compiled import load_executor
    from ember.runtime.ir import parse_program

    def compile_symbolic() -> tuple[Program, CompileProfile]:
        program = parse_program(SYMBOLIC_M)
        program.untrusted_origin = None  # built here, not read from a file
        with triton_for_cpu(matmul_templates=True):
            compiled = compile_program(program, {"precompile": False, "strict": True})
        compiled.untrusted_origin = None
        profile = last_compile_profile()
        assert profile is not None
        return compiled, profile

    compiled, profile = compile_symbolic()
    assert profile.counts.get("idle matmul templates") == 1, profile.format()
    assert profile.phases["lowering"].calls == 1, profile.format()
    run = load_executor(compiled, "forward")
    for rows in (2, 17, 40):
        x, w, r = _randn(rows, 24), _randn(24, 36), _randn(rows, 36)
        (out,) = run([x, w, r])
        _close(out, (x @ w + r).sum(-1))
    _relowering(monkeypatch)
    old, _ = compile_symbolic()
    assert compiled.files == old.files
