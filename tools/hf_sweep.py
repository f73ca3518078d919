"""The HF architecture sweep: many ``transformers`` model types, tiny random configs,
through ``ember.frontend.compile``, values and gradients compared with eager.

    python tools/hf_sweep.py --family causal [--models gpt_neo,falcon] [--backend inductor]
        [--modes infer,train] [--timeout 180] [--csv OUT]

Each model type of a family (an ``AUTO`` mapping of ``transformers``: ``causal``,
``seq2seq``, ``masked``, ``image``, ``audio``) is built from its default config shrunk by
:data:`SMALL` (every key the config already has is overridden; every dropout set to 0),
with seeded random weights; nothing is downloaded. A model whose shrunk config does not
build or run eagerly is retried with its default config (image and audio models only:
their stage lists do not shrink by key). Each mode runs eagerly once, then compiled three
times; the third call's logits (``infer``) or loss and every parameter gradient
(``train``, ``labels=``) are compared with eager's (``--rtol``/``--atol``).

Each row's ``status``: ``ok``; ``mismatch`` (values differ: what, first); ``breaks``
(values match, more than one graph, a graph break or a recompile: the first break's
reason and line, from ``explain``); ``ember-error`` (eager ran, the compiled call raised);
``eager-error`` (the tiny config does not run eagerly: a sweep limitation, not Ember's).
"""

from __future__ import annotations

import argparse
import copy
import csv
import inspect
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

SMALL: dict[str, Any] = dict(
    vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, n_embd=32,
    n_layer=2, n_head=4, n_positions=64, d_model=32, num_layers=2, num_heads=4, ffn_dim=64,
    d_ff=64, n_inner=64, use_cache=False, pad_token_id=0, bos_token_id=0, eos_token_id=0,
    head_dim=8, d_kv=8, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
    decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, num_experts=4,
    num_local_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, image_size=32,
    patch_size=4, embed_dim=16, num_labels=2, mask_time_prob=0.0, emb_dim=32, n_layers=2,
    rotary_dim=8, qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=8, kv_lora_rank=16,
    q_lora_rank=16)
"""The shrunk sizes; a key is set only where the default config already has it."""

FAMILIES = {
    "causal": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "seq2seq": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "masked": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "image": "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "audio": "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
}
BATCH, SEQ, IMAGE, AUDIO_SAMPLES = 2, 8, 32, 1600


@dataclass
class Row:
    family: str
    model: str
    mode: str
    status: str
    detail: str = ""
    graphs: int | None = None
    breaks: int | None = None
    compiles: int | None = None
    seconds: float = 0.0


class _Timeout(Exception):
    pass


def _shrink(config: Any, shrink: bool) -> None:
    """Set :data:`SMALL`'s keys (``shrink``) and zero every dropout and jitter (random
    noise: a compiled model draws other numbers than eager) of ``config`` and of the
    configs nested in it (a multimodal model's ``text_config``: Fuyu's default
    text model alone is 36 layers of 4096, which ran out of the machine's memory)."""
    from transformers import PretrainedConfig

    for key, value in SMALL.items() if shrink else ():
        if key in vars(config):
            try:
                setattr(config, key, value)
            except (AttributeError, ValueError, TypeError):
                pass  # a derived or validated field: the default stays
    if shrink and "kv_lora_rank" in vars(config) and "num_key_value_heads" in vars(config):
        # MLA attention has a key head per query head; a compiler's path in transformers
        # repeats the kv heads by heads / num_key_value_heads (GLM-4-MoE-Lite)
        config.num_key_value_heads = config.num_attention_heads
    if shrink and "kv_lora_rank" in vars(config) and "head_dim" in vars(config):
        config.head_dim = config.qk_rope_head_dim  # MLA's rotary embedding is this wide
    for key, value in list(vars(config).items()):
        if ("drop" in key or "jitter" in key) and isinstance(value, float):
            setattr(config, key, 0.0)
        elif isinstance(value, PretrainedConfig):
            _shrink(value, shrink)


