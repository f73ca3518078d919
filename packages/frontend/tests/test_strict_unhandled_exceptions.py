"""An exception raised during capture that no handler of the compiled frame catches:
the frame's call runs eagerly as a whole (its callees compiled on their own frames), as
torch.compile skips such a frame, from an eager entry guarded by what the abandoned
capture read up to the exception.

Before, Ember compiled the frame's prefix up to the root instruction that first raised
and ran that instruction eagerly, with the prefix's values: code that takes another path
under capture (``if mask is None and not torch.compiler.is_compiling(): mask = ...``, HF
LongT5 and SwitchTransformers) then raised to the user, although eager and torch.compile
ran it. Exceptions handled inside the captured code keep their behaviour
(test_strict_exceptions.py)."""

from __future__ import annotations

import re
from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.frontend.bytecode import FullGraphError
from ember.runtime.config import patch
from strict_helpers import strict
from torch import nn

# ---- the is_compiling()-dependent None pattern -------------------------------------------


def _compiling() -> bool:  # as transformers' is_torchdynamo_compiling()
    return torch.compiler.is_compiling()


def _masked(h: torch.Tensor, mask: Any) -> torch.Tensor:
    return h * mask[..., None]  # TypeError on None


class _Stack(nn.Module):
    def __init__(self, probe: bool) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.probe = probe

    def forward(self, x: torch.Tensor, mask: Any = None) -> torch.Tensor:
        compiling = _compiling() if self.probe else torch.compiler.is_compiling()
        if mask is None and not compiling:
            mask = torch.ones(x.shape[:2])
        return _masked(self.lin(x).relu(), mask)


class _Model(nn.Module):
    def __init__(self, probe: bool) -> None:
        super().__init__()
        self.stack = _Stack(probe)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stack(x))


@pytest.mark.parametrize("probe", [False, True], ids=["direct", "helper"])
def test_a_path_only_capture_takes_runs_the_frame_eagerly(probe: bool) -> None:
    torch.manual_seed(0)
    model = _Model(probe).eval()
    wrapper = strict(model)
    compiled = wrapper._compiled  # the StrictFunction: its segments and breaks
    x = torch.randn(2, 3, 4)
    for _ in range(3):
        torch.testing.assert_close(wrapper(x), model(x))
    stats = compiled.stats
    # _Model.forward and _Stack.forward run eagerly (two eager entries, hit by the later
    # calls); _masked, which eager _Stack.forward calls with the real mask, and the
    # modules it calls compile on their own
    assert stats.graphs >= 1 and stats.eager_fallback_calls >= 2 * 3
    frames = [b for b in compiled.breaks if b.reason.startswith("the frame runs eagerly")]
    assert len(frames) == 2 and stats.graph_breaks == len(compiled.breaks)
    assert all("TypeError raised during capture and not handled in the compiled "
               "function" in b.reason for b in frames)
    assert all(b.location is not None and b.location.function == "_masked"
               and b.location.text.startswith("return h * mask[..., None]") for b in frames)
    assert [s.eager for s in compiled.segments[0]] == [True]
    compiles = stats.compiles
    wrapper(x)
    assert compiled.stats.compiles == compiles  # the eager entries are hit, no capture


def test_explain_and_the_log_name_the_exception_and_the_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    model = _Model(False).eval()
    report = str(ef.explain(model)(torch.randn(2, 3, 4)))
    assert ("the frame runs eagerly: TypeError raised during capture and not handled in "
            "the compiled function: 'NoneType' object is not subscriptable") in report
    assert "test_strict_unhandled_exceptions.py" in report and "mask[..., None]" in report
    capsys.readouterr()
    with patch(logs=frozenset({"graph_breaks"})):
        strict(model)(torch.randn(2, 3, 4))
    err = capsys.readouterr().err
    assert "graph break in _Model.forward: the frame runs eagerly: TypeError raised" in err
    assert "return h * mask[..., None]" in err


# ---- a frame that raises on bad input -----------------------------------------------------


def _scaled(x: torch.Tensor, scale: int) -> torch.Tensor:
    y = x * 2
    if scale <= 0:
        raise ValueError(f"scale must be positive, got {scale}")
    return y * scale


def test_bad_input_raises_and_good_input_still_compiles() -> None:
    compiled = strict(_scaled)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x, 2), x * 4)
    for _ in range(2):
        with pytest.raises(ValueError, match="scale must be positive, got -1"):
            compiled(x, -1)
    torch.testing.assert_close(compiled(x, 3), x * 6)  # not shadowed by the eager entry
    torch.testing.assert_close(compiled(x, 2), x * 4)
    stats = compiled.stats
    assert [s.eager for s in compiled.segments[0]] == [False, True, False]
    assert (stats.compiles, stats.graphs, stats.graph_breaks) == (3, 2, 1)
    assert stats.eager_fallback_calls == 2  # the bad calls; the second hit the entry
    assert "ValueError raised during capture" in compiled.breaks[0].reason
    assert compiled.breaks[0].location is not None
    assert compiled.breaks[0].location.text == (
        'raise ValueError(f"scale must be positive, got {scale}")')


