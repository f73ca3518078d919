"""A model that changes itself at its first call (logs a warning, replaces a submodule:
HF BigBird switching from block-sparse to full attention) breaks the graph at that call
only: later calls are one frame entry and one graph (``bytecode/inlined_breaks.py``),
and a logging call at a break runs as plain Python, not through compiled wrappers of
the ``logging`` module's own functions."""

from __future__ import annotations

import copy
import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.frontend.bytecode.segment_run import Segment
from ember.runtime.config import patch
from strict_helpers import strict
from torch import nn

logger = logging.getLogger(__name__)


class FullMix(nn.Module):
    def __init__(self, proj: nn.Linear) -> None:
        super().__init__()
        self.proj = proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.proj(x)) + x


class SparseMix(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).relu()


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mode = "sparse"
        self.mix: nn.Module = SparseMix()
        self.out = nn.Linear(8, 8)

    def set_mode(self, mode: str) -> None:
        if mode == self.mode:
            return
        self.mode = mode
        fresh = FullMix(nn.Linear(8, 8))  # parameters made inside the compiled call
        fresh.proj = self.mix.proj  # ... then replaced by the trained ones
        self.mix = fresh

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "sparse" and x.shape[-2] <= 16:
            logger.warning("sequence of %d too short for sparse mixing; using full",
                           x.shape[-2])
            self.set_mode("full")
        return self.out(self.mix(x))


def returns_tuple(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A decorated forward, as HF's ``can_return_tuple``: one more frame around it."""

    @functools.wraps(fn)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(self, *args, **kwargs)

    return wrapper


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.layers = nn.ModuleList([Layer(), Layer()])
        self.head = nn.Linear(8, 2)

    @returns_tuple
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


@pytest.fixture
def entered(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Segment]]:
    """Every segment run (a frame entry of compiled code), in order."""
    ran: list[Segment] = []
    execute = Segment.execute

    def counting(self: Segment, *args: Any) -> Any:
        ran.append(self)
        return execute(self, *args)

    monkeypatch.setattr(Segment, "execute", counting)
    yield ran


def _one_graph_per_call(compiled: Any, eager: nn.Module, ran: list[Segment], *args: Any,
                        calls: int = 3) -> None:
    """After the first call, each call runs one segment, with a graph, to the return,
    and its result is eager's."""
    compiles = compiled.stats.compiles
    for _ in range(calls):
        ran.clear()
        hits = compiled.stats.cache_hits
        got = compiled(*args)
        torch.testing.assert_close(got, eager(*args))
        assert compiled.stats.cache_hits == hits + 1, compiled.stats
        assert len(ran) == 1 and ran[0].program is not None and ran[0].break_info is None
    assert compiled.stats.compiles == compiles, compiled.stats


def test_model_changing_itself_at_its_first_call_is_one_graph_afterwards(
        entered: list[Segment], caplog: pytest.LogCaptureFixture) -> None:
    torch.manual_seed(0)
    model = Model().eval()
    eager = copy.deepcopy(model)
    compiled = strict(model)
    x = torch.randn(2, 6, 4)
    with caplog.at_level(logging.WARNING, logger=__name__):
        torch.testing.assert_close(compiled(x), eager(x))
    assert sum("too short for sparse" in r.getMessage() for r in caplog.records) == 4
    assert all(layer.mode == "full" for layer in model.layers)  # type: ignore[union-attr]
    assert compiled.stats.graph_breaks > 0  # the warning, the parameters made in the call
    recompiles = compiled.stats.recompiles
    # the second call finds the break gone (one recompile of the outer frame) ...
    torch.testing.assert_close(compiled(x), eager(x))
    assert compiled.stats.recompiles == recompiles + 1, compiled.stats
    # ... and from then on each call is one frame entry and one graph
    _one_graph_per_call(compiled, eager, entered, x)


def _line_of(text: str) -> int:
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if text in line)


