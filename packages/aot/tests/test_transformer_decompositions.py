"""The transformer fast-path ops (``_native_multi_head_attention``,
``_transformer_encoder_layer_fwd``) are decomposed to Core ATen and compute what eager's
kernels compute: every mask type, bool and float masks, with and without the attention
weights, fully masked queries (NaN), ``norm_first``, ``relu``/``gelu``. Nested tensor
inputs stay whole. End to end through ``ember.frontend.compile``:
``integration_tests/test_aot_transformer_fast_path.py``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch
from aot_capture import capture, capture_module, compile_fn, compile_module
from ember.aot.kept_whole import take_reasons
from ember.aot.pipeline import aot_compile
from ember.aot.transformer_decompositions import TRANSFORMER_DECOMPOSITIONS
from ember.runtime.config import patch
from ember.runtime.ir import InputSpec, Program, print_graph
from ember.runtime.tracing import GraphRecorder

MHA = torch.ops.aten._native_multi_head_attention.default
ENCODER_LAYER = torch.ops.aten._transformer_encoder_layer_fwd.default
B, L, E, H, FF = 2, 5, 16, 4, 24


def _randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape) * scale


torch.manual_seed(0)
X = _randn(B, L, E)
KEY = _randn(B, L, E)
VALUE = _randn(B, L, E)
ATTENTION_WEIGHTS = [_randn(3 * E, E, scale=0.3), _randn(3 * E), _randn(E, E, scale=0.3),
                     _randn(E)]
NORMS = [1 + _randn(E, scale=0.1), _randn(E, scale=0.1), 1 + _randn(E, scale=0.1),
         _randn(E, scale=0.1)]
FEED_FORWARD = [_randn(FF, E, scale=0.3), _randn(FF), _randn(E, FF, scale=0.3), _randn(E)]

_SOME = torch.rand(L, L) > 0.6
_SOME[:, 0] = False  # every query keeps a key
_PADDED = torch.zeros(B, L, dtype=torch.bool)
_PADDED[1, 3:] = True
_MERGED = (_SOME.view(1, 1, L, L) | _PADDED.view(B, 1, 1, L)).expand(B, H, L, L)
_ROW_MASKED = _SOME.clone()
_ROW_MASKED[2] = True  # query 2 has no key: NaN in eager
_BATCH_MASKED = _PADDED.clone()
_BATCH_MASKED[0] = True  # batch 0 has no key at all


def _filled(mask: torch.Tensor, value: float = float("-inf")) -> torch.Tensor:
    return torch.zeros(mask.shape).masked_fill(mask, value)


# name -> (mask, mask_type). Float masks mask where nonzero, whatever the value (1.0
# masks as -inf does: eager's kernel does not add them to the scores).
MASKS: dict[str, tuple[torch.Tensor | None, int | None]] = {
    "none": (None, None),
    "attn_bool": (_SOME, 0),
    "attn_float": (_filled(_SOME), 0),
    "attn_float_ones": (_filled(_SOME, 1.0), 0),
    "padding_bool": (_PADDED, 1),
    "padding_float": (_filled(_PADDED), 1),
    "padding_uint8": (_PADDED.to(torch.uint8), 1),
    "merged_bool": (_MERGED, 2),
    "merged_float": (_filled(_MERGED), 2),
    "merged_float_negative": (_filled(_MERGED, -2.5), 2),
    "merged_as_type_0": (_MERGED.contiguous(), 0),
    "query_without_keys": (_ROW_MASKED, 0),
    "batch_without_keys_float": (_filled(_BATCH_MASKED), 1),
}
# (need_weights, average_attn_weights)
WEIGHTS = {"weights_averaged": (True, True), "weights_per_head": (True, False),
           "no_weights": (False, True)}


def _assert_matches_eager(got: list[Any], expected: Any) -> None:
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        if e is None:  # eager's undefined weights: the decomposition gives an empty tensor
            assert g.shape == (0,)
            continue
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5, equal_nan=True)


def _mha(mask: torch.Tensor | None, mask_type: int | None, need_weights: bool,
         average: bool) -> Callable[..., Any]:
    def fn(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
           *weights: torch.Tensor) -> Any:
        return MHA(query, key, value, E, H, *weights, mask, need_weights, average, mask_type)
    return fn


@pytest.mark.parametrize("weights", sorted(WEIGHTS))
@pytest.mark.parametrize("mask_name", sorted(MASKS))
def test_native_multi_head_attention_matches_eager(mask_name: str, weights: str) -> None:
    mask, mask_type = MASKS[mask_name]
    need_weights, average = WEIGHTS[weights]
    fn = _mha(mask, mask_type, need_weights, average)
    inputs = (X, X, X, *ATTENTION_WEIGHTS)
    # the mask rides as a constant: the mask is an input of its own below
    program, run = compile_fn(lambda x, *w: fn(x, x, x, *w), X, *ATTENTION_WEIGHTS)
    assert program.metadata["aot"]["extern_ops"] == []
    got = run([X, *ATTENTION_WEIGHTS])
    _assert_matches_eager(got, fn(*inputs))
    if "without_keys" in mask_name:
        assert got[0].isnan().any() and not got[0].isnan().all()


@pytest.mark.parametrize("mask_name", ["attn_bool", "padding_float", "merged_bool",
                                       "query_without_keys"])
@pytest.mark.parametrize("need_weights", [True, False])
def test_mask_as_a_graph_input(mask_name: str, need_weights: bool) -> None:
    mask, mask_type = MASKS[mask_name]
    assert mask is not None

    def fn(x: torch.Tensor, m: torch.Tensor, *w: torch.Tensor) -> Any:
        return MHA(x, x, x, E, H, *w, m, need_weights, False, mask_type)

    program, run = compile_fn(fn, X, mask, *ATTENTION_WEIGHTS)
    assert program.metadata["aot"]["extern_ops"] == []
    _assert_matches_eager(run([X, mask, *ATTENTION_WEIGHTS]), fn(X, mask, *ATTENTION_WEIGHTS))


@pytest.mark.parametrize("inputs", ["key_is_value", "all_distinct"])
@pytest.mark.parametrize("weights", sorted(WEIGHTS))
def test_distinct_key_and_value_are_projected_apart(inputs: str, weights: str) -> None:
    need_weights, average = WEIGHTS[weights]
    mask, mask_type = MASKS["padding_bool"]
    fn = _mha(mask, mask_type, need_weights, average)
    if inputs == "key_is_value":
        program, run = compile_fn(lambda q, kv, *w: fn(q, kv, kv, *w), X, KEY,
                                  *ATTENTION_WEIGHTS)
        got, expected = run([X, KEY, *ATTENTION_WEIGHTS]), fn(X, KEY, KEY, *ATTENTION_WEIGHTS)
    else:
        program, run = compile_fn(fn, X, KEY, VALUE, *ATTENTION_WEIGHTS)
        got = run([X, KEY, VALUE, *ATTENTION_WEIGHTS])
        expected = fn(X, KEY, VALUE, *ATTENTION_WEIGHTS)
    assert program.metadata["aot"]["extern_ops"] == []
    _assert_matches_eager(got, expected)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("mask_name", ["none", "attn_bool", "attn_float_ones", "padding_float",
                                       "merged_float", "query_without_keys"])
def test_transformer_encoder_layer_fwd_matches_eager(mask_name: str, norm_first: bool,
                                                     activation: str) -> None:
    mask, mask_type = MASKS[mask_name]

    def fn(x: torch.Tensor, *w: torch.Tensor) -> torch.Tensor:
        attention, norms, feed_forward = w[:4], w[4:8], w[8:]
        return ENCODER_LAYER(x, E, H, *attention, activation == "gelu", norm_first, 1e-3,
                             *norms, *feed_forward, mask, mask_type)

    weights = [*ATTENTION_WEIGHTS, *NORMS, *FEED_FORWARD]
    program, run = compile_fn(fn, X, *weights)
    assert program.metadata["aot"]["extern_ops"] == []
    _assert_matches_eager(run([X, *weights]), fn(X, *weights))


@pytest.mark.parametrize("need_weights", [True, False])
def test_symbolic_batch_and_length(need_weights: bool) -> None:
    """With symbolic sizes nothing is specialised: one program serves other sizes."""
    def fn(x: torch.Tensor, m: torch.Tensor, *w: torch.Tensor) -> Any:
        return MHA(x, x, x, E, H, *w, m, need_weights, False, 1)

    program, run = compile_fn(fn, X, _PADDED, *ATTENTION_WEIGHTS,
                              dynamic={0: {0: (2, 64), 1: (2, 64)}, 1: {0: (2, 64), 1: (2, 64)}})
    assert program.metadata["aot"]["extern_ops"] == []
    assert len(program.forward.symbols) == 2
    x, padding = torch.randn(3, 7, E), torch.rand(3, 7) > 0.6
    _assert_matches_eager(run([x, padding, *ATTENTION_WEIGHTS]),
                          fn(x, padding, *ATTENTION_WEIGHTS))


def _fast_path_ops(program: Program) -> set[str]:
    return {n.target for n in program.forward.nodes
            if n.op == "call" and n.target in ("aten::_native_multi_head_attention.default",
                                               "aten::_transformer_encoder_layer_fwd.default")}


@pytest.mark.parametrize("masks", ["none", "attn", "padding", "both"])
@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_attention_module_in_inference(masks: str, need_weights: bool) -> None:
    torch.manual_seed(1)
    module = torch.nn.MultiheadAttention(E, H, batch_first=True).eval()
    attn_mask = _SOME if masks in ("attn", "both") else None
    padding = _PADDED if masks in ("padding", "both") else None

    def forward(x: torch.Tensor) -> Any:
        return module(x, x, x, attn_mask=attn_mask, key_padding_mask=padding,
                      need_weights=need_weights)

    holder = _Forward(forward, module)
    with torch.no_grad():
        captured = capture_module(holder, X)
        assert _fast_path_ops(captured) == {"aten::_native_multi_head_attention.default"}
        program, run = compile_module(holder, X)
        assert program.metadata["aot"]["extern_ops"] == []
        _assert_matches_eager(run(X), forward(X))


class _Forward(torch.nn.Module):
    """A module whose forward is ``fn`` and whose parameters are ``owner``'s."""

    def __init__(self, fn: Callable[..., Any], owner: torch.nn.Module) -> None:
        super().__init__()
        self.owner = owner
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> Any:
        return self.fn(*args)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_module_in_inference(norm_first: bool, activation: str) -> None:
    torch.manual_seed(2)
    layer = torch.nn.TransformerEncoderLayer(E, H, FF, dropout=0.1, activation=activation,
                                             layer_norm_eps=1e-4, batch_first=True,
                                             norm_first=norm_first).eval()
    with torch.no_grad():
        captured = capture_module(layer, X)
        assert _fast_path_ops(captured) == {"aten::_transformer_encoder_layer_fwd.default"}
        program, run = compile_module(layer, X)
        assert program.metadata["aot"]["extern_ops"] == []
        _assert_matches_eager(run(X), layer(X))


