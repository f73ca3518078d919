"""``class`` statements inside a strictly compiled function are interpreted
(``bytecode/class_ops.py``): before, the whole function ran eagerly ("unsupported
bytecode LOAD_BUILD_CLASS")."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch
from torch import nn

from strict_helpers import check, strict

SCALE = 3


def local_class(x):
    class P:
        k = SCALE

        def __init__(self, a):
            self.a = a

        def go(self, t):
            return t * self.a + self.k

    return P(2).go(x)


def local_module(x):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.s = 2

        def forward(self, t):
            return t * self.s

    return M()(x)


def body_reads_enclosing_tensor(x):
    w = x * 2

    class C:
        v = w + 1
        xs = [i * 2 for i in range(3)]
        del xs[0]

        @staticmethod
        def sm(t):
            return t + 1

        @classmethod
        def cm(cls, t):
            return t * cls.v

        @property
        def pr(self):
            return self.v * sum(self.xs)

    return C.sm(x) + C.cm(x) + C().pr


def local_dataclass_namedtuple(x):
    @dataclasses.dataclass
    class D:
        a: int
        b: int = 2

    class P(NamedTuple):
        a: int
        b: int

    d = D(1)
    return x * d.a + d.b + P(1, 5).b


def zero_arg_super(x):
    class Base:
        def f(self, t):
            return t + 1

    class Sub(Base):
        def f(self, t):
            return super().f(t) * 2

    return Sub().f(x)


def class_attribute_write(x):
    class C:
        n = 0

    C.n += 1
    return x * C.n


def test_class_statements_are_one_graph() -> None:
    for fn in (local_class, local_module, body_reads_enclosing_tensor,
               local_dataclass_namedtuple, zero_arg_super, class_attribute_write):
        check(fn, torch.randn(3), graphs=1, breaks=0, compiles=1)


def test_a_global_the_body_reads_is_guarded() -> None:
    global SCALE
    compiled = strict(local_class)
    x = torch.ones(2)
    torch.testing.assert_close(compiled(x), local_class(x))
    try:
        SCALE = 5
        torch.testing.assert_close(compiled(x), local_class(x))
    finally:
        SCALE = 3
    assert compiled.stats.recompiles == 1


def test_an_escaping_instance_runs_eagerly() -> None:
    def f(x):
        class P:
            def __init__(self, a):
                self.a = a

        return P(x * 2)

    compiled = strict(f)
    first, second = compiled(torch.ones(2)), compiled(torch.ones(2))
    torch.testing.assert_close(first.a, torch.full((2,), 2.0))
    # a new class at every call, as in eager
    assert type(first) is not type(second)
    assert compiled.stats.eager_fallback_calls == 2
    assert "defined by a class statement" in compiled.breaks[0].reason
