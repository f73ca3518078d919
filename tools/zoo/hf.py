"""Hugging Face ``transformers`` GPT-2, BERT and Llama from small configs with random weights.

Registered only when ``transformers`` is installed; nothing is downloaded. The wrappers
return one tensor (the logits / last hidden state), not a ``ModelOutput``, so every compiler sees
the same plain output.
"""

from __future__ import annotations

import importlib.util

import torch
from torch import nn

from zoo.registry import ModelAndInputs, build, pick, register, seeded_tokens

# Checked without importing: importing transformers takes seconds, and only the HF
# factories need it.
HAVE_TRANSFORMERS = importlib.util.find_spec("transformers") is not None


class FieldOf(nn.Module):
    """Calls a HF model on token ids and returns the output field ``field``."""

    def __init__(self, model: nn.Module, field: str) -> None:
        super().__init__()
        self.model = model
        self.field = field

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.model(input_ids=ids, return_dict=True)[self.field]
        return out


if HAVE_TRANSFORMERS:

    @register("hf_gpt2", "transformers GPT-2 (random weights, small config)", tags=("hf",))
    def make_hf_gpt2(device: torch.device, dtype: torch.dtype, suite: str) -> ModelAndInputs:
        import transformers

        batch, seq, layers, width, heads, vocab = pick(
            suite, test=(2, 8, 2, 32, 2, 128), quick=(2, 64, 2, 64, 4, 1000),
            full=(16, 512, 12, 768, 12, 50257),
        )
        config = transformers.GPT2Config(
            n_layer=layers, n_embd=width, n_head=heads, vocab_size=vocab, n_positions=seq,
            use_cache=False, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
            bos_token_id=0, eos_token_id=0,
        )
        module = build(lambda: FieldOf(transformers.GPT2LMHeadModel(config), "logits"),
                       device, dtype)
        return module, (seeded_tokens(batch, seq, vocab=vocab, device=device, seed=30),)

    @register("hf_bert", "transformers BERT encoder (random weights, small config)", tags=("hf",))
    def make_hf_bert(device: torch.device, dtype: torch.dtype, suite: str) -> ModelAndInputs:
        import transformers

        batch, seq, layers, width, heads, vocab = pick(
            suite, test=(2, 8, 2, 32, 2, 128), quick=(2, 64, 2, 64, 4, 1000),
            full=(16, 512, 12, 768, 12, 30522),
        )
        config = transformers.BertConfig(
            num_hidden_layers=layers, hidden_size=width, num_attention_heads=heads,
            intermediate_size=4 * width, vocab_size=vocab, max_position_embeddings=seq,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        )
        module = build(lambda: FieldOf(transformers.BertModel(config), "last_hidden_state"),
                       device, dtype)
        return module, (seeded_tokens(batch, seq, vocab=vocab, device=device, seed=31),)

    @register("hf_llama",
              "transformers Llama, grouped-query attention (random weights, small config)",
              tags=("hf",))
    def make_hf_llama(device: torch.device, dtype: torch.dtype, suite: str) -> ModelAndInputs:
        import transformers

        # (batch, seq, layers, width, heads, kv heads, vocab): kv heads < heads, so the
        # attention repeats each key/value head (grouped-query attention, as Llama 2/3).
        batch, seq, layers, width, heads, kv_heads, vocab = pick(
            suite, test=(2, 8, 2, 32, 4, 2, 128), quick=(2, 64, 2, 64, 4, 2, 1000),
            full=(8, 512, 8, 1024, 16, 4, 32000),
        )
        config = transformers.LlamaConfig(
            num_hidden_layers=layers, hidden_size=width, num_attention_heads=heads,
            num_key_value_heads=kv_heads, intermediate_size=(8 * width) // 3,
            vocab_size=vocab, max_position_embeddings=seq, use_cache=False,
            attention_dropout=0.0, bos_token_id=0, eos_token_id=0, pad_token_id=0,
        )
        module = build(lambda: FieldOf(transformers.LlamaForCausalLM(config), "logits"),
                       device, dtype)
        return module, (seeded_tokens(batch, seq, vocab=vocab, device=device, seed=32),)
