"""Strict-mode guards, recompiles and side effects."""

from __future__ import annotations

import warnings

import pytest
import torch
from ember.frontend.compiled import RecompileLimitWarning
from ember.runtime.config import patch
from strict_helpers import strict
from torch import nn

FACTOR = 2.0


def uses_global(x):
    return x * FACTOR


def test_changing_a_global_recompiles():
    global FACTOR
    x = torch.randn(3)
    compiled = strict(uses_global)
    torch.testing.assert_close(compiled(x), x * 2.0)
    FACTOR = 3.0
    try:
        torch.testing.assert_close(compiled(x), x * 3.0)
    finally:
        FACTOR = 2.0
    torch.testing.assert_close(compiled(x), x * 2.0)
    assert compiled.stats.compiles == 2 and compiled.stats.recompiles == 1
    assert compiled.stats.cache_hits == 1


def test_changing_a_closure_variable_recompiles():
    scale = 2

    def fn(x):
        return x * scale

    x = torch.randn(3)
    compiled = strict(fn)
    torch.testing.assert_close(compiled(x), x * 2)
    scale = 5
    torch.testing.assert_close(compiled(x), x * 5)
    assert compiled.stats.compiles == 2


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.scale = 1.5
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.lin(x)) * self.scale


def test_module_attribute_and_training_recompile():
    torch.manual_seed(0)
    mod = Scaled().eval()
    compiled = strict(mod)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), mod(x))
    mod.scale = 4.0
    torch.testing.assert_close(compiled(x), mod(x))
    assert compiled.stats.compiles == 2
    mod.train()
    torch.manual_seed(1)
    expected = mod(x)
    torch.manual_seed(1)
    torch.testing.assert_close(compiled(x), expected)
    assert compiled.stats.compiles == 3
    mod.eval()
    torch.testing.assert_close(compiled(x), mod(x))
    assert compiled.stats.compiles == 3  # back to an existing entry


def test_parameter_updates_are_seen_without_recompiling():
    mod = Scaled().eval()
    compiled = strict(mod)
    x = torch.randn(2, 4)
    compiled(x)
    with torch.no_grad():
        mod.lin.weight.add_(1.0)
    torch.testing.assert_close(compiled(x), mod(x))
    assert compiled.stats.compiles == 1


def test_size_sweep_compiles_once_per_shape():
    def fn(x):
        return (x.relu() * x.shape[0]).sum(-1)

    compiled = strict(fn, dynamic=False)  # static shapes (automatic dynamic: test_dynamic_*)
    for n in (1, 2, 3, 4, 5, 6):
        x = torch.randn(n, 3)
        torch.testing.assert_close(compiled(x), fn(x))
    for n in (1, 2, 3, 4, 5, 6):
        compiled(torch.randn(n, 3))
    assert compiled.stats.compiles == 6 and compiled.stats.recompiles == 5
    assert compiled.stats.cache_hits == 6


def test_recompile_limit_falls_back_to_eager_with_one_warning():
    def fn(x, n):
        return x + n

    compiled = strict(fn)
    x = torch.randn(3)
    with patch(recompile_limit=3), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(6):  # floats: guarded by value (an int would become symbolic)
            torch.testing.assert_close(compiled(x, n + 0.5), x + n + 0.5)
    limit = [w for w in caught if issubclass(w.category, RecompileLimitWarning)]
    assert len(limit) == 1
    assert "n == 2.5 (got 3.5)" in str(limit[0].message)
    assert compiled.stats.compiles == 3 and compiled.stats.eager_fallback_calls == 3


def test_guards_log(capsys):
    with patch(logs=frozenset({"guards"})):
        strict(uses_global)(torch.randn(3))
    err = capsys.readouterr().err
    assert "G['FACTOR'] == 2.0 (float)" in err
    assert ("x.dtype == torch.float32 and x.shape == (3,) and x.stride() == (1,) and "
            "x.device == cpu and x.requires_grad == False") in err