def test_break_gone_is_logged_under_recompiles(capsys: pytest.CaptureFixture[str]) -> None:
    model = Model().eval()
    compiled = strict(model)
    x = torch.randn(2, 6, 4)
    logging.getLogger(__name__).setLevel(logging.ERROR)  # (the warning itself: other test)
    try:
        compiled(x)
        with patch(logs=frozenset({"recompiles"})):
            compiled(x)
    finally:
        logging.getLogger(__name__).setLevel(logging.NOTSET)
    err = capsys.readouterr().err
    line = f"{__file__}:{_line_of('logger.warning(')}, inside a call, may be gone"
    assert f"the graph break at {line}: guard failed: " in err, err
    assert ".mode == 'sparse' (got 'full')" in err, err


def test_logging_at_a_break_runs_as_plain_python(caplog: pytest.LogCaptureFixture) -> None:
    """One break for the log call: the logging module's own functions (isEnabledFor,
    _log, handlers, locks) are not compiled, nor listed as breaks."""

    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        logger.warning("scaled %s", tuple(y.shape))
        return y + 1

    compiled = strict(f)
    x = torch.randn(3)
    with caplog.at_level(logging.WARNING, logger=__name__):
        for _ in range(3):
            torch.testing.assert_close(compiled(x), f(x))
    assert [r.getMessage() for r in caplog.records].count("scaled (3,)") == 6
    stats = compiled.stats
    assert (stats.graph_breaks, stats.compiles, stats.graphs) == (1, 2, 2), stats
    assert stats.cache_hits == 4, stats  # two segments at each later call
    out = ef.explain(f)(x)
    assert out.break_count == 1
    assert "logging.Logger.warning" in out.breaks[0].reason
    assert out.breaks[0].location is not None and out.breaks[0].location.function == "f"


class Gate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.verbose = True
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.verbose:
            print("gate input", tuple(x.shape))  # a break, when verbose
        return self.lin(x).relu()


class Gated(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate = Gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gate(x + 1) - 1


def test_a_break_switched_off_and_on_keeps_both_entries(entered: list[Segment]) -> None:
    model = Gated()
    compiled = strict(model)
    x = torch.randn(2, 4)
    for verbose in (True, False, True, False, True, False):
        model.gate.verbose = verbose
        torch.testing.assert_close(compiled(x), model(x))
    assert compiled.stats.recompiles == 1, compiled.stats  # the break gone: once
    root = compiled._compiled.segments[0]
    assert len(root) == 2
    model.gate.verbose = False
    _one_graph_per_call(compiled, model, entered, x, calls=2)


class Noisy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * self.scale
        print("noisy", self.scale)  # always a break
        return y


class NoisyOuter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.noisy = Noisy()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.noisy(x) + 1


def test_a_break_that_comes_back_is_not_captured_again() -> None:
    """The inner call reads ``self.scale`` before its break (the outer frame does not):
    a new scale fails the outer entry's break check, the new capture breaks at the same
    call, and the old entry serves from then on without the check: no capture of the
    outer frame per call."""
    model = NoisyOuter()
    compiled = strict(model)
    x = torch.randn(3)
    for n in range(1, 7):
        model.noisy.scale = float(n)
        torch.testing.assert_close(compiled(x), model(x))
    assert len(compiled._compiled.segments[0]) == 2


def test_hf_big_bird_steady_state_is_one_frame_one_graph(entered: list[Segment]) -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BigBirdConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, use_cache=False, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, is_decoder=True)
    model = transformers.BigBirdForCausalLM(config).eval()
    assert model.config.attention_type == "block_sparse"
    eager = copy.deepcopy(model)
    compiled = ef.compile(model, backend="aot_eager")
    ids = torch.randint(0, 128, (2, 8))
    with torch.no_grad():
        first = compiled(ids)
        torch.testing.assert_close(first.logits, eager(ids).logits)
        compiled(ids)
        compiles = compiled.stats.compiles
        for _ in range(3):
            entered.clear()
            hits = compiled.stats.cache_hits
            out = compiled(ids)
            torch.testing.assert_close(out.logits, eager(ids).logits)
            assert compiled.stats.cache_hits == hits + 1, compiled.stats
            assert len(entered) == 1 and entered[0].program is not None
        assert compiled.stats.compiles == compiles
