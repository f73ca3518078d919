"""A saved tensor that a forward matmul reads zero-padded is saved padded
(``lowering/saved_padding.py``). LLaMA's MLP saves ``silu(gate) * up`` (2730 columns on
the zoo's model), which the down projection reads padded to 2736: the forward computed it
twice (the padded copy, then the saved value) and the backward padded it again for the
weight gradient. Matmul padding is forced on the CPU here (on CUDA: 16-bit matmuls)."""

from __future__ import annotations

import pytest
import torch
from ember.frontend import capture
from ember.runtime.config import patch
from ember.runtime.ir import print_program
from ember.runtime.pipeline import compile_program

EMBER_CACHES_OFF = {"program_cache": False}


class SwiGLU(torch.nn.Module):
    def __init__(self, hidden: int = 37) -> None:
        super().__init__()
        self.gate = torch.nn.Linear(8, hidden, bias=False)
        self.up = torch.nn.Linear(8, hidden, bias=False)
        self.down = torch.nn.Linear(hidden, 8, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.silu(self.gate(x)) * self.up(x))


@pytest.fixture
def padded_matmuls(monkeypatch: pytest.MonkeyPatch) -> None:
    from ember.inductor.codegen.cpp.backend import CppBackend
    from ember.inductor.lowering import matmul_padding

    monkeypatch.setattr(CppBackend, "pads_unaligned_matmuls", True)
    monkeypatch.setattr(matmul_padding, "allow_tf32", lambda: True)
    monkeypatch.setattr(matmul_padding, "PAD_MATMUL_MIN_NUMEL", 1)
    monkeypatch.setattr(matmul_padding, "PAD_MIN_INTENSITY", 0.0)


def _grads(fn: object, x: torch.Tensor, params: list[torch.Tensor]
           ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    for p in [x, *params]:
        p.grad = None
    out = fn(x)  # type: ignore[operator]
    out = out[0] if isinstance(out, (list, tuple)) else out
    (out * torch.linspace(-1, 1, out.shape[-1])).sum().backward()
    return out.detach(), [p.grad.clone() for p in [x, *params]]  # type: ignore[union-attr]


def _compiled(module: torch.nn.Module, x: torch.Tensor) -> object:
    with patch(**EMBER_CACHES_OFF):
        return compile_program(capture(module, x), "inductor")


def test_the_padded_copy_is_saved_and_read_by_the_backward(padded_matmuls: None) -> None:
    torch.manual_seed(0)
    module, x = SwiGLU(), torch.randn(2, 8, 8, requires_grad=True)
    compiled = _compiled(module, x)
    program = compiled.program  # type: ignore[attr-defined]
    text = print_program(program)
    forward, _, backward = text.partition("graph backward(")
    assert ("%mul_1_padded: f32[2, 8, 40]{320,40,1} cpu = aten::constant_pad_nd.default("
            "%mul_1, [0, 3], value=0.0)") in forward
    assert "%saved_mul_1: f32[2, 8, 40]{320,40,1} cpu," in backward
    assert ("%saved_mul_1_unpadded: f32[2, 8, 37]{296,37,1} cpu requires_grad = "
            "aten::slice.Tensor(%saved_mul_1, 2, 0, 37)") in backward
    fwd = program.files["forward/wrapper.py"].decode()
    bwd = program.files["backward/wrapper.py"].decode()
    # the forward returns the padded operand of the down projection ...
    assert "buf4.as_strided((2, 8, 40), (320, 40, 1))]" in fwd, fwd
    assert fwd.count("kernel1(") == 1  # ... computed by one kernel
    # ... and the weight gradient's matmul reads it as its padded operand, no copy
    assert "torch.mm(_read_view(arg7, (8, 16), (1, 8), 0), _read_view(arg6, (16, 40), " \
           "(40, 1), 0))" in bwd, bwd
    _check_training(module, x)


def _check_training(module: torch.nn.Module, x: torch.Tensor) -> None:
    """The module compiled by the frontend (live parameters) trains as eager does."""
    import ember.frontend as ef

    params = list(module.parameters())
    with patch(**EMBER_CACHES_OFF):
        got, got_grads = _grads(ef.compile(module), x, params)
    want, want_grads = _grads(module, x, params)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_aligned_sizes_save_the_value_as_it_is(padded_matmuls: None) -> None:
    torch.manual_seed(0)
    module, x = SwiGLU(hidden=40), torch.randn(2, 8, 8, requires_grad=True)
    text = print_program(_compiled(module, x).program)  # type: ignore[attr-defined]
    assert "constant_pad_nd" not in text and "_unpadded" not in text


def test_without_padding_nothing_changes() -> None:
    torch.manual_seed(0)
    module, x = SwiGLU(), torch.randn(2, 8, 8, requires_grad=True)
    text = print_program(_compiled(module, x).program)  # type: ignore[attr-defined]
    assert "constant_pad_nd" not in text and "_unpadded" not in text
    _check_training(module, x)


def test_a_backward_run_alone_reads_the_zeros_from_the_program(padded_matmuls: None) -> None:
    # the backward's knowledge that its input ends in zeros comes from the program (the
    # saved constant_pad_nd), so the rewritten program's backward compiles alone the same
    from ember.inductor.compile import compile_graph

    torch.manual_seed(0)
    module, x = SwiGLU(), torch.randn(2, 8, 8, requires_grad=True)
    program = _compiled(module, x).program  # type: ignore[attr-defined]
    alone = compile_graph(program, "backward")
    assert "_read_view(arg6, (16, 40), (40, 1), 0))" in alone.wrapper