def _rows(x: torch.Tensor) -> torch.Tensor:
    if x.shape[0] > 4:
        raise ValueError("too many rows")
    return x.sin()


def test_a_size_dependent_raise_is_guarded_on_the_symbolic_size() -> None:
    compiled = strict(_rows)
    assert compiled(torch.zeros(2, 3)).shape == (2, 3)
    with pytest.raises(ValueError, match="too many rows"):
        compiled(torch.zeros(6, 3))  # a size miss: captured with a symbolic row count
    for rows in (3, 4):  # the eager entry holds for more than 4 rows only
        torch.testing.assert_close(compiled(torch.ones(rows, 3)), torch.ones(rows, 3).sin())
    with pytest.raises(ValueError, match="too many rows"):
        compiled(torch.zeros(7, 3))
    eager = [s.eager for s in compiled.segments[0]]
    assert eager.count(True) == 1 and eager.count(False) == 2, eager
    assert compiled.stats.eager_fallback_calls == 2


def _after_break(x: torch.Tensor, n: int) -> torch.Tensor:
    y = x + 1
    print("between")  # a graph break: the code after it is a resume point
    if n < 0:
        raise ValueError("negative n")
    return y * n


def test_a_resume_point_runs_the_rest_of_the_frame_eagerly(
        capsys: pytest.CaptureFixture[str]) -> None:
    compiled = strict(_after_break)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x, 2), (x + 1) * 2)
    with pytest.raises(ValueError, match="negative n"):
        compiled(x, -1)
    torch.testing.assert_close(compiled(x, 3), (x + 1) * 3)
    assert capsys.readouterr().out.count("between") == 3  # the prefix ran once per call
    resumed = [ip for ip in compiled.segments if ip != 0]
    assert len(resumed) == 1
    assert [s.eager for s in compiled.segments[resumed[0]]] == [False, True, False]
    assert not any(s.eager for s in compiled.segments[0])
    assert any(b.reason.startswith("the rest of the frame (from a graph break's resume "
                                   "point) runs eagerly: ValueError") for b in compiled.breaks)


def test_fullgraph_names_the_exception_and_the_line() -> None:
    compiled = strict(_scaled, fullgraph=True)
    torch.testing.assert_close(compiled(torch.ones(2), 2), torch.ones(2) * 4)
    with pytest.raises(FullGraphError) as err:
        compiled(torch.ones(2), -1)
    text = str(err.value)
    assert "ValueError raised during capture and not handled in the compiled function" in text
    assert re.search(r"test_strict_unhandled_exceptions\.py:\d+ in _scaled", text)
    assert 'raise ValueError(f"scale must be positive' in text


def test_a_handled_exception_is_still_captured() -> None:
    def fn(x: torch.Tensor, d: dict[str, int]) -> torch.Tensor:
        try:
            return x * d["k"]
        except KeyError:
            return x - 1

    compiled = strict(fn)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x, {}), x - 1)
    assert compiled.stats.graphs == 1 and compiled.stats.eager_fallback_calls == 0
    assert not any(s.eager for s in compiled.segments[0])


# ---- HF T5-family models ---------------------------------------------------------------


def _t5_config(tf: Any, name: str) -> Any:
    common: dict[str, Any] = {
        "vocab_size": 128, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2,
        "num_decoder_layers": 2, "num_heads": 4, "use_cache": False, "pad_token_id": 0,
        "eos_token_id": 0, "decoder_start_token_id": 0, "dropout_rate": 0.0}
    if name == "SwitchTransformers":
        common.update(num_experts=2, expert_capacity=8, num_sparse_encoder_layers=1,
                      num_sparse_decoder_layers=1)
    return getattr(tf, f"{name}Config")(**common)


@pytest.mark.parametrize("name", ["LongT5", "SwitchTransformers"])
def test_tiny_t5_family_models_match_eager(name: str) -> None:
    tf = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = getattr(tf, f"{name}ForConditionalGeneration")(_t5_config(tf, name)).eval()
    ids = torch.randint(1, 100, (2, 8))
    compiled = ef.compile(model, backend="aot_eager")
    with torch.no_grad():
        expected = model(input_ids=ids, decoder_input_ids=ids).logits
        for _ in range(2):
            got = compiled(input_ids=ids, decoder_input_ids=ids).logits
            torch.testing.assert_close(got, expected)
    assert compiled.stats.graphs >= 1  # the blocks compile, called from the eager stacks
