"""``collections.deque`` made inside the compiled function: its methods and iteration are
captured (before: a break at every method call and at the loop). A deque from outside
still breaks where it is changed (its changes would not be replayed)."""

from __future__ import annotations

import collections

import torch
from strict_helpers import check


def made_here(x):
    d = collections.deque([1, 2, 3], maxlen=4)
    d.appendleft(0)
    d.append(4)
    d.rotate(1)
    p = d.popleft()
    total = 0
    for v in d:
        total += v
    return x * p + total, list(d), d.maxlen


def made_here_across_a_break(x):
    d = collections.deque([x])
    d.append(x * 2)
    print("break")
    d.append(x * 3)
    return list(d)


def from_outside(x, d):
    d.append(1)
    return x * len(d)


def test_deques() -> None:
    check(made_here, torch.ones(2), graphs=1, breaks=0, compiles=1)
    # (after the break the deque is the frame state's, an outside value: its changes
    # break there, as an argument's do)
    check(made_here_across_a_break, torch.ones(2), graphs=2, breaks=3)
    compiled = check(from_outside, torch.ones(2), collections.deque([0]), graphs=1, breaks=1)
    assert "deque.append" in compiled.breaks[0].reason
