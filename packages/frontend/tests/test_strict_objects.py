"""Strict capture of environment reads, objects made inside the compiled code, attribute
writes and deletes on outside objects, and tensor methods on parameters."""

from __future__ import annotations

import copy
import dataclasses
import enum
import os
import types
from typing import Any, ClassVar

import pytest
import torch
from ember.runtime.config import patch
from strict_helpers import strict
from torch import nn

ENV = "EMBER_TEST_STRICT_OBJECTS"


def _counts(compiled: Any) -> tuple[int, int]:
    inner = getattr(compiled, "_compiled", compiled)
    return inner.stats.graph_breaks, inner.stats.compiles


# ---- environment reads ------------------------------------------------------------------


def reads_env(x: torch.Tensor) -> torch.Tensor:
    mode = os.environ.get(ENV, "off")
    other = os.getenv(ENV + "_OTHER")
    y = x * (2.0 if mode == "on" else 3.0)
    if ENV in os.environ:
        y = y + len(os.environ[ENV])
    return y + (0.0 if other is None else 100.0)


def test_environment_reads_are_guarded_constants(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.delenv(ENV + "_OTHER", raising=False)
    compiled = strict(reads_env)
    x = torch.randn(3)
    with patch(logs=frozenset({"guards"})):
        for _ in range(3):
            torch.testing.assert_close(compiled(x), reads_env(x))
    assert _counts(compiled) == (0, 1)
    err = capsys.readouterr().err
    assert f"os.environ.get('{ENV}') == None" in err
    # setting, changing and unsetting the variable each recompiles
    for value in ("on", "other"):
        monkeypatch.setenv(ENV, value)
        for _ in range(2):
            torch.testing.assert_close(compiled(x), reads_env(x))
    assert _counts(compiled) == (0, 3)
    monkeypatch.setenv(ENV + "_OTHER", "1")
    torch.testing.assert_close(compiled(x), reads_env(x))
    monkeypatch.delenv(ENV)
    torch.testing.assert_close(compiled(x), reads_env(x))
    assert _counts(compiled) == (0, 5)


def copies_environment(x: torch.Tensor) -> torch.Tensor:
    env = os.environ.copy()
    return x * len(env.get(ENV, ""))


def test_whole_environment_reads_break_instead_of_freezing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "ab")
    compiled = strict(copies_environment)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x * 2)
    monkeypatch.setenv(ENV, "abc")
    torch.testing.assert_close(compiled(x), x * 3)
    inner = getattr(compiled, "_compiled", compiled)
    assert "whole process environment" in inner.breaks[0].reason


# ---- objects made inside the compiled code ------------------------------------------------

VOCAB = 11


