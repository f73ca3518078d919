"""``id()`` of an argument in compiled code: the id of the caller's object (a tensor
argument, a list or dict read through its shadow copy, any other object), guarded to be
that object. It gave the id of the fake tensor or of the copy (a memo keyed by ids
missed), and a call with another object reused the first one's id."""

from __future__ import annotations

from typing import Any

import torch
from strict_helpers import strict


class _Obj:
    pass


def _memo(x: torch.Tensor, items: list[int], obj: _Obj,
          memo: dict[int, int]) -> torch.Tensor:
    return x + memo.get(id(x), 0) + memo.get(id(items), 0) + memo.get(id(obj), 0)


def test_ids_of_arguments_are_the_callers_objects() -> None:
    t1, t2 = torch.zeros(1), torch.zeros(1)
    l1, l2 = [1], [1]
    o1, o2 = _Obj(), _Obj()
    memo = {id(t1): 1, id(l1): 10, id(o1): 100}
    compiled = strict(_memo)
    for args in ((t1, l1, o1), (t2, l1, o1), (t1, l2, o1), (t1, l1, o2), (t2, l2, o2),
                 (t1, l1, o1)):
        expected: Any = _memo(*args, memo)
        torch.testing.assert_close(compiled(*args, memo), expected)


def test_an_id_taken_for_a_made_tensor_is_used_within_the_call() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        seen = {id(y): y}
        return seen[id(y)] + 1

    compiled = strict(fn)
    for i in range(2):
        x = torch.arange(3.0) + i
        torch.testing.assert_close(compiled(x), fn(x))
