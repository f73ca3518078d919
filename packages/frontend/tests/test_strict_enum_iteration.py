"""Iterating an ``Enum`` class inside a strict capture: its members, fixed when the class
was defined. Before: "iteration over a EnumType (length unknown to Ember)", and then one
break per item of the comprehension over the real iterator (8 for two members)."""

from __future__ import annotations

import enum

import torch
from strict_helpers import check


class Color(enum.Enum):
    RED = 1
    BLUE = 2


def names_and_values(x):
    return x * sum(c.value for c in Color), [c.name for c in Color], list(Color), len(Color)


def test_enum_class_iteration_is_one_graph() -> None:
    check(names_and_values, torch.ones(2), graphs=1, breaks=0, compiles=1)
