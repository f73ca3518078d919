"""``copy.deepcopy`` and ``dataclasses.astuple``/``asdict`` of values holding the graph's
tensors (``bytecode/copy_rules.py``). Before: torch's ``Tensor.__deepcopy__`` ran for real
on the fake tensor and made one of another fake mode, so the next op broke ("Mixing fake
modes NYI") and ``Accessing the data pointer of FakeTensor`` was warned."""

from __future__ import annotations

import copy
import dataclasses
import warnings

import torch
from strict_helpers import check, strict


@dataclasses.dataclass
class _State:
    w: torch.Tensor
    n: int = 3
    extra: list = dataclasses.field(default_factory=list)


def deepcopy_made_tensor(x):
    y = x * 2
    z = copy.deepcopy(y)
    z.add_(1)
    w = copy.deepcopy([y, {"k": y}])
    w[0].add_(5)
    return y, z, w, w[0] is w[1]["k"]


def astuple_asdict(x):
    s = _State(x * 2, 3, [x + 1])
    w, n, extra = dataclasses.astuple(s)
    d = dataclasses.asdict(s)
    d["w"].add_(1)
    return w + n, extra, d, s.w


def deepcopy_object(x):
    s = _State(x * 2)
    t = copy.deepcopy(s)
    t.w.mul_(3)
    t.n = 4
    return s.w, t.w, s.n, t.n


def test_deepcopy_of_graph_tensors_is_one_graph() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no FakeTensor data_ptr warning
        for fn in (deepcopy_made_tensor, astuple_asdict, deepcopy_object):
            check(fn, torch.ones(3), graphs=1, breaks=0, compiles=1)


def test_deepcopy_of_a_tensor_that_requires_grad_breaks() -> None:
    def f(x):
        z = copy.deepcopy(x)  # a new leaf in eager
        return z * 2, z.is_leaf, z.requires_grad

    compiled = strict(f)
    x = torch.ones(2, requires_grad=True)
    got, expected = compiled(x), f(x)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1:] == expected[1:] == (True, True)
    assert "requires grad" in compiled.breaks[0].reason
