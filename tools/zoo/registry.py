"""The zoo's registry: model name -> factory."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch

SUITES = ("test", "quick", "full")

ModelAndInputs = tuple[torch.nn.Module, tuple[Any, ...]]
Factory = Callable[[torch.device, torch.dtype, str], ModelAndInputs]

T = TypeVar("T")


@dataclass(frozen=True)
class ModelSpec:
    """A zoo model.

    ``suites``: the suites that include it (every model has a ``test`` size).
    ``tags``: free-form labels (``"hf"``, ``"conv"``, ``"memory-bound"``) for filtering.
    """

    name: str
    factory: Factory
    description: str
    suites: tuple[str, ...] = SUITES
    tags: tuple[str, ...] = field(default_factory=tuple)

    def make(
        self, device: str | torch.device, dtype: torch.dtype, suite: str
    ) -> tuple[torch.nn.Module, tuple[Any, ...]]:
        """Build the module and its example inputs on ``device`` in ``dtype``.

        Raises:
            ValueError: for an unknown suite.
        """
        if suite not in SUITES:
            raise ValueError(f"unknown suite {suite!r}; expected one of {SUITES}")
        module, inputs = self.factory(torch.device(device), dtype, suite)
        return module.eval(), inputs


_MODELS: dict[str, ModelSpec] = {}


def register(
    name: str, description: str, *, suites: tuple[str, ...] = SUITES, tags: tuple[str, ...] = ()
) -> Callable[[Factory], Factory]:
    """Decorator: register ``factory`` under ``name``."""

    def wrap(factory: Factory) -> Factory:
        if name in _MODELS:
            raise ValueError(f"zoo model {name!r} registered twice")
        _MODELS[name] = ModelSpec(name, factory, description, suites, tags)
        return factory

    return wrap


def get(name: str) -> ModelSpec:
    """The model ``name``.

    Raises:
        KeyError: naming the known models.
    """
    if name not in _MODELS:
        raise KeyError(f"no zoo model {name!r}; known: {', '.join(_MODELS)}")
    return _MODELS[name]


def names(suite: str | None = None) -> list[str]:
    """Registered model names, in registration order (only those in ``suite`` if given)."""
    return [n for n, spec in _MODELS.items() if suite is None or suite in spec.suites]


def pick(suite: str, test: T, quick: T, full: T) -> T:
    """The size for ``suite``."""
    return {"test": test, "quick": quick, "full": full}[suite]


def seeded_randn(*shape: int, device: torch.device, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Normal random values (never zeros), reproducible from ``seed`` on one device.

    Generated on ``device`` itself (a full-size CUDA input never round-trips through the
    host); on ``meta`` only the shape exists.
    """
    if device.type == "meta":
        return torch.empty(*shape, device=device, dtype=dtype)
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(*shape, generator=gen, device=device, dtype=torch.float32).to(dtype)


def seeded_tokens(*shape: int, vocab: int, device: torch.device, seed: int) -> torch.Tensor:
    """Random token ids in ``[0, vocab)``, reproducible from ``seed``."""
    if device.type == "meta":
        return torch.empty(*shape, device=device, dtype=torch.long)
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randint(0, vocab, shape, generator=gen, device=device)


def build(module_cls: Callable[[], torch.nn.Module], device: torch.device, dtype: torch.dtype,
          seed: int = 0) -> torch.nn.Module:
    """Instantiate a module with seeded weights, on ``device`` in ``dtype``.

    Weights are initialised on CPU (deterministic on every device), then moved; on the
    ``meta`` device (shape checks of ``full`` sizes without memory) nothing is allocated.
    """
    if device.type == "meta":
        with torch.device("meta"):
            return module_cls().to(dtype=dtype)
    torch.manual_seed(seed)
    return module_cls().to(device=device, dtype=dtype)