class LossHead(nn.Module):
    """An HF-style training head: the loss module is built inside forward."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, VOCAB)

    def forward(self, h: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits = self.proj(h)
        loss_fct = nn.CrossEntropyLoss(ignore_index=-100)
        loss = loss_fct(logits.view(-1, VOCAB), labels.view(-1))
        return loss, logits


def test_loss_module_built_in_forward_is_captured_in_training() -> None:
    torch.manual_seed(0)
    model = LossHead()
    compiled = strict(model)
    h, labels = torch.randn(2, 5, 8), torch.randint(0, VOCAB, (2, 5))
    labels[0, 0] = -100
    for _ in range(3):
        model.zero_grad()
        loss, _ = compiled(h, labels)
        loss.backward()
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        expected, _ = model(h, labels)
        expected.backward()
        torch.testing.assert_close(loss, expected)
        for g, p in zip(got, model.parameters()):
            torch.testing.assert_close(g, p.grad)
    assert _counts(compiled) == (0, 1)


class Scale(nn.Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


@dataclasses.dataclass
class Pair:
    left: torch.Tensor
    right: torch.Tensor


@dataclasses.dataclass(frozen=True)
class Frozen:
    n: int


def builds_objects(x: torch.Tensor) -> Any:
    scale = Scale(3.0)
    pair = Pair(x + 1, x * 2)
    pair.right = pair.right + Frozen(4).n
    ns = types.SimpleNamespace(total=pair.left + pair.right)
    ns.scaled = scale(ns.total)
    return ns, scale


def test_fresh_objects_escape_as_new_objects_with_their_state() -> None:
    compiled = strict(builds_objects)
    seen = []
    for i in range(3):
        x = torch.randn(4) + i
        ns, scale = compiled(x)
        want, _ = builds_objects(x)
        assert type(ns) is types.SimpleNamespace and type(scale) is Scale
        torch.testing.assert_close(ns.total, want.total)
        torch.testing.assert_close(ns.scaled, want.scaled)
        assert scale.factor == 3.0 and scale.training
        seen += [ns, scale]
    assert len({id(o) for o in seen}) == 6  # a new object at every call, as in eager
    assert _counts(compiled) == (0, 1)


class KeepsLossFn(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.last_loss = nn.MSELoss(reduction="sum")  # stored on an outside module
        return self.last_loss(x, torch.zeros_like(x))


def test_fresh_module_stored_on_an_outside_module_is_registered() -> None:
    model = KeepsLossFn()
    compiled = strict(model)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), (x * x).sum())
    assert isinstance(model._modules["last_loss"], nn.MSELoss)
    assert model.last_loss.reduction == "sum"
    assert _counts(compiled) == (0, 1)


def makes_a_parameter(x: torch.Tensor) -> torch.Tensor:
    return nn.Linear(3, 2)(x)


def test_creating_a_parameter_inside_forward_breaks_clearly() -> None:
    compiled = strict(makes_a_parameter)
    assert compiled(torch.randn(3)).shape == (2,)
    inner = getattr(compiled, "_compiled", compiled)
    assert inner.stats.graph_breaks >= 1
    assert any("creating a parameter (Parameter)" in b.reason for b in inner.breaks)


# ---- attribute writes and deletes on outside objects --------------------------------------


class Settings:
    kind = "class-default"

    def __init__(self) -> None:
        self.kind = "instance"
        self.scratch = 1
        self.keep = 2.0


def writes_and_deletes(x: torch.Tensor, s: Settings) -> torch.Tensor:
    s.keep = 5.0
    y = x * s.keep  # reads the write
    del s.kind
    y = y + len(s.kind)  # the class attribute shows through again
    setattr(s, "added", 7)  # noqa: B010  (the builtin is what is tested)
    s.temp = 1
    del s.temp  # made and removed in this call: nothing to replay
    delattr(s, "scratch")
    assert not hasattr(s, "scratch")
    s.keep = s.keep + s.added  # the last write wins
    return y


def test_writes_and_deletes_on_outside_objects_are_replayed() -> None:
    compiled = strict(writes_and_deletes)
    for _ in range(3):
        x = torch.randn(3)
        mine, theirs = Settings(), Settings()
        torch.testing.assert_close(compiled(x, mine), writes_and_deletes(x, theirs))
        assert vars(mine) == vars(theirs) == {"keep": 12.0, "added": 7}
    assert _counts(compiled) == (0, 1)


class AliasConfig:
    """Like transformers' PretrainedConfig: aliases mapped by __setattr__ and
    __getattribute__, every write validated."""

    attribute_map: ClassVar[dict[str, str]] = {"n_layer": "num_layers"}

    def __init__(self) -> None:
        self.num_layers = 2
        self.problem_type: str | None = None

    def __setattr__(self, key: str, value: Any) -> None:
        if key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        if key == "num_layers" and value < 0:
            raise ValueError("num_layers must be >= 0")
        super().__setattr__(key, value)

    def __getattribute__(self, key: str) -> Any:
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)

    def __delattr__(self, key: str) -> None:
        object.__delattr__(self, key)


def uses_config(x: torch.Tensor, config: AliasConfig) -> torch.Tensor:
    if config.problem_type is None:
        config.problem_type = "regression"
    config.n_layer = 4  # through the alias
    y = x * config.num_layers  # sees the write
    del config.problem_type
    return y


def test_python_setattr_and_getattribute_are_inlined() -> None:
    compiled = strict(uses_config)
    for _ in range(3):
        x = torch.randn(3)
        mine, theirs = AliasConfig(), AliasConfig()
        torch.testing.assert_close(compiled(x, mine), uses_config(x, theirs))
        assert object.__getattribute__(mine, "__dict__") == {"num_layers": 4}
    assert _counts(compiled) == (0, 1)


def reads_config(x: torch.Tensor, config: AliasConfig) -> torch.Tensor:
    return x * config.n_layer


def test_changing_a_config_attribute_read_by_the_graph_recompiles() -> None:
    compiled = strict(reads_config)
    config, x = AliasConfig(), torch.randn(3)
    torch.testing.assert_close(compiled(x, config), x * 2)
    torch.testing.assert_close(compiled(x, config), x * 2)
    config.n_layer = 5
    torch.testing.assert_close(compiled(x, config), x * 5)
    assert _counts(compiled) == (0, 2)


class Tracker(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("running", torch.zeros(3))
        self.note = "start"
        self.temp = 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.running = self.running * 0.5 + x  # a registered buffer: stays a buffer
        self.last = x.sum()  # a plain tensor attribute
        self.note = "seen"
        del self.temp
        return self.running + self.last


def test_module_attribute_writes_and_deletes() -> None:
    mine = Tracker()
    theirs = copy.deepcopy(mine)
    compiled = strict(mine)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), theirs(x))
    assert set(mine._buffers) == {"running"}
    torch.testing.assert_close(mine.running, theirs.running)
    torch.testing.assert_close(mine.last, theirs.last)
    assert mine.note == "seen" and not hasattr(mine, "temp")
    assert _counts(compiled) == (0, 1)


def test_transformers_get_text_config_deletes_on_a_copy() -> None:
    transformers = pytest.importorskip("transformers")
    # a flat encoder-decoder config: get_text_config deep-copies it, then renames the
    # decoder_* keys with delattr/setattr on the copy
    config = transformers.T5Config(d_model=8, d_ff=8, d_kv=4, num_heads=2, num_layers=3,
                                   num_decoder_layers=1, decoder_start_token_id=0)

    def depth(x: torch.Tensor) -> torch.Tensor:
        return x * config.get_text_config(decoder=True).num_hidden_layers

    compiled = strict(depth)
    x = torch.randn(3)
    for _ in range(3):
        torch.testing.assert_close(compiled(x), depth(x))
    assert _counts(compiled) == (0, 1)


# ---- tensor methods on parameters -----------------------------------------------------------


class Norm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4))
        self.register_buffer("shift", torch.randn(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        return (x * (1.0 + w.float()) + w.half().float() + w.to(torch.float32)
                + w.detach() + self.shift.float())


def _closure_model(register: bool) -> tuple[nn.Module, Norm]:
    norm = Norm()

    class UsesClosure(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.parts = nn.ModuleDict({"norm": norm} if register else {})

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.helper(x)

        def helper(self, x: torch.Tensor) -> torch.Tensor:
            # `norm` is read from a closure: a module reached without a source
            return x * norm.weight.float() + norm(x)

    return UsesClosure(), norm


@pytest.mark.parametrize("through_closure", [False, True])
def test_parameter_methods_capture_as_ops_on_the_input(through_closure: bool) -> None:
    if through_closure:
        model, norm = _closure_model(register=True)
    else:
        norm = Norm()
        model = norm
    compiled = strict(model)
    x = torch.randn(2, 4)
    for _ in range(3):
        norm.weight.grad = None
        compiled(x).sum().backward()
        got = norm.weight.grad.clone()
        norm.weight.grad = None
        model(x).sum().backward()
        torch.testing.assert_close(got, norm.weight.grad)
    assert _counts(compiled) == (0, 1)


def test_a_parameter_in_a_method_closure_is_an_input_not_a_constant() -> None:
    # `helper`'s closure is reached through `self.helper` (since session 50, where the
    # defaults of a method called on `self` are guarded): the parameter is a graph input
    # and the graph does not break; before, it had no source and the graph broke there
    # rather than make it a constant (its gradient lost)
    model, norm = _closure_model(register=False)
    compiled = strict(model)
    x = torch.randn(2, 4)
    compiled(x).sum().backward()
    got = norm.weight.grad.clone()
    norm.weight.grad = None
    model(x).sum().backward()
    torch.testing.assert_close(got, norm.weight.grad)  # the gradient is not lost
    inner = getattr(compiled, "_compiled", compiled)
    assert not inner.breaks


class Reassigns(nn.Module):
    def __init__(self, tensor_over_parameter: bool) -> None:
        super().__init__()
        self.tensor_over_parameter = tensor_over_parameter
        self.w = nn.Parameter(torch.randn(3))
        self.spare = nn.Parameter(torch.randn(3))
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tensor_over_parameter:
            self.w = x * 2  # Module.__setattr__ refuses it
        self.w = self.spare  # a parameter replaces a parameter
        self.lin = None
        return x * self.w


def test_module_parameter_slots_written_as_in_eager() -> None:
    model = Reassigns(tensor_over_parameter=False)
    compiled = strict(model)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x * model.spare)
    assert model._parameters["w"] is model.spare and model._modules["lin"] is None
    assert _counts(compiled) == (0, 1)


def test_tensor_written_over_a_parameter_breaks_and_raises_as_in_eager() -> None:
    model = Reassigns(tensor_over_parameter=True)
    compiled = strict(model)
    with pytest.raises(TypeError, match="cannot assign"):
        compiled(torch.randn(3))
    inner = getattr(compiled, "_compiled", compiled)
    assert "assigning a Tensor to .w, a parameter entry" in inner.breaks[0].reason


class DropsMembers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.ones(3))
        self.extra = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * self.scale
        del self.scale
        delattr(self, "extra")
        gone = not hasattr(self, "scale") and not hasattr(self, "extra")
        return y - 1 if gone else y + 1


def test_module_buffer_and_submodule_deletes_are_seen_and_replayed() -> None:
    model = DropsMembers()
    compiled = strict(model)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x - 1)
    assert model._buffers == {} and model._modules == {}
    assert _counts(compiled) == (0, 1)


class Plain:
    def __init__(self) -> None:
        self.a = 1

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def copies_after_write(x: torch.Tensor, obj: Plain) -> torch.Tensor:
    obj.a = 5
    return x * copy.deepcopy(obj).a


def test_code_run_for_real_never_misses_a_pending_write() -> None:
    fn = copies_after_write
    compiled = strict(fn)
    for _ in range(2):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x, Plain()), fn(x, Plain()))
    inner = getattr(compiled, "_compiled", compiled)
    assert "written earlier in this capture" in inner.breaks[0].reason


def writes_through_dict(x: torch.Tensor, obj: Plain) -> torch.Tensor:
    obj.a = 7
    members = obj.__dict__  # shows the write
    members["b"] = members["a"] + 1
    y = x * obj.b  # shows the write through __dict__
    del members["a"]
    obj.c = 3
    return y + obj.as_dict()["c"] + hasattr(obj, "a")


def test_dict_of_a_written_object_shows_and_takes_writes() -> None:
    compiled = strict(writes_through_dict)
    for _ in range(3):
        x = torch.randn(3)
        mine, theirs = Plain(), Plain()
        torch.testing.assert_close(compiled(x, mine), writes_through_dict(x, theirs))
        assert vars(mine) == vars(theirs) == {"b": 8, "c": 3}
    assert _counts(compiled) == (0, 1)


def test_transformers_classification_head_writes_problem_type() -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_attention_heads=2,
        num_hidden_layers=1, num_labels=3, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0)
    model = transformers.BertForSequenceClassification(config)
    compiled = strict(model)
    ids, labels = torch.randint(0, 32, (2, 5)), torch.randint(0, 3, (2,))
    for _ in range(3):
        model.zero_grad()
        loss = compiled(input_ids=ids, labels=labels).loss
        loss.backward()
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        expected = model(input_ids=ids, labels=labels).loss
        expected.backward()
        torch.testing.assert_close(loss, expected)
        for g, p in zip(got, model.parameters()):
            torch.testing.assert_close(g, p.grad)
    assert config.problem_type == "single_label_classification"
    # the first call's write changes what the second call reads: one recompile
    assert _counts(compiled) == (0, 2)


class UsesData(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(3))
        self.register_buffer("decay", torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * self.w + x * self.w.data.sum() + self.decay.data  # no gradient via .data
        self.decay.data.mul_(0.5)  # an in-place write through the alias
        return y


@pytest.mark.parametrize("backend", ["eager", "default"])
def test_data_is_a_detached_alias_of_the_input(backend: str) -> None:
    import ember.frontend as ef

    mine = UsesData()
    theirs = copy.deepcopy(mine)
    compiled = strict(mine) if backend == "eager" else ef.compile(mine)
    x = torch.randn(3)
    for _ in range(3):
        got, want = compiled(x), theirs(x)
        got.sum().backward()
        want.sum().backward()
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(mine.w.grad, theirs.w.grad)
    torch.testing.assert_close(mine.decay, theirs.decay)
    assert _counts(compiled) == (0, 1)


def fresh_objects_across_a_break(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    loss_fct = nn.CrossEntropyLoss()
    weights = Pair(x.new_ones(3), x.new_zeros(3))
    print("a graph break")  # the break under test
    return loss_fct(x * weights.left + weights.right, y)


def test_fresh_objects_live_at_a_break_do_not_recompile(capsys: Any) -> None:
    compiled = strict(fresh_objects_across_a_break)
    for _ in range(5):
        x, y = torch.randn(4, 3), torch.randint(0, 3, (4,))
        torch.testing.assert_close(compiled(x, y), fresh_objects_across_a_break(x, y))
    # one compile per segment, whatever the number of calls (no identity guard)
    assert _counts(compiled) == (1, 2)


class _Level(enum.IntEnum):
    LOW = 1
    HIGH = 3


def test_an_enum_looked_up_by_value_is_captured() -> None:
    # before: "constructing a _Level object" was a graph break
    def f(x: torch.Tensor, n: int) -> tuple[torch.Tensor, _Level]:
        level = _Level(n)
        return x * level + len(level.name), level

    compiled = strict(f, fullgraph=True)
    for n in (1, 3, 1):
        out, level = compiled(torch.ones(2), n)
        want, want_level = f(torch.ones(2), n)
        torch.testing.assert_close(out, want)
        assert level is want_level
    with pytest.raises(ValueError, match="is not a valid _Level"):
        strict(f)(torch.ones(2), 2)
