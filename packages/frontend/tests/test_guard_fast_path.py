"""The guards' fast path (``ember.frontend.guard_fast``): guards on a model's own state
are skipped while their stamp holds, and every mutation that must fail a guard still
fails it after the fast path has answered several calls."""

from __future__ import annotations

import time
import types
from typing import Any

import pytest
import torch
from ember.frontend import guard_fast
from ember.frontend.guards import compile_matcher
from ember.runtime.config import patch
from strict_helpers import captured_call, strict
from torch import nn


class HFStyleConfig:
    """A config whose attribute reads run Python code (as HF's ``__getattribute__``)."""

    def __init__(self) -> None:
        self.alpha = 1.0

    def __getattribute__(self, name: str) -> Any:
        return object.__getattribute__(self, name)


class PropertyConfig:
    def __init__(self) -> None:
        self._beta = 1.0

    @property
    def beta(self) -> float:
        return self._beta


class Block(nn.Module):
    eps = 1.0  # a class attribute the forward reads

    def __init__(self, cfg: HFStyleConfig, pcfg: PropertyConfig) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.act = nn.ReLU()
        self.factor = 2.0
        self.flag = False
        self.scales = [1.0, 1.0]
        self.cfg = cfg
        self.pcfg = pcfg

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            extra: Any = self.extra  # absent (Module.__getattr__ raises): handled
        except AttributeError:
            extra = 1.0
        y: torch.Tensor = (self.scaled(self.act(self.lin(x))) * self.scales[1]
                           * self.cfg.alpha * self.pcfg.beta * self.eps * extra)
        if type(self.act) is not nn.ReLU:  # a `__class__` read: stamped
            y = y * 0.5
        return y + 1 if self.flag else y

    def scaled(self, y: torch.Tensor) -> torch.Tensor:  # a method call: guarded
        return y * self.factor


