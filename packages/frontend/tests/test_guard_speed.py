"""The per-call cost of guards: what the generated check function is written as, and that
every mutation of the model it skips no check for (module attribute, parameter,
``requires_grad``, ``.data``, grad mode, submodule, hook) still recompiles or fails the
right guard."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from ember.frontend.guard_model import Guard, tensor_guard
from ember.frontend.guards import compile_matcher
from ember.runtime.config import patch
from strict_helpers import strict
from torch import nn


class Settings:
    """A config object without ``scale``: the block's lookup of it fails and is handled."""

    eps = 0.5


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.act = nn.ReLU()
        self.flag = False
        self.factor = 2.0
        self.settings = Settings()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            scale: float = self.settings.scale  # type: ignore[attr-defined]
        except AttributeError:
            scale = 1.0
        y: torch.Tensor = self.act(self.lin(x)) * self.factor * scale
        return y + 1 if self.flag else y


class Stack(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def _code(compiled: Any) -> list[str]:
    """The lines of the (one) segment's generated check function, without comments."""
    strict_fn = getattr(compiled, "_compiled", compiled)
    (segment,) = strict_fn.segments[0]
    source: str = segment.guards.matcher(segment.input_sources).__ember_source__
    return [line.split("  #")[0].strip() for line in source.splitlines()]


def _checks_of(code: list[str], local: str) -> list[str]:
    return [line for line in code if line.startswith("if not (") and f"{local}" in line]


def test_check_function_of_a_block() -> None:
    torch.manual_seed(0)
    model = Block()
    compiled = strict(model)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), model(x))
    code = _code(compiled)
    # a handled failed attribute lookup is checked on the local already fetched, not by
    # walking self.settings again from the frame state
    assert not any(".fetch(S, C)" in line for line in code), code
    fails = [line for line in code if "hasattr(" in line]
    assert len(fails) == 1 and fails[0].startswith("v") and " = not hasattr(v" in fails[0]
    # True/False/None by identity (their type check is implied)
    assert any(line.endswith(" is False): return None") for line in code), code
    # a parameter's check tests its exact type (no isinstance: a metaclass check)
    weight = [line for line in code if "requires_grad is True" in line]
    assert len(weight) == 2, weight
    for line in weight:
        v = line.split("(type(")[1].split(")")[0]
        assert line.startswith(f"if not (type({v}) is Parameter and {v}.dtype is "), line


def test_check_function_text_of_a_guard_set() -> None:
    from ember.frontend.bytecode.sources import AttrSource, LocalSource

    p = nn.Parameter(torch.zeros(3))
    guards = [tensor_guard(LocalSource("p"), p),
              Guard("equals", AttrSource(LocalSource("m"), "flag"), None),
              Guard("equals", AttrSource(LocalSource("m"), "on"), True),
              Guard("equals", AttrSource(LocalSource("m"), "n"), 3)]
    text = compile_matcher(guards).__ember_source__  # type: ignore[attr-defined]
    assert text == (
        "def match(S, C):\n"
        "    try:\n"
        "        v0 = S.locals[name3]  # 'p'\n"
        "        if not (type(v0) is Parameter and v0.dtype is dtype4 and v0.shape == size5 and v0.stride() == stride6 "
        "and v0.device == device7 and v0.requires_grad is True and v0.storage_offset() == 0"
        "): return None\n"
        "        v1 = S.locals[name8]  # 'm'\n"
        "        v2 = v1.flag  # 'm.flag'\n"
        "        if not (v2 is None): return None\n"
        "        v3 = v1.on  # 'm.on'\n"
        "        if not (v3 is True): return None\n"
        "        v4 = v1.n  # 'm.n'\n"
        "        if not (type(v4) is type9 and v4 == c10): return None\n"
        "        return []\n"
        "    except Exception:\n"
        "        return None\n"
    )


def test_identity_checks_are_exact() -> None:
    from ember.frontend.bytecode.frame import FrameState
    from ember.frontend.bytecode.sources import LocalSource

    match = compile_matcher([Guard("equals", LocalSource("v"), False),
                             Guard("equals", LocalSource("w"), None)])

    def hit(v: Any, w: Any) -> bool:
        return match(FrameState(0, [], {"v": v, "w": w}, {}, True), None) is not None

    assert hit(False, None)
    assert not hit(0, None) and not hit(0.0, None) and not hit(False, False)
    assert not hit(torch.tensor(False), None)


