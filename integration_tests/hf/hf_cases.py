"""The transformers models of the HF suite: tiny random configs, one shared input builder.

Every model is built from a config (no download, random weights seeded from
``torch.manual_seed``): 2 layers, hidden size 32, sequence length 8, images 32x32. All
dropout-like probabilities are set to 0 so the training cases are deterministic and the
compiled and eager runs can be compared exactly.

A case is ``(model name, mode)``: ``"infer"`` runs the model in ``eval()`` mode under
``no_grad``; ``"train"`` runs it in ``train()`` mode with ``labels=`` (``return_loss=True``
for CLIP) so the model's own loss head computes ``out.loss``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import transformers as tf
from torch import nn

BATCH = 2
SEQ = 8
VOCAB = 128
HIDDEN = 32
IMAGE = 32
CLASSES = 4
MEL_BINS = 8
AUDIO_POSITIONS = 8  # Whisper's encoder sees 2 * AUDIO_POSITIONS feature frames

# Inputs a model family takes (besides labels): the input builder's vocabulary.
TEXT = "text"  # input_ids (and attention_mask)
SEQ2SEQ = "seq2seq"  # input_ids, decoder_input_ids
IMAGE_IN = "image"  # pixel_values
AUDIO = "audio"  # input_features, decoder_input_ids
TEXT_IMAGE = "text_image"  # input_ids, pixel_values (CLIP)


@dataclass(frozen=True)
class HFModel:
    """A model of the suite.

    ``build(layers)`` makes the model (with its loss head) from a config with ``layers``
    layers; ``inputs`` names the input family of :func:`make_inputs`; ``labels`` is the kind
    of training target (``"tokens"``: one class id per position, ``"class"``: one per
    example, ``"none"``: the model computes its loss without labels, as CLIP).
    """

    name: str
    build: Callable[[int], nn.Module]
    inputs: str
    labels: str


def _no_dropout(config: Any) -> Any:
    """Set every dropout / drop-path / layer-drop probability of ``config`` to 0."""
    for key, value in list(vars(config).items()):
        if "drop" in key and isinstance(value, float):
            setattr(config, key, 0.0)
    for sub in ("text_config", "vision_config"):
        if hasattr(config, sub):
            _no_dropout(getattr(config, sub))
    return config


def _decoder_kw(layers: int) -> dict[str, Any]:
    """The sizes every decoder-only config spells the same way."""
    return {"vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": 2 * HIDDEN,
            "num_hidden_layers": layers, "num_attention_heads": 4,
            "max_position_embeddings": 64, "use_cache": False, "pad_token_id": 0,
            "bos_token_id": 0, "eos_token_id": 0}


def _llama(layers: int) -> nn.Module:
    # num_key_value_heads < num_attention_heads: grouped-query attention
    cfg = tf.LlamaConfig(num_key_value_heads=2, **_decoder_kw(layers))
    return tf.LlamaForCausalLM(_no_dropout(cfg))


def _mistral(layers: int) -> nn.Module:
    cfg = tf.MistralConfig(num_key_value_heads=2, sliding_window=None, **_decoder_kw(layers))
    return tf.MistralForCausalLM(_no_dropout(cfg))


def _qwen2(layers: int) -> nn.Module:
    cfg = tf.Qwen2Config(num_key_value_heads=2, **_decoder_kw(layers))
    return tf.Qwen2ForCausalLM(_no_dropout(cfg))


def _gemma(layers: int) -> nn.Module:
    cfg = tf.GemmaConfig(num_key_value_heads=2, head_dim=8, **_decoder_kw(layers))
    return tf.GemmaForCausalLM(_no_dropout(cfg))


def _phi(layers: int) -> nn.Module:
    return tf.PhiForCausalLM(_no_dropout(tf.PhiConfig(**_decoder_kw(layers))))


def _qwen3(layers: int) -> nn.Module:
    # RMS-normed queries and keys (q_norm / k_norm) before the rotary embedding
    cfg = tf.Qwen3Config(num_key_value_heads=2, head_dim=8, **_decoder_kw(layers))
    return tf.Qwen3ForCausalLM(_no_dropout(cfg))


def _gemma2(layers: int) -> nn.Module:
    # attention and final logit soft-capping (tanh), alternating sliding-window layers
    cfg = tf.Gemma2Config(num_key_value_heads=2, head_dim=8, sliding_window=4,
                          **_decoder_kw(layers))
    return tf.Gemma2ForCausalLM(_no_dropout(cfg))


def _mixtral(layers: int) -> nn.Module:
    # sparse mixture of experts: top-2 routing over 4 experts (data-dependent dispatch)
    cfg = tf.MixtralConfig(num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                           sliding_window=None, **_decoder_kw(layers))
    return tf.MixtralForCausalLM(_no_dropout(cfg))


def _gpt_neox(layers: int) -> nn.Module:
    return tf.GPTNeoXForCausalLM(_no_dropout(tf.GPTNeoXConfig(**_decoder_kw(layers))))


def _gpt2(layers: int) -> nn.Module:
    cfg = tf.GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=layers, n_head=4,
                        n_positions=64, use_cache=False, bos_token_id=0, eos_token_id=0)
    return tf.GPT2LMHeadModel(_no_dropout(cfg))


def _opt(layers: int) -> nn.Module:
    cfg = tf.OPTConfig(vocab_size=VOCAB, hidden_size=HIDDEN, ffn_dim=2 * HIDDEN,
                       num_attention_heads=4, num_hidden_layers=layers,
                       max_position_embeddings=64, word_embed_proj_dim=HIDDEN, use_cache=False,
                       pad_token_id=1, bos_token_id=2, eos_token_id=2)
    return tf.OPTForCausalLM(_no_dropout(cfg))


def _mamba(layers: int) -> nn.Module:
    # a selective state-space model: its scan is torch's associative_scan under a compiler
    cfg = tf.MambaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, state_size=4,
                         num_hidden_layers=layers, expand=2, conv_kernel=4, use_cache=False,
                         pad_token_id=0, bos_token_id=0, eos_token_id=0)
    return tf.MambaForCausalLM(_no_dropout(cfg))


def _bert(layers: int) -> nn.Module:
    cfg = tf.BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN,
                        num_hidden_layers=layers, num_attention_heads=4,
                        max_position_embeddings=64)
    return tf.BertForMaskedLM(_no_dropout(cfg))


def _deberta_v2(layers: int) -> nn.Module:
    # disentangled attention: content-to-position and position-to-content terms over
    # log-bucketed relative positions
    cfg = tf.DebertaV2Config(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN,
                             num_hidden_layers=layers, num_attention_heads=4,
                             max_position_embeddings=64, relative_attention=True,
                             position_buckets=16, max_relative_positions=32,
                             pos_att_type=["p2c", "c2p"])
    return tf.DebertaV2ForMaskedLM(_no_dropout(cfg))


def _t5(layers: int) -> nn.Module:
    cfg = tf.T5Config(vocab_size=VOCAB, d_model=HIDDEN, d_ff=2 * HIDDEN, d_kv=8, num_heads=4,
                      num_layers=layers, num_decoder_layers=layers, use_cache=False,
                      pad_token_id=0, eos_token_id=1)
    cfg.decoder_start_token_id = 0  # read by _shift_right; not a typed T5Config argument
    return tf.T5ForConditionalGeneration(_no_dropout(cfg))


def _bart(layers: int) -> nn.Module:
    cfg = tf.BartConfig(vocab_size=VOCAB, d_model=HIDDEN, encoder_ffn_dim=2 * HIDDEN,
                        decoder_ffn_dim=2 * HIDDEN, encoder_attention_heads=4,
                        decoder_attention_heads=4, encoder_layers=layers, decoder_layers=layers,
                        max_position_embeddings=64, use_cache=False, pad_token_id=1,
                        bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
    return tf.BartForConditionalGeneration(_no_dropout(cfg))


def _whisper(layers: int) -> nn.Module:
    cfg = tf.WhisperConfig(vocab_size=VOCAB, num_mel_bins=MEL_BINS, d_model=HIDDEN,
                           encoder_layers=layers, decoder_layers=layers,
                           encoder_attention_heads=4, decoder_attention_heads=4,
                           encoder_ffn_dim=2 * HIDDEN, decoder_ffn_dim=2 * HIDDEN,
                           max_source_positions=AUDIO_POSITIONS, max_target_positions=64,
                           use_cache=False, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                           decoder_start_token_id=1)
    return tf.WhisperForConditionalGeneration(_no_dropout(cfg))


# The classifiers' configs name their problem type. Left at None, the loss head writes
# ``config.problem_type`` on the first call, and later calls, which read the written
# value, take another branch: one recompile for any compiler (torch.compile's too).
# test_hf_models.py checks that path on its own (test_loss_writes_problem_type).
_CLASSIFIER: dict[str, Any] = {"num_labels": CLASSES,
                               "problem_type": "single_label_classification"}


def vit_without_problem_type(layers: int) -> nn.Module:
    """ViT whose config leaves ``problem_type`` unset (the loss head writes it)."""
    return _vit(layers, problem_type=None)


def _vit(layers: int, **extra: Any) -> nn.Module:
    cfg = tf.ViTConfig(image_size=IMAGE, patch_size=8, hidden_size=HIDDEN,
                       intermediate_size=2 * HIDDEN, num_hidden_layers=layers,
                       num_attention_heads=4, **{**_CLASSIFIER, **extra})
    return tf.ViTForImageClassification(_no_dropout(cfg))


def _clip(layers: int) -> nn.Module:
    text = {**_decoder_kw(layers), "eos_token_id": 2}
    del text["use_cache"]
    vision = {"image_size": IMAGE, "patch_size": 8, "hidden_size": HIDDEN,
              "intermediate_size": 2 * HIDDEN, "num_hidden_layers": layers,
              "num_attention_heads": 4}
    cfg = tf.CLIPConfig(text_config=text, vision_config=vision, projection_dim=HIDDEN)
    return tf.CLIPModel(_no_dropout(cfg))


def _convnext(layers: int) -> nn.Module:
    cfg = tf.ConvNextConfig(num_stages=2, hidden_sizes=[16, HIDDEN], depths=[layers, layers],
                            image_size=IMAGE, **_CLASSIFIER)
    return tf.ConvNextForImageClassification(_no_dropout(cfg))


def _swin(layers: int) -> nn.Module:
    cfg = tf.SwinConfig(image_size=IMAGE, patch_size=4, embed_dim=16, depths=[layers, layers],
                        num_heads=[2, 4], window_size=4, **_CLASSIFIER)
    return tf.SwinForImageClassification(_no_dropout(cfg))


MODELS: dict[str, HFModel] = {m.name: m for m in (
    HFModel("llama", _llama, TEXT, "tokens"),
    HFModel("mistral", _mistral, TEXT, "tokens"),
    HFModel("qwen2", _qwen2, TEXT, "tokens"),
    HFModel("gemma", _gemma, TEXT, "tokens"),
    HFModel("phi", _phi, TEXT, "tokens"),
    HFModel("gpt2", _gpt2, TEXT, "tokens"),
    HFModel("gpt_neox", _gpt_neox, TEXT, "tokens"),
    HFModel("opt", _opt, TEXT, "tokens"),
    HFModel("mamba", _mamba, TEXT, "tokens"),
    HFModel("bert", _bert, TEXT, "tokens"),
    HFModel("qwen3", _qwen3, TEXT, "tokens"),
    HFModel("gemma2", _gemma2, TEXT, "tokens"),
    HFModel("mixtral", _mixtral, TEXT, "tokens"),
    HFModel("deberta_v2", _deberta_v2, TEXT, "tokens"),
    HFModel("t5", _t5, SEQ2SEQ, "tokens"),
    HFModel("bart", _bart, SEQ2SEQ, "tokens"),
    HFModel("whisper", _whisper, AUDIO, "tokens"),
    HFModel("vit", _vit, IMAGE_IN, "class"),
    HFModel("clip", _clip, TEXT_IMAGE, "none"),
    HFModel("convnext", _convnext, IMAGE_IN, "class"),
    HFModel("swin", _swin, IMAGE_IN, "class"),
)}


def build_model(name: str, mode: str, layers: int = 2,
                build: Callable[[int], nn.Module] | None = None) -> nn.Module:
    """The model ``name`` (made by ``build`` instead of the registry's when given) with
    seeded random weights, in ``eval()`` (``mode="infer"``) or ``train()`` mode."""
    torch.manual_seed(0)
    model = (build or MODELS[name].build)(layers)
    return model.train() if mode == "train" else model.eval()


def make_inputs(name: str, mode: str, seed: int = 0) -> dict[str, torch.Tensor]:
    """The keyword inputs of one call of model ``name`` (tokenizer-free, seeded).

    Token ids avoid the special ids 0-2 so no model sees padding; ``mode="train"`` adds
    the training target (``labels``, or ``return_loss`` for CLIP).
    """
    spec = MODELS[name]
    gen = torch.Generator().manual_seed(seed)

    def tokens(*shape: int) -> torch.Tensor:
        return torch.randint(3, VOCAB, shape, generator=gen)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen)

    kw: dict[str, Any] = {}
    if spec.inputs in (TEXT, SEQ2SEQ, TEXT_IMAGE):
        kw["input_ids"] = tokens(BATCH, SEQ)
        kw["attention_mask"] = torch.ones(BATCH, SEQ, dtype=torch.long)
    if spec.inputs in (SEQ2SEQ, AUDIO) and mode == "infer":
        kw["decoder_input_ids"] = tokens(BATCH, SEQ)  # training derives them from labels
    if spec.inputs in (IMAGE_IN, TEXT_IMAGE):
        kw["pixel_values"] = randn(BATCH, 3, IMAGE, IMAGE)
    if spec.inputs == AUDIO:
        kw["input_features"] = randn(BATCH, MEL_BINS, 2 * AUDIO_POSITIONS)
    if mode == "train":
        if spec.labels == "tokens":
            kw["labels"] = tokens(BATCH, SEQ)
        elif spec.labels == "class":
            kw["labels"] = torch.randint(0, CLASSES, (BATCH,), generator=gen)
        else:
            kw["return_loss"] = True
    return kw


def tensors_of(out: Any) -> list[torch.Tensor]:
    """Every tensor in a model output (``ModelOutput``, tuple, list or dict), in order."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):  # ModelOutput is an OrderedDict of its non-None fields
        return [t for v in out.values() for t in tensors_of(v)]
    if isinstance(out, (tuple, list)):
        return [t for v in out for t in tensors_of(v)]
    return []