def _text(program: Program) -> str:
    graph = program.forward
    graph.nodes = [dataclasses.replace(n, source=None) for n in graph.nodes]
    return print_graph(graph, "forward", program.signature.inputs["forward"],
                       program.signature.outputs["forward"])


EXPECTED = """\
graph forward(
    %in0: f32[2, 5, 16]{80,16,1} cpu,
    %in1: bool[2, 5]{5,1} cpu,
    %in2: f32[48, 16]{16,1} cpu,
    %in3: f32[48]{1} cpu,
    %in4: f32[16, 16]{16,1} cpu,
    %in5: f32[16]{1} cpu,
):
  %view: bool[2, 1, 1, 5]{5,5,5,1} cpu = aten::view.default(%in1, [2, 1, 1, 5])
  %logical_not: bool[2, 1, 1, 5]{5,5,5,1} cpu = aten::logical_not.default(%view)
  %view_1: f32[10, 16]{16,1} cpu = aten::view.default(%in0, [10, 16])
  %permute: f32[16, 48]{1,16} cpu = aten::permute.default(%in2, [1, 0])
  %addmm: f32[10, 48]{48,1} cpu = aten::addmm.default(%in3, %view_1, %permute)
  %view_2: f32[2, 5, 48]{240,48,1} cpu = aten::view.default(%addmm, [2, 5, 48])
  %split_with_sizes: (f32[2, 5, 16]{240,48,1} cpu, f32[2, 5, 16]{240,48,1} cpu offset=16, f32[2, 5, 16]{240,48,1} cpu offset=32) = aten::split_with_sizes.default(%view_2, [16, 16, 16], -1)
  %view_3: f32[2, 5, 4, 4]{240,48,4,1} cpu = aten::view.default(%split_with_sizes.0, [2, 5, 4, 4])
  %permute_1: f32[2, 4, 5, 4]{240,4,48,1} cpu = aten::permute.default(%view_3, [0, 2, 1, 3])
  %view_4: f32[2, 5, 4, 4]{240,48,4,1} cpu offset=16 = aten::view.default(%split_with_sizes.1, [2, 5, 4, 4])
  %permute_2: f32[2, 4, 5, 4]{240,4,48,1} cpu offset=16 = aten::permute.default(%view_4, [0, 2, 1, 3])
  %view_5: f32[2, 5, 4, 4]{240,48,4,1} cpu offset=32 = aten::view.default(%split_with_sizes.2, [2, 5, 4, 4])
  %permute_3: f32[2, 4, 5, 4]{240,4,48,1} cpu offset=32 = aten::permute.default(%view_5, [0, 2, 1, 3])
  %scalar_tensor: f32[]{} cpu = aten::scalar_tensor.default(-inf, dtype=torch.float32, device=device("cpu"))
  %scalar_tensor_1: f32[]{} cpu = aten::scalar_tensor.default(0.0, dtype=torch.float32, layout=torch.strided, device=device("cpu"))
  %where: f32[2, 1, 1, 5]{5,5,5,1} cpu = aten::where.self(%logical_not, %scalar_tensor_1, %scalar_tensor)
  %_scaled_dot_product_flash_attention_for_cpu: (f32[2, 4, 5, 4]{80,4,16,1} cpu, f32[2, 4, 5]{20,1,4} cpu) = aten::_scaled_dot_product_flash_attention_for_cpu.default(%permute_1, %permute_2, %permute_3, attn_mask=%where, scale=0.5)
  %any: bool[2, 1, 1, 1]{1,1,1,1} cpu = aten::any.dim(%logical_not, -1, True)
  %scalar_tensor_2: f32[]{} cpu = aten::scalar_tensor.default(nan, dtype=torch.float32, layout=torch.strided, device=device("cpu"))
  %where_1: f32[2, 4, 5, 4]{80,4,16,1} cpu = aten::where.self(%any, %_scaled_dot_product_flash_attention_for_cpu.0, %scalar_tensor_2)
  %permute_4: f32[2, 5, 4, 4]{80,16,4,1} cpu = aten::permute.default(%where_1, [0, 2, 1, 3])
  %view_6: f32[2, 5, 16]{80,16,1} cpu = aten::view.default(%permute_4, [2, 5, 16])
  %view_7: f32[10, 16]{16,1} cpu = aten::view.default(%view_6, [10, 16])
  %permute_5: f32[16, 16]{1,16} cpu = aten::permute.default(%in4, [1, 0])
  %addmm_1: f32[10, 16]{16,1} cpu = aten::addmm.default(%in5, %view_7, %permute_5)
  %view_8: f32[2, 5, 16]{80,16,1} cpu = aten::view.default(%addmm_1, [2, 5, 16])
  return (%view_8)  [user_output]
"""


