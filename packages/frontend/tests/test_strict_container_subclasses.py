"""Outside instances of list/dict subclasses (transformers' ModelOutput, an OrderedDict
subclass): the C methods of their base class read their items through sources, so the
tensors in them are graph inputs, never the first call's values
(bytecode/subclass_items.py)."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import Any

import ember.frontend as ef
import pytest
import torch


class Out(OrderedDict):  # type: ignore[type-arg]
    pass


class Items(list):  # type: ignore[type-arg]
    pass


@dataclasses.dataclass
class ModelOutputLike(OrderedDict):  # type: ignore[type-arg]
    """transformers' ModelOutput, in short: fields are keys (None ones left out) and
    attributes; item writes go through __setitem__ (which also sets the attribute)."""

    logits: torch.Tensor | None = None
    hidden: torch.Tensor | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is not None:
                self[f.name] = v

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, str):
            return dict(self.items())[k]
        return self.to_tuple()[k]

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.keys() and value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def to_tuple(self) -> tuple[Any, ...]:
        return tuple(self[k] for k in self.keys())


@ef.disable
def opaque() -> None:
    pass


def _run(fn: Any, make: Any, sizes: tuple[int, ...] = (3, 4, 5)) -> Any:
    compiled = ef.compile(fn, backend="eager")
    for n in sizes:
        args = make(n)
        got, want = compiled(*args), fn(*args)
        _same(got, want)
    return compiled


def _same(got: Any, want: Any) -> None:
    assert type(got) is type(want), (got, want)
    if isinstance(want, torch.Tensor):
        assert torch.equal(got, want)
    elif isinstance(want, dict):
        assert list(got) == list(want)
        for k in want:
            _same(got[k], want[k])
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            _same(a, b)
    else:
        assert got == want


def test_items_of_a_dict_subclass_live_across_a_break() -> None:
    def f(x: torch.Tensor) -> Any:
        out = Out(logits=x * 2)
        opaque()
        return dict(out.items())

    _run(f, lambda n: (torch.randn(n),))


def test_reads_of_a_dict_subclass_after_a_break() -> None:
    reads = [
        lambda o: list(o.values()), lambda o: dict(o), lambda o: {**o},
        lambda o: o.copy(), lambda o: o.get("logits"), lambda o: [o[k] for k in o],
        lambda o: {k: v for k, v in o.items() if v is not None},  # transformers
    ]
    for read in reads:
        def f(x: torch.Tensor, read: Any = read) -> Any:
            out = Out(logits=x * 2, n=1)
            opaque()
            return read(out)

        _run(f, lambda n: (torch.randn(n),))


def test_model_output_like_class() -> None:
    def f(x: torch.Tensor, with_hidden: bool) -> Any:
        out = ModelOutputLike(logits=x * 2, hidden=x + 1 if with_hidden else None)
        opaque()
        kept = {k: v for k, v in out.items() if v is not None}
        return kept, out.logits, out["logits"], out.to_tuple(), len(out)

    compiled = _run(lambda x: f(x, True), lambda n: (torch.randn(n),))
    assert compiled.stats.graph_breaks >= 1
    # the keys change (a None field is left out): guarded, not the first call's keys
    _run(lambda x, h: f(x, h), lambda n: (torch.randn(n), n % 2 == 0), sizes=(2, 3, 4, 5))


def test_model_output_argument() -> None:
    def f(out: ModelOutputLike) -> Any:
        return [v * 2 for v in out.values()], tuple(out.keys())

    _run(f, lambda n: (ModelOutputLike(logits=torch.randn(n)),))


def test_a_write_into_an_outside_subclass_is_not_made_once() -> None:
    def f(x: torch.Tensor) -> Any:
        out = Out(logits=x)
        opaque()
        out["doubled"] = out["logits"] * 2
        out.pop("logits")
        return dict(out)

    _run(f, lambda n: (torch.randn(n),))


def test_list_subclass_across_a_break() -> None:
    reads = [lambda v: list(v), lambda v: [t for t in v], lambda v: v.copy(),
             lambda v: (*v,), lambda v: v + [v[0]]]
    for read in reads:
        def f(x: torch.Tensor, read: Any = read) -> Any:
            items = Items([x * 2, x + 1])
            opaque()
            return read(items)

        _run(f, lambda n: (torch.randn(n),))


class WithContains(Out):
    def __contains__(self, key: object) -> bool:
        return super().__contains__(key)


def test_python_contains_of_an_outside_subclass_is_inlined() -> None:
    def f(x: torch.Tensor, extra: bool) -> Any:
        out = WithContains(logits=x) if not extra else WithContains(logits=x, extra=x)
        opaque()
        return ("extra" in out), dict(out)

    _run(f, lambda n: (torch.randn(n), n % 2 == 0), sizes=(2, 3, 4, 5))


def test_transformers_model_output_after_a_break() -> None:
    outputs = pytest.importorskip("transformers.modeling_outputs")

    def f(x: torch.Tensor) -> Any:
        hidden = (x + 1,) if x.shape[0] % 2 else None
        out = outputs.BaseModelOutput(last_hidden_state=x * 2, hidden_states=hidden)
        opaque()
        kept = {k: v for k, v in out.items() if v is not None}
        return kept, out.last_hidden_state, out[0], out.to_tuple(), "hidden_states" in out

    _run(f, lambda n: (torch.randn(n),), sizes=(3, 4, 5, 6))