class PlainBlock(nn.Module):
    """A block whose every guard is on state a stamp covers."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.act = nn.ReLU()
        self.factor = 2.0
        self.flag = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.act(self.lin(x)) * self.factor
        return y + 1 if self.flag else y


class PlainStack(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(PlainBlock() for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class Stack(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        cfg, pcfg = HFStyleConfig(), PropertyConfig()
        self.layers = nn.ModuleList(Block(cfg, pcfg) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def _matcher(compiled: Any) -> Any:
    (segment,) = compiled._compiled.segments[0]
    return segment._matcher


def _hits(compiled: Any) -> int:
    """Calls answered by a stamp, over every cache entry."""
    matchers = [segment._matcher for segment in compiled._compiled.segments[0]]
    return sum(s.hits for m in matchers for s in getattr(m, "__ember_stamps__", []))


def _warm(n: int = 8) -> tuple[Stack, Any, torch.Tensor]:
    torch.manual_seed(0)
    model = Stack(n)
    compiled = strict(model)
    x = torch.randn(2, 4)
    for _ in range(5):
        torch.testing.assert_close(compiled(x), model(x))
    assert compiled.stats.recompiles == 0 and compiled.stats.cache_hits == 4
    assert _hits(compiled) >= 2  # the fast path answered the last calls
    return model, compiled, x


def test_the_fast_path_is_taken_and_printed(capsys: Any) -> None:
    torch.manual_seed(0)
    model = Stack(8)
    compiled = strict(model)
    x = torch.randn(2, 4)
    with patch(logs=frozenset({"guards"})):
        for _ in range(4):
            compiled(x)
    err = capsys.readouterr().err
    assert "with the fast path" in err
    text = _matcher(compiled).__ember_source__
    lines = [line.strip() for line in text.splitlines()]
    (note,) = [line for line in lines if line.startswith("# stamp of 'self'")]
    assert note.endswith("skipped while it holds"), note
    (test,) = [line for line in lines if ".holds(" in line]
    assert test.startswith("if stamp") and test.endswith(".holds(v0):"), test
    assert any(line.startswith("if s0: stamp") and ".record(S, C, v0, (" in line
               for line in lines)
    # the config read through __getattribute__ and the list item are checked every call
    stamp = _matcher(compiled).__ember_stamps__[0]
    covered = {g.where() for g in stamp.guards}
    assert "self.layers[0].factor" in covered and "self.layers[0].lin.weight" in covered
    assert "raises(self.layers[0].extra)" in covered
    assert "self.layers[0].scaled.__func__" in covered  # method guards: free per layer
    assert "self.layers[0].act.__class__" in covered  # type(x): the type the stamp keeps
    # every layer's config is the first's (`a is b`, both chains stamped)
    assert {g.kind for g in stamp.guards if g.where() == "self.layers[1].cfg"} == {"same"}
    assert "self.layers[0].cfg.alpha" not in covered
    assert "self.layers[0].scales[1]" not in covered
    before = _hits(compiled)
    compiled(x)
    assert _hits(compiled) == before + 1


def _mutate(model: Stack, mutation: str) -> None:
    layers: Any = model.layers
    if mutation == "attribute":
        layers[1].factor = 3.0
    elif mutation == "setattr":
        setattr(layers[2], "flag", True)  # noqa: B010 - the setattr path is the test
    elif mutation == "parameter":
        layers[1].lin.bias = nn.Parameter(torch.zeros(1))
    elif mutation == "data":
        layers[1].lin.bias.data = torch.zeros(1)
    elif mutation == "requires_grad":
        layers[2].lin.weight.requires_grad_(False)
    elif mutation == "hook":
        layers[0].lin.register_forward_hook(lambda mod, args, out: out * 10)
    elif mutation == "submodule":
        layers[1].act = nn.Tanh()
    elif mutation == "class_assignment":
        layers[1].act.__class__ = nn.Sigmoid
    elif mutation == "list_item":
        layers[3].scales[1] = 5.0
    elif mutation == "getattribute_config":
        layers[0].cfg.alpha = 0.5
    elif mutation == "property_config":
        layers[0].pcfg._beta = 0.25
    elif mutation == "class_attribute":
        Block.eps = 3.0
    elif mutation == "instance_dict":
        layers[1].__dict__ = {**layers[1].__dict__, "factor": 4.0}
    elif mutation == "layer":
        layers[2] = Block(HFStyleConfig(), PropertyConfig())
        layers[2].flag = True
    elif mutation == "missing_attribute":
        layers[0].extra = 2.0
    elif mutation == "missing_buffer":
        layers[1].register_buffer("extra", torch.tensor(2.0))
    elif mutation == "method_instance":
        layers[1].scaled = types.MethodType(lambda self, y: y * 7.0, layers[1])
    elif mutation == "method_class":
        Block.scaled = lambda self, y: y * 5.0  # type: ignore[method-assign]
    elif mutation == "forward_instance":
        layers[2].lin.forward = lambda x: x * 3.0
    elif mutation == "storage_offset":
        layers[1].lin.bias.data = torch.zeros(5)[1:]
    else:
        raise AssertionError(mutation)


@pytest.mark.parametrize("mutation, failed", [
    ("attribute", "self.layers[1].factor == 2.0 (got 3.0)"),
    ("setattr", "self.layers[2].flag == False (got True)"),
    ("parameter", "self.layers[1].lin.bias.shape == (4,) (got (1,))"),
    ("data", "self.layers[1].lin.bias.shape == (4,) (got (1,))"),
    ("requires_grad", "self.layers[2].lin.weight.requires_grad == True (got False)"),
    ("hook", "self.layers[0].lin has no module hooks"),
    ("submodule", "type(self.layers[1].act) is ReLU (got Tanh)"),
    ("class_assignment", "type(self.layers[1].act) is ReLU (got Sigmoid)"),
    ("list_item", "self.layers[3].scales[1] == 1.0 (got 5.0)"),
    ("getattribute_config", "self.layers[0].cfg.alpha == 1.0 (got 0.5)"),
    ("property_config", "== 1.0 (got 0.25)"),
    ("class_attribute", "self.layers[0].eps == 1.0 (got 3.0)"),
    ("instance_dict", "self.layers[1].factor == 2.0 (got 4.0)"),
    # (the new layer's config is not the one every other layer shares)
    ("layer", "self.layers[2].cfg is self.layers[0].cfg"),
    ("missing_attribute", "raises(self.layers[0].extra) == True (got False)"),
    ("missing_buffer", "raises(self.layers[1].extra) == True (got False)"),
    ("storage_offset", "self.layers[1].lin.bias.storage_offset() == 0 (got 1)"),
    ("method_instance", "self.layers[1].scaled.__func__ is "),
    ("method_class", "self.layers[0].scaled.__func__ is "),
    ("forward_instance", "self.layers[2].lin.forward.__func__ is "),
])
def test_a_mutation_fails_its_guard_after_fast_calls(mutation: str, failed: str,
                                                     capsys: Any) -> None:
    model, compiled, x = _warm()
    try:
        _mutate(model, mutation)
        capsys.readouterr()
        with patch(logs=frozenset({"recompiles"})):
            out = compiled(x)
        log = capsys.readouterr().err
        torch.testing.assert_close(out, model(x))
        assert compiled.stats.recompiles == 1, (mutation, log)
        assert "guard failed: " in log and failed in log, log
    finally:
        Block.eps = 1.0
        Block.scaled = _SCALED  # type: ignore[method-assign]


_SCALED = Block.scaled


class SneakyConfig(HFStyleConfig):
    """A config whose attribute read, once armed, writes the model (a guard of the
    config runs it after the guards on the model passed)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed: Any = None

    def __getattribute__(self, name: str) -> Any:
        armed = object.__getattribute__(self, "armed")
        if name == "alpha" and armed is not None:
            object.__setattr__(self, "armed", None)
            armed.factor = 3.0
        return object.__getattribute__(self, name)