def test_printed_decomposition() -> None:
    """Self-attention with a key padding mask, no weights: one addmm for q, k and v,
    head views, SDPA (CPU: the fused flash kernel) on the inverted mask, NaN for queries
    without keys, the output projection."""
    def fn(x: torch.Tensor, m: torch.Tensor, *w: torch.Tensor) -> Any:
        return MHA(x, x, x, E, H, *w, m, False, True, 1)[0]

    text = _text(aot_compile(capture(fn, X, _PADDED, *ATTENTION_WEIGHTS)))
    assert text == EXPECTED, text


def test_nested_tensor_input_stays_whole_and_says_why(
        capsys: pytest.CaptureFixture[str]) -> None:
    decomposition = TRANSFORMER_DECOMPOSITIONS[ENCODER_LAYER]
    nested = torch.nested.nested_tensor([X[0, :3], X[1]])
    weights = [*ATTENTION_WEIGHTS, *NORMS, *FEED_FORWARD]
    attention, norms, feed_forward = weights[:4], weights[4:8], weights[8:]
    assert decomposition(nested, E, H, *attention, False, False, 1e-5, *norms,
                         *feed_forward) is NotImplemented
    nested_reason = ("its input is a nested tensor (nn.TransformerEncoder's sparsity fast "
                     "path), which the decomposition does not cover")
    assert take_reasons() == {"aten::_transformer_encoder_layer_fwd.default": [nested_reason]}
    with patch(logs="fallbacks"):
        # a call the decomposition declines (here: a mask eager rejects) is logged with
        # the reason, not as "no decomposition"
        program = aot_compile(capture(
            lambda x, *w: MHA(x, x, x, E, H, *w, _PADDED[:1], True, True, 1)[0],
            X, *ATTENTION_WEIGHTS))
    assert program.metadata["aot"]["extern_ops"] == [
        "aten::_native_multi_head_attention.default"]
    err = capsys.readouterr().err
    assert ("aten::_native_multi_head_attention.default is kept whole by its "
            "decomposition: its mask of shape [1, 5] does not fit mask_type 1") in err


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_encoder_layer_gelu_is_eager_addmm_activation(device: str) -> None:
    """Eager's encoder layer computes ``gelu(linear1(x))`` with ``_addmm_activation``:
    exact on the CPU, the tanh approximation on CUDA (torch's own decomposition of
    ``_addmm_activation`` says so; on an H200, eager's fp32 result was not the exact gelu's).
    Recorded on fake tensors of the device, so it runs without one."""
    recorder = GraphRecorder()
    weights = [X, *ATTENTION_WEIGHTS, *NORMS, *FEED_FORWARD]
    with recorder.fake_mode:
        fakes = [torch.empty(w.shape, device=device) for w in weights]
    x, *w = [recorder.add_input(f, InputSpec(f"in{i}")) for i, f in enumerate(fakes)]
    with recorder:
        out = ENCODER_LAYER(x, E, H, *w[:4], True, False, 1e-5, *w[4:8], *w[8:], None, None)
    program = aot_compile(recorder.finish([out]))
    assert program.metadata["aot"]["extern_ops"] == []
    gelus = [n.kwargs.get("approximate", "none") for n in program.forward.nodes
             if n.target == "aten::gelu.default"]
    assert gelus == (["tanh"] if device == "cuda" else ["none"])