def test_recompiles_log(capsys):
    compiled = strict(uses_global)
    with patch(logs=frozenset({"recompiles"})):
        compiled(torch.randn(3))
        compiled(torch.randn(4))
    err = capsys.readouterr().err
    assert "recompiling uses_global" in err and "x.shape == (3,) (got (4,))" in err


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.history = []

    def forward(self, x):
        self.calls = self.calls + 1
        self.history.append(self.calls)
        self.last = x * 2
        return x + self.calls


def test_module_attribute_writes_are_replayed():
    mod = Counter()
    compiled = strict(mod)
    x = torch.randn(3)
    out1 = compiled(x)
    out2 = compiled(x)
    torch.testing.assert_close(out1, x + 1)
    torch.testing.assert_close(out2, x + 2)
    assert mod.calls == 2 and mod.history == [1, 2]
    torch.testing.assert_close(mod.last, x * 2)


def test_list_and_dict_mutations_are_replayed():
    def fn(x, log, cache):
        log.append(x.sum())
        cache["y"] = x * 3
        cache.pop("old", None)
        return x + len(log)

    compiled = strict(fn)
    x = torch.randn(3)
    log, cache = [], {"old": 1}
    torch.testing.assert_close(compiled(x, log, cache), x + 1)
    assert len(log) == 1 and set(cache) == {"y"}
    torch.testing.assert_close(cache["y"], x * 3)
    log2, cache2 = [torch.zeros(())], {"old": 1}
    torch.testing.assert_close(compiled(x, log2, cache2), x + 2)
    assert len(log2) == 2 and set(cache2) == {"y"}
    torch.testing.assert_close(log2[1], x.sum())


def test_side_effect_before_break_happens_before_it(capsys):
    seen = []

    def fn(x, out):
        out.append(1)
        print(len(out))
        out.append(2)
        return x * 2

    compiled = strict(fn)
    compiled(torch.randn(2), seen)
    assert seen == [1, 2]
    assert capsys.readouterr().out == "1\n"


def test_grad_mode_is_guarded():
    def fn(x):
        return x * 2

    compiled = strict(fn)
    x = torch.randn(3, requires_grad=True)
    assert compiled(x).requires_grad
    with torch.no_grad():
        assert not compiled(x).requires_grad
    assert compiled.stats.compiles == 2


@pytest.mark.parametrize("value", [1, 2])
def test_python_branch_specializes(value):
    def fn(x, flag):
        if flag > 1:
            return x.cos()
        return x.sin()

    compiled = strict(fn)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x, value), fn(x, value))
    torch.testing.assert_close(compiled(x, 3 - value), fn(x, 3 - value))
    assert compiled.stats.compiles == 2 and compiled.stats.graph_breaks == 0


def test_passing_one_tensor_twice_is_another_graph():
    def fn(a, b):
        a.mul_(2)
        return b + 1

    compiled = strict(fn)
    x, y = torch.randn(3), torch.randn(3)
    x2 = x.clone()
    torch.testing.assert_close(compiled(x, y), y + 1)
    torch.testing.assert_close(x, x2 * 2)
    z = torch.randn(3)
    expected = z * 2 + 1  # b aliases a: it sees the mutation
    torch.testing.assert_close(compiled(z, z), expected)
    assert compiled.stats.compiles == 2


def test_nan_argument_hits_the_cache():
    def fn(x, v):
        return x + v

    compiled = strict(fn)
    x = torch.randn(3)
    compiled(x, float("nan"))
    compiled(x, float("nan"))
    assert compiled.stats.compiles == 1 and compiled.stats.cache_hits == 1


def test_storage_offset_and_default_dtype_are_guarded():
    def fn(x):
        return x * 2 + torch.ones(3)

    compiled = strict(fn)
    base = torch.randn(6)
    compiled(base[:3])
    compiled(base[3:])  # storage offset 3
    assert compiled.stats.compiles == 2
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        out = compiled(base[:3].double())
    finally:
        torch.set_default_dtype(previous)
    assert out.dtype == torch.float64 and compiled.stats.compiles == 3