def _config(model_type: str, shrink: bool) -> Any:
    from transformers import CONFIG_MAPPING

    config = CONFIG_MAPPING[model_type]()
    _shrink(config, shrink)
    if hasattr(config, "problem_type"):  # set, as a fine-tuning script does: left unset,
        config.problem_type = "single_label_classification"  # the loss head writes it
    return config


def _inputs(family: str, model: torch.nn.Module, mode: str) -> dict[str, Any]:
    ids = torch.randint(1, 100, (BATCH, SEQ))
    if family in ("causal", "seq2seq", "masked"):
        kw: dict[str, Any] = {"input_ids": ids}
        if family == "seq2seq":
            kw["decoder_input_ids"] = ids
        if mode == "train":
            kw["labels"] = ids
        return kw
    if family == "image":
        channels = getattr(getattr(model, "config", None), "num_channels", 3)
        kw = {"pixel_values": torch.randn(BATCH, channels, IMAGE, IMAGE)}
    else:
        takes = inspect.signature(model.forward).parameters
        kw = ({"input_values": torch.randn(BATCH, AUDIO_SAMPLES)} if "input_values" in takes
              else {"input_features": torch.randn(BATCH, 80, 64)})
    if mode == "train":
        kw["labels"] = torch.tensor([1, 0])
    return kw


def _run(model: torch.nn.Module, call: Callable[..., Any], kw: dict[str, Any],
         mode: str) -> Any:
    torch.manual_seed(1)
    model.zero_grad(set_to_none=True)
    if mode == "train":
        out = call(**kw)
        out.loss.backward()
        return out
    with torch.no_grad():
        return call(**kw)


def _build(family: str, model_type: str, class_name: str, mode: str
           ) -> tuple[torch.nn.Module, torch.nn.Module, dict[str, Any], Any]:
    """The model, its twin for compiling (copied before eager's run: a model may keep
    non-leaf tensors afterwards, which ``deepcopy`` refuses), its inputs and eager's
    output; a default config where the shrunk one fails (image/audio only). Raises what
    eager raised."""
    import transformers

    attempts = (True, False) if family in ("image", "audio") else (True,)
    for i, shrink in enumerate(attempts):
        try:
            torch.manual_seed(0)
            model = getattr(transformers, class_name)(_config(model_type, shrink))
            model.train(mode == "train")
            twin = copy.deepcopy(model)
            kw = _inputs(family, model, mode)
            return model, twin, kw, _run(model, model, kw, mode)
        except Exception:
            if i == len(attempts) - 1:
                raise
    raise AssertionError("unreachable")


def _compare(ref: Any, out: Any, model: torch.nn.Module, compiled_model: torch.nn.Module,
             mode: str, rtol: float, atol: float) -> str:
    key = "loss" if mode == "train" else "logits"
    a, b = getattr(out, key, None), getattr(ref, key, None)
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return f"no {key} to compare"
    if a.shape != b.shape or not torch.allclose(a, b, rtol=rtol, atol=atol):
        return f"{key} differs (max {float((a.float() - b.float()).abs().max()):.2e})"
    if mode == "train":
        for (name, p), q in zip(model.named_parameters(), compiled_model.parameters()):
            if (p.grad is None) != (q.grad is None) or (
                    p.grad is not None and q.grad is not None
                    and not torch.allclose(p.grad, q.grad, rtol=rtol, atol=atol)):
                return f"gradient of {name} differs"
    return ""


