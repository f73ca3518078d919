"""The private torch APIs ember-inductor uses, in one place (docs/architecture.md): a torch
upgrade that changes them touches this file only."""

from __future__ import annotations

from typing import Any


def first_argument_type(op: Any) -> str | None:
    """The schema type of an operator overload's first argument (``"Tensor"``), or None
    when it takes no arguments."""
    arguments = op._schema.arguments
    return str(arguments[0].type) if arguments else None