def test_a_failed_lookup_is_checked_on_its_base_local() -> None:
    from ember.frontend.bytecode.exception_ops import LookupFails
    from ember.frontend.bytecode.frame import FrameState
    from ember.frontend.bytecode.sources import LocalSource

    class Picky:
        def __getitem__(self, key: Any) -> Any:
            raise TypeError("not a lookup failure")

    d = LocalSource("d")
    match = compile_matcher([Guard("equals", LookupFails(d, "k", False), True),
                             Guard("equals", LookupFails(d, "items", True), False)])
    code = [line.split("  #")[0].strip() for line in
            match.__ember_source__.splitlines()]  # type: ignore[attr-defined]
    assert code[2:6] == ["v0 = S.locals[name3]", "v1 = lookup_fails4(v0, key5)",
                         "if not (v1 is True): return None", "v2 = not hasattr(v0, name6)"]

    def hit(value: Any) -> bool:
        return match(FrameState(0, [], {"d": value}, {}, True), None) is not None

    assert hit({}) and hit({"j": 1})
    assert not hit({"k": 1}) and not hit(Picky()) and not hit(object())


def _run(compiled: Any, model: nn.Module, x: torch.Tensor, capsys: Any) -> str:
    """Call ``compiled`` with recompile logs on, compare with eager, return the log."""
    capsys.readouterr()
    with patch(logs=frozenset({"recompiles"})):
        out = compiled(x)
    torch.testing.assert_close(out, model(x))
    return str(capsys.readouterr().err)


def _model() -> tuple[Stack, Any, torch.Tensor]:
    torch.manual_seed(0)
    model = Stack(3)
    compiled = strict(model)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), model(x))
    torch.testing.assert_close(compiled(x), model(x))
    assert compiled.stats.recompiles == 0 and compiled.stats.cache_hits == 1
    return model, compiled, x


@pytest.mark.parametrize("mutation, failed", [
    ("attribute", "self.layers[1].factor == 2.0 (got 3.0)"),
    ("flag", "self.layers[2].flag == False (got True)"),
    ("new_attribute", "raises(self.layers[0].settings.scale)"),
    ("parameter_shape", "self.layers[1].lin.bias.shape == (4,) (got (1,))"),
    ("data", "self.layers[1].lin.bias.shape == (4,) (got (1,))"),
    ("requires_grad", "self.layers[2].lin.weight.requires_grad == True (got False)"),
    ("submodule", "type(self.layers[1].act) is ReLU (got Tanh)"),
    ("hook", "self.layers[0].lin has no module hooks"),
])
def test_a_mutation_of_the_model_recompiles(mutation: str, failed: str, capsys: Any) -> None:
    model, compiled, x = _model()
    layers: Any = model.layers
    if mutation == "attribute":
        layers[1].factor = 3.0
    elif mutation == "flag":
        layers[2].flag = True
    elif mutation == "new_attribute":
        layers[0].settings = Settings()
        layers[0].settings.scale = 5.0
    elif mutation == "parameter_shape":
        layers[1].lin.bias = nn.Parameter(torch.zeros(1))
    elif mutation == "data":
        bias = layers[1].lin.bias
        bias.data = torch.zeros(1)  # the same Parameter object, another shape
        assert layers[1].lin.bias is bias
    elif mutation == "requires_grad":
        layers[2].lin.weight.requires_grad_(False)
    elif mutation == "submodule":
        layers[1].act = nn.Tanh()
    elif mutation == "hook":
        layers[0].lin.register_forward_hook(lambda mod, args, out: out * 10)
    log = _run(compiled, model, x, capsys)
    assert compiled.stats.recompiles == 1, (mutation, log)
    assert f"guard failed: {failed}" in log, log


def test_a_parameter_replaced_by_an_equal_one_is_read_again() -> None:
    model, compiled, x = _model()
    layers: Any = model.layers
    layers[1].lin.weight = nn.Parameter(torch.ones(4, 4))  # same metadata, new values
    torch.testing.assert_close(compiled(x), model(x))
    assert compiled.stats.recompiles == 0 and compiled.stats.cache_hits == 2


def test_grad_mode_fails_the_right_guard(capsys: Any) -> None:
    model, compiled, x = _model()
    with torch.no_grad():
        log = _run(compiled, model, x, capsys)
    assert "guard failed: torch.is_grad_enabled() == True (got False)" in log, log


def test_guards_per_layer_do_not_grow() -> None:
    """Each layer adds the same guards (a fixed number per layer, no quadratic growth),
    and layers share no check that could be hoisted out of the loop."""
    counts = []
    for n in (2, 4):
        torch.manual_seed(0)
        compiled = strict(Stack(n))
        compiled(torch.randn(2, 4))
        (segment,) = compiled._compiled.segments[0]
        counts.append(len(segment.guards))
    per_layer = (counts[1] - counts[0]) // 2
    assert counts[1] - counts[0] == 2 * per_layer
    # 13, and the functions of the 3 methods each layer calls (its forward, its
    # submodules'): a replaced method recompiles; the fast path's stamp covers them
    assert per_layer == 16, counts


def test_guards_log_shows_the_check_function(capsys: Any) -> None:
    compiled = strict(lambda x: x * 2)
    x = torch.randn(3)
    with patch(logs=frozenset({"guards"})):
        compiled(x)
        compiled(x)  # the check function is written at the first lookup
    err = capsys.readouterr().err
    assert "check function of the segment at resume point 0 (5 guards):\ndef match(S, C):" in err
    assert "return [v0]" in err