def sweep_one(family: str, model_type: str, mode: str, backend: str, rtol: float,
              atol: float) -> Row:
    """One model type in one mode: the row of the table."""
    import ember.frontend as ef
    from transformers.models.auto import modeling_auto

    names = getattr(modeling_auto, FAMILIES[family])
    class_name = names[model_type] if isinstance(names[model_type], str) else names[model_type][0]
    row = Row(family, model_type, mode, "ok")
    try:
        model, twin, kw, ref = _build(family, model_type, class_name, mode)
    except Exception as e:  # noqa: BLE001 - the tiny config is the sweep's, not Ember's
        row.status, row.detail = "eager-error", f"{type(e).__name__}: {str(e)[:160]}"
        return row
    compiled = ef.compile(twin, backend=backend)
    try:
        out = None
        for _ in range(3):
            out = _run(twin, compiled, kw, mode)
    except Exception as e:  # noqa: BLE001 - reported, with where it was raised
        where = traceback.extract_tb(e.__traceback__)[-1]
        row.status = "ember-error"
        row.detail = (f"{type(e).__name__}: {str(e)[:160]} "
                      f"({where.filename.rsplit('/', 1)[-1]}:{where.lineno})")
        return row
    stats = compiled.stats
    # a first call the on-disk capture cache answered (an earlier run, or another model
    # type with the same code and config) is that capture's one compile
    row.graphs, row.breaks = stats.graphs, stats.graph_breaks
    row.compiles = stats.compiles + stats.capture_cache_hits
    row.detail = _compare(ref, out, model, twin, mode, rtol, atol)
    if row.detail:
        row.status = "mismatch"
    elif stats.graphs != 1 or stats.graph_breaks or row.compiles != 1:
        row.status, row.detail = "breaks", _first_break(model, kw, mode)
    return row


def _first_break(model: torch.nn.Module, kw: dict[str, Any], mode: str) -> str:
    """The first break of ``explain`` on a fresh copy: its reason and source line."""
    import ember.frontend as ef

    with torch.set_grad_enabled(mode == "train"):
        report = str(ef.explain(copy.deepcopy(model))(**kw)).splitlines()
    for i, line in enumerate(report):
        if line.startswith("Break 1:"):
            reason, where, source = line[len("Break 1:"):].strip()[:160], "", ""
            for more in report[i + 1:i + 4]:
                text = more.strip()
                if more.startswith("Break ") or not more.startswith(" "):
                    break
                if text.startswith("at ") and not where:
                    where = text[3:].rsplit("/", 1)[-1]  # file:line in function
                elif text and not source:
                    source = text[:100]
            return " | ".join(part for part in (reason, where, source) if part)
    return "no break in a fresh capture: a recompile (EMBER_LOGS=recompiles says why)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", choices=sorted(FAMILIES), default="causal")
    parser.add_argument("--models", default="", help="comma-separated model types "
                        "(default: every type of the family's transformers mapping)")
    parser.add_argument("--backend", default="aot_eager")
    parser.add_argument("--modes", default="infer,train")
    parser.add_argument("--timeout", type=int, default=180, help="seconds per model and mode")
    parser.add_argument("--rtol", type=float, default=1e-3)
    parser.add_argument("--atol", type=float, default=1e-4)
    parser.add_argument("--csv", default="", help="write the rows here too")
    args = parser.parse_args(argv)
    from transformers.models.auto import modeling_auto

    names = getattr(modeling_auto, FAMILIES[args.family])
    models = [m for m in args.models.split(",") if m] or list(names)
    unknown = [m for m in models if m not in names]
    if unknown:
        parser.error(f"not {args.family} model types: {', '.join(unknown)}")

    def on_alarm(signum: int, frame: Any) -> None:
        raise _Timeout

    signal.signal(signal.SIGALRM, on_alarm)
    rows: list[Row] = []
    for model_type in models:
        for mode in args.modes.split(","):
            start = time.perf_counter()
            signal.alarm(args.timeout)
            try:
                row = sweep_one(args.family, model_type, mode, args.backend, args.rtol, args.atol)
            except _Timeout:
                row = Row(args.family, model_type, mode, "timeout", f"over {args.timeout} s")
            finally:
                signal.alarm(0)
            row.seconds = time.perf_counter() - start
            rows.append(row)
            print(f"{model_type:24s} {mode:5s} {row.seconds:6.1f}s {row.status:11s} "
                  f"graphs={row.graphs} breaks={row.breaks} compiles={row.compiles} "
                  f"{row.detail}", flush=True)
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    print(", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(list(Row.__dataclass_fields__))
            writer.writerows([list(vars(r).values()) for r in rows])
    return 0


if __name__ == "__main__":
    sys.exit(main())
