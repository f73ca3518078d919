"""Unknown settings are errors: ``mode``, ``options`` keys and value types, ``backend``
and the ``fullgraph``/``dynamic`` flags of ``ember.frontend.compile``."""

from __future__ import annotations

from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.frontend.bytecode import FullGraphError
from ember.runtime.pipeline import MODE_FEATURES, implemented_modes


def add_one(x: torch.Tensor) -> torch.Tensor:
    return x + 1


# NOTE: a mode is implemented once each feature it names is (pipeline.IMPLEMENTED_FEATURES)
@pytest.mark.parametrize("mode", [m for m in MODE_FEATURES if m not in implemented_modes()])
def test_torch_modes_not_implemented_yet_say_so(mode: str) -> None:
    with pytest.raises(NotImplementedError, match=f"mode='{mode}'.*not implemented"):
        ef.compile(add_one, backend="eager", mode=mode)
    with pytest.raises(NotImplementedError, match="not implemented"):
        ef.compile(backend="eager", mode=mode)(add_one)  # decorator factory


@pytest.mark.parametrize("mode", ["fast", "Default", "", 3])
def test_unknown_mode_lists_the_modes(mode: Any) -> None:
    with pytest.raises(ValueError, match=r"unknown mode .*modes: None, default"):
        ef.compile(add_one, backend="eager", mode=mode)


@pytest.mark.parametrize("mode", [None, "default"])
def test_implemented_modes_compile(mode: str | None) -> None:
    x = torch.randn(3)
    assert torch.equal(ef.compile(add_one, backend="eager", mode=mode)(x), x + 1)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_an_autotuning_mode_the_backend_would_ignore_is_an_error(backend: str) -> None:
    with pytest.raises(ValueError, match=f"mode='max-autotune' asks for autotune.*backend "
                                         f"'{backend}' runs no inductor stage"):
        ef.compile(add_one, backend=backend, mode="max-autotune")


@pytest.mark.parametrize("backend", ["nope", "Inductor", "cudagraphs", 3, add_one])
def test_unknown_backend_lists_the_backends(backend: Any) -> None:
    with pytest.raises(ValueError, match="unknown Ember backend .*eager, aot_eager, inductor"):
        ef.compile(add_one, backend=backend)


@pytest.mark.parametrize("settings", [{"backend": "nope"}, {"mode": "fast"},
                                      {"options": {"stritc": True}}, {"dynamic": "yes"}])
def test_a_decorator_factory_checks_its_settings_at_once(settings: dict[str, Any]) -> None:
    # before: nothing was checked until the decorator was applied to a function
    with pytest.raises(ValueError):
        ef.compile(**settings)


@pytest.mark.parametrize(("backend", "options", "message"), [
    ("eager", {"strict": True}, ("unknown option 'strict' for backend 'eager'; "
                                 "valid options: allow_breaks, capture")),
    ("inductor", {"stritc": True}, "unknown option 'stritc'.*eager_random.*strict"),
    ("aot_eager", {"aot.decomposee": True}, "unknown option 'aot.decomposee'.*aot.decompose"),
    ("aot_eager", {"eager_random": True}, "unknown option 'eager_random' for backend 'aot_eager'"),
    ("inductor", {"mode": "default"}, "unknown option 'mode'"),
])
def test_unknown_option_lists_the_valid_ones(backend: str, options: dict[str, Any],
                                             message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ef.compile(add_one, backend=backend, options=options)


@pytest.mark.parametrize(("backend", "options", "message"), [
    ("inductor", {"strict": "yes"}, "option 'strict'='yes': expected bool"),
    ("inductor", {"eager_random": 1}, "option 'eager_random'=1: expected bool"),
    ("aot_eager", {"aot.recompute_reduction_limit": True}, "expected int"),
    ("aot_eager", {"aot.training": "yes"}, "expected bool or None"),
    ("eager", {"capture": 1}, "option 'capture'=1: expected str"),
    ("eager", {"allow_breaks": "print"}, "expected list or tuple"),
])
def test_option_of_the_wrong_type(backend: str, options: dict[str, Any],
                                  message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ef.compile(add_one, backend=backend, options=options)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"fullgraph": True, "options": {"allow_breaks": [1]}}, "each a non-empty string"),
    ({"fullgraph": True, "options": {"allow_breaks": [""]}}, "each a non-empty string"),
    ({"options": {"allow_breaks": ["print"]}}, "with fullgraph=False .* would be ignored"),
    ({"fullgraph": True, "options": {"capture": "trace", "allow_breaks": ["print"]}},
     "with capture='trace' .* would be ignored"),
])
def test_allow_breaks_is_checked_not_ignored(kwargs: dict[str, Any], message: str) -> None:
    """A reason that is no string failed only at the first break (TypeError); an empty
    one allowed every break; without fullgraph or under trace the option did nothing."""
    with pytest.raises(ValueError, match=f"option 'allow_breaks'.*{message}"):
        ef.compile(add_one, backend="eager", **kwargs)


def test_options_must_be_a_dict() -> None:
    with pytest.raises(ValueError, match="expected a dict or None"):
        ef.compile(add_one, backend="eager", options=[("capture", "trace")])  # type: ignore[call-overload]


def test_valid_options_of_every_stage_are_accepted() -> None:
    x = torch.randn(3)
    f = ef.compile(add_one, backend="inductor",
                   options={"capture": "trace", "strict": True, "aot.decompose": True,
                            "aot.training": None, "device": "cpu"})
    assert torch.equal(f(x), x + 1)


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"fullgraph": "yes"}, ValueError, "fullgraph='yes': expected True or False"),
    ({"fullgraph": None}, ValueError, "fullgraph=None"),
    ({"dynamic": "auto"}, ValueError, "dynamic='auto': expected None, True or False"),
    ({"dynamic": 1}, ValueError, "dynamic=1: expected None, True or False"),
    ({"disable": "no"}, ValueError, "disable='no': expected True or False"),
    ({"disable": True, "mode": "bogus"}, ValueError, "unknown mode 'bogus'"),
])
def test_flags_are_checked(kwargs: dict[str, Any], error: type[Exception],
                           message: str) -> None:
    with pytest.raises(error, match=message):
        ef.compile(add_one, backend="eager", **kwargs)


def test_disable_returns_the_function_or_module_uncompiled() -> None:
    # torch.compile(..., disable=True): the same object back, in every calling form
    module = torch.nn.Linear(2, 2)
    assert ef.compile(add_one, disable=True) is add_one
    assert ef.compile(module, backend="eager", disable=True) is module
    assert ef.compile(backend="eager", disable=True)(add_one) is add_one
    assert ef.compile(add_one, disable=False) is not add_one


@pytest.mark.parametrize("capture", ["strict", "trace"])
def test_fullgraph_is_honoured(capture: str) -> None:
    """fullgraph is not accepted-and-ignored: strict capture raises at a break, tracing
    raises at code it cannot put in the one graph."""

    def breaks(x: torch.Tensor) -> torch.Tensor:
        print("side effect")
        if x.sum() > 0:
            return x + 1
        return x - 1

    f = ef.compile(breaks, backend="eager", fullgraph=True, options={"capture": capture})
    with pytest.raises((FullGraphError, ef.CaptureError)):
        f(torch.ones(2))
