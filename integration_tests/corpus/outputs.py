"""Result and argument structure: several outputs, identity and non-tensor outputs,
nested pytrees (dict of tuple of list), dict and keyword inputs, tensor constants."""

from __future__ import annotations

import torch

from corpus.case import case


def _several(x: torch.Tensor, y: torch.Tensor) -> tuple[object, ...]:
    return x, x + y, x.shape[0], None, (x * y).sum()


@case("outputs_several_identity_and_python", lambda: (torch.randn(3), torch.randn(3)))
def several() -> object:
    return _several


def _nested(x: torch.Tensor, y: torch.Tensor) -> dict[str, object]:
    return {"a": (x.exp(), [y.sin(), x @ y]), "b": {"c": x * 2, "n": 7}}


@case("outputs_nested_dict_tuple_list", lambda: (torch.randn(4), torch.randn(4)))
def nested() -> object:
    return _nested


def _dict_input(batch: dict[str, torch.Tensor], scale: float = 1.0) -> list[torch.Tensor]:
    return [batch["x"] * scale + batch["y"], batch["x"].mean()]


@case("inputs_dict_and_kwargs",
      lambda: (({"x": torch.randn(2, 3), "y": torch.randn(2, 3)},), {"scale": 0.5}),
      kwargs=True)
def dict_input() -> object:
    return _dict_input


_CLOSURE = torch.randn(3)


def _constants(x: torch.Tensor) -> torch.Tensor:
    return x * torch.tensor([1.0, -2.0, 3.0]) + _CLOSURE


@case("tensor_constants_literal_and_closure", lambda: (torch.randn(2, 3),))
def constants() -> object:
    return _constants