def test_state_written_while_the_stamp_is_taken_is_not_stamped() -> None:
    model, compiled, x = _warm()
    layers: Any = model.layers
    sneaky = SneakyConfig()
    for layer in layers:
        layer.cfg = sneaky
    compiled(x)  # recompiles for the new config object, then fast again
    compiled(x)
    compiled(x)
    assert compiled.stats.recompiles == 1 and _hits(compiled) >= 1
    layers[0].tick = 1  # an unread attribute: the next call takes the stamp again
    sneaky.armed = layers[1]  # ... and its config check writes layers[1].factor
    compiled(x)
    assert layers[1].factor == 3.0
    torch.testing.assert_close(compiled(x), model(x))
    assert compiled.stats.recompiles == 2


def test_an_unchanged_model_keeps_hitting_after_a_recompile() -> None:
    model, compiled, x = _warm()
    layers: Any = model.layers
    layers[1].lin.weight = nn.Parameter(torch.ones(4, 4))  # same metadata, new values
    for _ in range(3):
        torch.testing.assert_close(compiled(x), model(x))
    assert compiled.stats.recompiles == 0
    before = _hits(compiled)
    torch.testing.assert_close(compiled(x), model(x))
    assert _hits(compiled) == before + 1


def test_state_written_every_call_turns_the_stamp_off() -> None:
    torch.manual_seed(0)
    model = Stack(8)
    compiled = strict(model)
    x = torch.randn(2, 4)
    layers: Any = model.layers
    for i in range(8):
        layers[0].tick = i  # an attribute the forward never reads, written every call
        torch.testing.assert_close(compiled(x), model(x))
    stamps = _matcher(compiled).__ember_stamps__
    assert compiled.stats.recompiles == 0
    assert stamps and all(s.off and s.hits == 0 and s.records == 3 for s in stamps)


def _per_call(match: Any, call: tuple[Any, Any], n: int = 100, batches: int = 5) -> float:
    """The fastest of several timed batches (other processes share the cores)."""
    for _ in range(3):
        assert match(*call) is not None
    best = float("inf")
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(n):
            match(*call)
        best = min(best, (time.perf_counter() - start) / n)
    return best


def _best_ratio(slow: Any, quick: Any, call: tuple[Any, Any], rounds: int = 15) -> float:
    """``slow``'s per-call time over ``quick``'s, each the fastest of ``rounds`` batches
    timed in turn: a burst of load from other processes (the H200 host runs this suite
    with ``-n 8``) slows both sides of one round, not the best of either."""
    best = {id(slow): float("inf"), id(quick): float("inf")}
    for _ in range(rounds):
        for match in (slow, quick):
            best[id(match)] = min(best[id(match)], _per_call(match, call, batches=1))
    return best[id(slow)] / best[id(quick)]


def test_the_fast_path_cuts_the_check_of_a_24_layer_stack(monkeypatch: Any) -> None:
    guards, inputs, call = captured_call(PlainStack(24))
    fast = compile_matcher(guards, inputs)
    monkeypatch.setattr(guard_fast, "FAST_PATH_MIN_GUARDS", 10**9)
    full = compile_matcher(guards, inputs)
    assert not hasattr(full, "__ember_stamps__")
    assert fast(*call) == full(*call)
    ratio = _best_ratio(full, fast, call)
    assert fast.__ember_stamps__[0].hits > 0  # type: ignore[attr-defined]
    # NOTE: 3-4x on the 2-core CI machine (Python 3.11), 1.9x on the H200's host alone
    # (Python 3.12, whose faster attribute reads leave less to skip) and 1.32-1.34x there
    # beside seven other pytest workers (-n 8); without the fast path 1x
    assert ratio > 1.2, ratio