CALLS = 0
LAST = None


def counts_calls(x):
    global CALLS, LAST
    CALLS = CALLS + 1
    LAST = x * 2
    return x + CALLS


def test_global_writes_are_replayed():
    global CALLS
    CALLS = 0
    compiled = strict(counts_calls)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x + 1)
    torch.testing.assert_close(compiled(x), x + 2)  # recompiles: CALLS is guarded
    assert CALLS == 2
    torch.testing.assert_close(LAST, x * 2)
    assert compiled.stats.graph_breaks == 0


def test_mutation_in_a_callee_that_breaks_happens_once(capsys):
    def helper(t, log):
        log.append("helper")
        print("break here")
        return t * 2

    def fn(x, log):
        log.append("fn")
        return helper(x + 1, log) - 1

    compiled = strict(fn)
    log = []
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x, log), (x + 1) * 2 - 1)
    assert log == ["fn", "helper"]


def test_forward_hooks_are_inlined_and_guarded():
    torch.manual_seed(0)
    mod = Scaled().eval()
    compiled = strict(mod)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), mod(x))
    seen = []
    handle = mod.lin.register_forward_hook(lambda m, args, out: out * 0 + len(seen))
    try:
        torch.testing.assert_close(compiled(x), mod(x))
        assert compiled.stats.compiles == 2 and compiled.stats.graph_breaks == 0
    finally:
        handle.remove()
    torch.testing.assert_close(compiled(x), mod(x))
    assert compiled.stats.compiles == 2


def test_guard_matcher_fetches_each_source_once_and_returns_the_inputs():
    from types import SimpleNamespace

    from ember.frontend.bytecode.guards import Guard, compile_matcher, tensor_guard
    from ember.frontend.bytecode.sources import AttrSource, ItemSource, LocalSource

    layers = AttrSource(LocalSource("self"), "layers")
    w0 = AttrSource(ItemSource(layers, 0), "weight")
    w1 = AttrSource(ItemSource(layers, 1), "weight")
    ws = [torch.randn(2), torch.randn(3)]
    module = SimpleNamespace(layers=[SimpleNamespace(weight=w) for w in ws])
    state = SimpleNamespace(locals={"self": module})
    guards = [Guard("len", layers, 2), tensor_guard(w0, ws[0]), tensor_guard(w1, ws[1])]
    match = compile_matcher(guards, [w1, w0])
    # ``self.layers`` is read once, into a local that both weights are fetched through
    code = [line.split("#")[0] for line in match.__ember_source__.splitlines()]
    assert sum(".layers" in line for line in code) == 1
    got = match(state, None)
    assert got is not None and got[0] is ws[1] and got[1] is ws[0]
    module.layers[1].weight = torch.randn(4)  # another shape: the guard fails
    assert match(state, None) is None
    del module.layers[1]  # the source itself is gone: a miss, not an exception
    assert match(state, None) is None


def test_module_members_are_read_from_their_tables_and_still_guarded():
    mod = Scaled().eval()
    compiled = strict(mod)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), mod(x))
    compiled(x)  # a cache hit builds the matcher
    (seg,) = compiled._compiled.segments[0]
    code = [line.split("#")[0] for line in seg._matcher.__ember_source__.splitlines()]
    assert any("._parameters[" in line for line in code)
    mod.lin = nn.Linear(4, 4)  # a new submodule of the same type: its own parameters
    torch.testing.assert_close(compiled(x), mod(x))  # are read, never stale ones
    assert compiled.stats.compiles == 1
    mod.lin = nn.Sequential(nn.Linear(4, 4))  # another type: a guard miss
    torch.testing.assert_close(compiled(x), mod(x))
    assert compiled.stats.compiles == 2
    mod.lin = nn.Linear(4, 4)
    weight = mod.lin.weight.detach().clone()
    del mod.lin.weight
    mod.lin.weight = weight * 2  # now a plain attribute, not a parameter
    torch.testing.assert_close(compiled(x), mod(x))
    assert compiled.stats.compiles == 3
