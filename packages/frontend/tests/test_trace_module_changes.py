"""The trace capture after the compiled module's tree changed (``ModuleLayout.changed``):
a swapped submodule, an added parameter, an appended layer, also of a module passed as
an argument. Before, the entries kept reading the old submodules' parameters and
running the old code (silently wrong results, no recompile). So did a method replaced
on a submodule (``m.lin.forward = f``, ``m.helper = MethodType(g, m)``) or on a class."""

from __future__ import annotations

import types

import ember.frontend as ef
import torch
from torch import nn

TRACE = {"capture": "trace"}


def test_a_changed_module_tree_recompiles() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    compiled = ef.compile(m, backend="eager", options=TRACE)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), m(x))
    m[0] = nn.Linear(4, 4)  # same types and shapes: only the objects changed
    torch.testing.assert_close(compiled(x), m(x))
    m[1] = nn.Tanh()
    torch.testing.assert_close(compiled(x), m(x))
    m.append(nn.Sigmoid())
    torch.testing.assert_close(compiled(x), m(x))
    assert compiled.stats.recompiles == 3
    torch.testing.assert_close(compiled(x), m(x))  # and the new entry is then a hit
    assert compiled.stats.recompiles == 3 and compiled.stats.cache_hits == 1


def test_a_new_parameter_tensor_under_the_same_name_needs_no_recompile() -> None:
    m = nn.Linear(4, 4)
    compiled = ef.compile(m, backend="eager", options=TRACE)
    x = torch.randn(2, 4)
    compiled(x)
    m.weight = nn.Parameter(torch.ones(4, 4))
    torch.testing.assert_close(compiled(x), m(x))
    assert compiled.stats.recompiles == 0


class WithBias(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        extra = self.b if hasattr(self, "b") else 0
        return self.lin(x) + extra


def test_an_added_parameter_recompiles() -> None:
    m = WithBias()
    compiled = ef.compile(m, backend="eager", options=TRACE)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), m(x))
    m.b = nn.Parameter(torch.ones(4))
    torch.testing.assert_close(compiled(x), m(x))


def test_a_module_argument_whose_tree_changed_recompiles() -> None:
    def run(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return model(x) * 2

    m = nn.Sequential(nn.Linear(4, 4))
    compiled = ef.compile(run, backend="eager", options=TRACE)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(m, x), run(m, x))
    m[0] = nn.Linear(4, 4)
    torch.testing.assert_close(compiled(m, x), run(m, x))


def test_a_replaced_forward_or_a_new_hook_is_traced_again() -> None:
    # before: the entries kept running the forward (and hooks) seen at the first trace
    torch.manual_seed(0)
    m = torch.nn.Linear(3, 3)
    compiled = ef.compile(m, backend="eager", options={"capture": "trace"})
    x = torch.ones(2, 3)
    torch.testing.assert_close(compiled(x), m(x))
    m.forward = lambda x: torch.nn.functional.linear(x, m.weight) * 100  # type: ignore[method-assign]
    torch.testing.assert_close(compiled(x), m(x))
    handle = m.register_forward_hook(lambda mod, args, out: out + 1)
    torch.testing.assert_close(compiled(x), m(x))
    handle.remove()
    del m.forward
    torch.testing.assert_close(compiled(x), m(x))
    assert compiled.stats.recompiles == 3


class WithHelper(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def helper(self, y: torch.Tensor) -> torch.Tensor:
        return y + 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.helper(self.lin(x))


_HELPER = WithHelper.helper


def test_a_replaced_method_of_the_tree_is_traced_again() -> None:
    torch.manual_seed(0)
    m = WithHelper()
    compiled = ef.compile(m, backend="eager", options=TRACE)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), m(x))
    m.note = "seen"  # a new attribute (the trace did not read it): no recompile
    torch.testing.assert_close(compiled(x), m(x))
    assert compiled.stats.recompiles == 0
    m.helper = types.MethodType(lambda self, y: y * 100, m)  # type: ignore[method-assign]
    torch.testing.assert_close(compiled(x), m(x))
    m.lin.forward = lambda t: t - 5  # type: ignore[method-assign]
    torch.testing.assert_close(compiled(x), m(x))
    del m.helper, m.lin.forward
    try:
        WithHelper.helper = lambda self, y: y * 3  # type: ignore[method-assign]
        torch.testing.assert_close(compiled(x), m(x))
    finally:
        WithHelper.helper = _HELPER  # type: ignore[method-assign]
    torch.testing.assert_close(compiled(x), m(x))
    assert compiled.stats.recompiles == 4


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = 2.0
        self.mode = "double"
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x) * self.scale
        return y.relu() if self.mode == "double" else y.tanh()


def test_a_plain_attribute_set_anew_is_traced_again() -> None:
    """The trace reads ``self.scale`` as a constant: the entry kept multiplying by the
    old value after ``m.scale = 4.0`` (silently wrong). A train/eval flip keeps both
    entries (``training`` is guarded per entry)."""
    torch.manual_seed(0)
    m = Scaled()
    compiled = ef.compile(m, backend="eager", options=TRACE)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), m(x))
    m.scale = 4.0
    torch.testing.assert_close(compiled(x), m(x))
    m.lin.in_features = 4  # the same value again: no change
    m.mode = "other"
    torch.testing.assert_close(compiled(x), m(x))
    assert compiled.stats.recompiles == 2
    m.eval()
    torch.testing.assert_close(compiled(x), m(x))
    m.train()
    torch.testing.assert_close(compiled(x), m(x))
    assert compiled.stats.recompiles == 3  # the eval entry; train's was kept


class Counting(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1  # warned at capture: the trace runs it once
        return x + 1


def test_an_attribute_the_trace_itself_writes_does_not_recompile() -> None:
    import warnings

    m = Counting()
    compiled = ef.compile(m, backend="eager", options=TRACE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            compiled(torch.ones(2))
    assert compiled.stats.recompiles == 0


def test_a_hook_registered_on_a_submodule_after_a_call_is_traced() -> None:
    # before: only the top module's hook tables were compared, and the entry kept running
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    compiled = ef.compile(m, options=TRACE)
    x = torch.randn(3, 4)
    torch.testing.assert_close(compiled(x), m(x))
    handle = m[0].register_forward_hook(lambda mod, i, o: o + 1)
    torch.testing.assert_close(compiled(x), m(x))
    pre = m[2].register_forward_pre_hook(lambda mod, i: (i[0].neg(),))
    torch.testing.assert_close(compiled(x), m(x))
    handle.remove()
    pre.remove()
    torch.testing.assert_close(compiled(x), m(x))
    assert compiled.stats.recompiles >= 3