def test_the_fast_path_is_off_without_dict_versions(monkeypatch: Any) -> None:
    import ember.frontend.guard_fast as gf

    monkeypatch.setattr(gf, "dict_version_reader", lambda: None)
    guards, inputs, call = captured_call(Stack(8))
    match = compile_matcher(guards, inputs)
    assert not hasattr(match, "__ember_stamps__") and match(*call) is not None


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("mutation", ["device", "data", "requires_grad", "none"])
def test_cuda_parameters_under_the_stamp(mutation: str) -> None:
    """The C++ tensor check on GPU parameters: a parameter moved to the CPU through
    ``.data``, given another shape, or frozen, fails the check after fast calls."""
    model = PlainStack(8).cuda()
    guards, inputs, call = captured_call(model)
    fast = compile_matcher(guards, inputs)
    for _ in range(4):
        assert fast(*call) is not None
    assert fast.__ember_stamps__[0].hits >= 2  # type: ignore[attr-defined]
    bias = model.layers[3].lin.bias  # type: ignore[union-attr]
    if mutation == "device":
        bias.data = bias.data.cpu()
    elif mutation == "data":
        bias.data = torch.zeros(1, device="cuda")
    elif mutation == "requires_grad":
        bias.requires_grad_(False)
    assert (fast(*call) is None) == (mutation != "none")


class BufferStack(PlainStack):
    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.register_buffer("shift", torch.ones(2, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + self.shift


def test_distinct_inputs_are_checked_against_the_stamps_tensors(capsys: Any) -> None:
    """While the stamp holds, the ``distinct`` guard checks only the inputs it does not
    cover: a buffer passed as the argument still fails it."""
    torch.manual_seed(0)
    model = BufferStack(8)
    compiled = strict(model)
    x = torch.randn(2, 4)
    for _ in range(4):
        torch.testing.assert_close(compiled(x), model(x))
    match = _matcher(compiled)
    text = match.__ember_source__
    (line,) = [line.strip() for line in text.splitlines() if ".ids.isdisjoint(" in line]
    assert line.startswith("elif not (stamp") and line.endswith("): return None"), line
    (stamp,) = match.__ember_stamps__
    assert id(model.shift) in stamp.ids and id(x) not in stamp.ids
    before = stamp.hits
    with patch(logs=frozenset({"recompiles"})):
        out = compiled(model.shift)
    torch.testing.assert_close(out, model(model.shift))
    assert stamp.hits == before + 1  # the stamp held; the distinct check failed
    assert compiled.stats.recompiles == 1
    assert "are distinct tensors" in capsys.readouterr().err


def test_the_needs_of_many_guards_decide_each_shared_step_once(monkeypatch: Any) -> None:
    # the stamp's needs for a 24-layer stack's guards, gathered in one NeedsFinder, are
    # those of the guards one at a time; the chains share their prefixes (self.layers,
    # self.layers[i]), each decided once instead of once per guard
    from ember.frontend import guard_stamp

    guards, _, (state, ctx) = captured_call(PlainStack(24))
    values: dict[Any, Any] = {}

    def value_of(source: Any) -> Any:
        if source not in values:
            values[source] = source.fetch(state, ctx)
        return values[source]

    decided: list[Any] = []
    real = guard_stamp._step_needs

    def counted(step: Any, base: Any, needs: Any) -> bool:
        decided.append(step)
        return real(step, base, needs)

    monkeypatch.setattr(guard_stamp, "_step_needs", counted)
    alone = [guard_stamp.guard_needs(g, value_of) for g in guards]
    one_by_one = len(decided)
    decided.clear()
    finder = guard_stamp.NeedsFinder(value_of)
    safe = [finder.add(g) for g in guards]
    assert safe == [n is not None for n in alone] and sum(safe) > 24 * 3
    union = guard_stamp.Needs()
    for n in alone:
        if n is not None:
            for mine, theirs in ((union.typed, n.typed), (union.dicted, n.dicted),
                                 (union.dicts, n.dicts), (union.hooks, n.hooks),
                                 (union.tensors, n.tensors)):
                mine.update(theirs)
    got = finder.needs
    assert (got.typed.keys(), got.dicted.keys(), got.dicts.keys(), got.hooks.keys(),
            got.tensors.keys()) == (union.typed.keys(), union.dicted.keys(),
                                    union.dicts.keys(), union.hooks.keys(),
                                    union.tensors.keys())
    assert len(decided) == len({id(s) for s in decided}) < one_by_one / 3, \
        (len(decided), one_by_one)
