"""Greedy HF GPT-2 ``generate`` with its ``forward`` compiled: the language-model inference
benchmark of issue #15 (``tools/bench_generate.py``) and its integration test.

``generate`` calls the model (``self(**inputs)`` -> ``nn.Module.__call__`` -> ``forward``)
once for the prompt (prefill: ``[batch, prompt]`` token ids and an empty KV cache) and once
per new token (``[batch, 1]`` ids, the cache one token longer each time); with
``use_cache=False`` it passes the whole sequence each time instead. Assigning the compiled
function to ``model.forward`` compiles exactly what ``generate`` runs, as a user would.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from benchlib import compilers, timing


@dataclass(frozen=True)
class GenerateConfig:
    """The model and the generation: GPT-2 with ``layers`` blocks of width ``hidden``
    (``heads`` heads of 64 by default), random weights (seed 0), a ``batch`` of random
    ``prompt``-token prompts, ``new_tokens`` tokens generated greedily (never stopped
    early: an end-of-sequence token does not end it)."""

    layers: int = 12
    hidden: int = 768
    heads: int | None = None
    vocab: int = 50257
    batch: int = 4
    prompt: int = 32
    new_tokens: int = 128
    use_cache: bool = True

    @property
    def head_count(self) -> int:
        """``heads``, or one head per 64 channels."""
        return self.heads or max(1, self.hidden // 64)


TINY = GenerateConfig(layers=2, hidden=64, heads=4, vocab=1000, batch=2, prompt=8,
                      new_tokens=32)
"""The tiny CPU configuration (``bench_generate.py --cpu`` and the integration test)."""


def build_model(config: GenerateConfig, device: torch.device, dtype: torch.dtype) -> Any:
    """A ``transformers.GPT2LMHeadModel`` of ``config`` with random weights (seeded), in
    ``eval()`` mode, without dropout.

    Raises:
        ImportError: ``transformers`` is not installed.
    """
    import transformers

    gpt2 = transformers.GPT2Config(
        n_layer=config.layers, n_embd=config.hidden, n_head=config.head_count,
        vocab_size=config.vocab, n_positions=config.prompt + config.new_tokens,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
        use_cache=config.use_cache,
    )
    model_class: Any = transformers.GPT2LMHeadModel
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = model_class(gpt2)
    return model.to(device=device, dtype=dtype).eval()


def prompt_ids(config: GenerateConfig, device: torch.device) -> torch.Tensor:
    """The prompts: ``[batch, prompt]`` random token ids (seeded; never the pad id 0)."""
    gen = torch.Generator().manual_seed(1)
    return torch.randint(1, config.vocab, (config.batch, config.prompt), generator=gen).to(device)


def generate(model: Any, ids: torch.Tensor, config: GenerateConfig) -> torch.Tensor:
    """Greedy ``model.generate`` of exactly ``config.new_tokens`` tokens after ``ids``."""
    with torch.no_grad():
        out: torch.Tensor = model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=config.new_tokens,
            min_new_tokens=config.new_tokens, do_sample=False, pad_token_id=0,
            use_cache=config.use_cache,
        )
    return out


@dataclass
class GenerateRow:
    """One compiler's run (``compiler``: its name in :data:`benchlib.compilers.COMPILERS`;
    ``label``: its name in tables): the first ``generate`` (compilation included) and the second,
    in seconds; ``compiles`` (graphs compiled), ``graph_breaks``, ``eager_fallback_calls``
    (calls, or rests of calls, run eagerly: Ember only), ``recompile_limit_hit`` (whether
    the compiler gave up recompiling), as each compiler reports them (``None``: not
    reported); ``tokens_equal`` / ``tokens``: new tokens equal to eager's, of how many
    (``None``: no eager run); ``error``: why the row failed."""

    compiler: str
    label: str
    first_s: float | None = None
    second_s: float | None = None
    compiles: int | None = None
    graph_breaks: int | None = None
    eager_fallback_calls: int | None = None
    recompile_limit_hit: bool | None = None
    tokens_equal: int | None = None
    tokens: int | None = None
    error: str = ""


def run_compiler(compiler: str, model: Any, ids: torch.Tensor, config: GenerateConfig,
                 reference: torch.Tensor | None, *, ember_backend: str = "inductor",
                 dynamic: bool | None = None, ember_options: dict[str, Any] | None = None
                 ) -> tuple[GenerateRow, torch.Tensor | None]:
    """Compile a copy of ``model``'s ``forward`` with ``compiler`` (``model.forward =
    compiled``), run ``generate`` twice, and compare the new tokens with ``reference``
    (eager's output). Returns the row and the generated ids (``None`` on failure: the
    row's ``error`` says why; a failure never raises).
    """
    row = GenerateRow(compiler, compilers.label(compiler, ember_backend, bool(dynamic)))
    device = ids.device
    try:
        local = copy.deepcopy(model)
        compilers.reset(compiler)
        compiled = compilers.compile_fn(compiler, local.forward, ember_backend,
                                        ember_options=ember_options, dynamic=dynamic)
        local.forward = compiled
        row.first_s, out = _timed(lambda: generate(local, ids, config), device)
        row.second_s, second = _timed(lambda: generate(local, ids, config), device)
    except Exception as exc:  # noqa: BLE001 - a failure is a result, recorded in the row
        row.error = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"[:300]
        return row, None
    _read_stats(row, compiler, compiled)
    new = out[:, ids.shape[1]:]
    if not torch.equal(out, second):
        row.error = "the second generate's tokens differ from the first's"
    if reference is not None:
        expected = reference[:, ids.shape[1]:]
        row.tokens = expected.numel()
        row.tokens_equal = int((new == expected).sum()) if new.shape == expected.shape else 0
    return row, out


def _timed(fn: Callable[[], torch.Tensor], device: torch.device) -> tuple[float, torch.Tensor]:
    timing.synchronize(device)
    start = time.perf_counter()
    out = fn()
    timing.synchronize(device)
    return time.perf_counter() - start, out


def _read_stats(row: GenerateRow, compiler: str, compiled: Any) -> None:
    stats = compilers.graph_stats(compiler, compiled)
    row.graph_breaks = stats.graph_breaks
    row.compiles = compilers.compile_count(compiler, compiled)
    ember_stats = getattr(compiled, "stats", None) if compiler == "ember" else None
    if ember_stats is not None:
        row.eager_fallback_calls = int(ember_stats.eager_fallback_calls)
        row.recompile_limit_hit = int(ember_stats.recompile_limit_fallbacks) > 0


COLUMNS = ("compiler", "first generate", "second generate", "tokens/s (2nd)", "compiles",
           "breaks", "eager calls", "limit hit", "tokens == eager")


def cells(row: GenerateRow, config: GenerateConfig) -> list[str]:
    """The table line of ``row`` (``-``: not reported; ``FAILED``: see its error)."""
    if row.first_s is None:
        return [row.label, "FAILED"] + [""] * (len(COLUMNS) - 2)
    produced = config.batch * config.new_tokens

    def count(value: int | None) -> str:
        return "-" if value is None else str(value)

    rate = f"{produced / row.second_s:.0f}" if row.second_s else "-"
    hit = "-" if row.recompile_limit_hit is None else ("yes" if row.recompile_limit_hit else "no")
    if row.tokens is None:
        match = "-"
    elif row.tokens_equal == row.tokens:
        match = "yes"
    else:
        match = f"{row.tokens_equal}/{row.tokens}"
    return [row.label, f"{row.first_s:.2f}s", f"{row.second_s or 0:.2f}s", rate,
            count(row.compiles), count(row.graph_breaks), count(row.eager_fallback_calls), hit,
            match]


def table(rows: list[GenerateRow], config: GenerateConfig, markdown: bool = False) -> str:
    """The rows as a text (or Markdown) table; errors as notes below."""
    lines = [cells(row, config) for row in rows]
    if markdown:
        out = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        out += ["| " + " | ".join(line) + " |" for line in lines]
    else:
        widths = [max([len(c)] + [len(line[i]) for line in lines])
                  for i, c in enumerate(COLUMNS)]
        out = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths)).rstrip(),
               "  ".join("-" * w for w in widths)]
        out += ["  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in lines]
    notes = [f"{row.label}: {row.error}" for row in rows if row.error]
    if notes:
        out += [""] + [("- " if markdown else "  ") + note for note in notes]
    return "\n".join(out)


def verdict(rows: list[GenerateRow]) -> list[str]:
    """The issue's targets, each ``met`` or not, for the rows that ran: Ember's first
    ``generate`` faster than torch.compile's first, its second faster than eager's and
    torch.compile's second."""
    by_name = {row.compiler: row for row in rows if row.first_s is not None}
    ember, torch_row, eager = by_name.get("ember"), by_name.get("torch"), by_name.get("eager")
    lines: list[str] = []
    if ember is None:
        return lines
    if torch_row is not None and ember.first_s and torch_row.first_s:
        lines.append(_target("first generate: Ember < torch.compile",
                             ember.first_s, torch_row.first_s))
    for other in (eager, torch_row):
        if other is not None and ember.second_s and other.second_s:
            lines.append(_target(f"second generate: Ember < {other.label}",
                                 ember.second_s, other.second_s))
    return lines


def _target(what: str, ours: float, theirs: float) -> str:
    state = "met" if ours < theirs else "NOT met"
    return f"{what}: {state} ({ours:.2f}s against {theirs:.2f}s)"
