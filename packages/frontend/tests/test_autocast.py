"""``torch.autocast`` blocks inside compiled code (bytecode/autocast_blocks.py,
ember/frontend/autocast.py): one graph holding autocast's casts, eager's values and
gradients, the global autocast state after the call as eager leaves it (after an
exception and a graph break inside the block too), recompiles when the caller's autocast
state changes, and the tracing capture."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.runtime.config import patch
from ember.runtime.ir import print_program
from torch import nn

BACKENDS = ["eager", "aot_eager"]
BF16 = torch.bfloat16


def autocast_state() -> tuple[Any, ...]:
    """Every piece of the global autocast state eager's `with` blocks touch, with the
    nesting count (which decides when autocast's cast cache is dropped)."""
    level = torch.autocast_increment_nesting() - 1
    torch.autocast_decrement_nesting()
    return (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"),
            torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"),
            torch.is_autocast_cache_enabled(), level)


START = autocast_state()


@pytest.fixture(autouse=True)
def _state_left_as_found() -> Any:
    yield
    assert autocast_state() == START


def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(4, 8), torch.randn(8, 8, requires_grad=True)


def run(fn: Callable[..., Any], x: torch.Tensor, w: torch.Tensor,
        outer: bool = False) -> tuple[Any, torch.Tensor | None]:
    """``fn(x, w)`` (under an outer bfloat16 autocast block when ``outer``), then the
    backward of its outputs' sum (outside any block); returns the outputs and w's grad."""
    w = w.detach().clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=BF16) if outer else contextlib.nullcontext():
        out = fn(x, w)
    outs = out if isinstance(out, tuple) else (out,)
    tensors = [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]
    if tensors:
        torch.autograd.backward([o.float().sum() for o in tensors])
    return out, w.grad


def same(got: Any, expected: Any, loose: bool = False) -> None:
    """Equal values and dtypes; ``loose``: to bfloat16's rounding (the inductor computes
    bfloat16 pointwise math in float32)."""
    if isinstance(expected, tuple):
        assert isinstance(got, tuple) and len(got) == len(expected)
        for g, e in zip(got, expected):
            same(g, e, loose)
        return
    if not isinstance(expected, torch.Tensor):
        assert got == expected
        return
    assert isinstance(got, torch.Tensor) and got.dtype == expected.dtype
    if loose:
        torch.testing.assert_close(got.float(), expected.float(), rtol=3e-2, atol=3e-2)
    else:
        torch.testing.assert_close(got, expected)


def check(fn: Callable[..., Any], backend: str = "eager", graphs: int = 1, breaks: int = 0,
          outer: bool = False, calls: int = 2, **kw: Any) -> Any:
    """Compile ``fn`` (strict) and compare ``calls`` calls with eager: outputs, w's
    gradient, the autocast state after the call; then the graph and break counts."""
    compiled = ef.compile(fn, backend=backend, **kw)
    x, w = inputs()
    for _ in range(calls):
        expected, expected_grad = run(fn, x, w, outer)
        got, got_grad = run(compiled, x, w, outer)
        assert autocast_state() == START
        same(got, expected, loose=backend == "inductor")
        same(got_grad, expected_grad, loose=backend == "inductor")
    stats = compiled.stats
    assert (stats.graphs, stats.graph_breaks) == (graphs, breaks), \
        [b.describe() for b in compiled.breaks]
    return compiled


# ---- one graph ------------------------------------------------------------------------

def mixed(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
        z = torch.relu(y)
    return z.float().sum() + x.sum()


@pytest.mark.parametrize("backend", [*BACKENDS, "inductor"])
def test_block_is_one_graph_with_eager_values_and_gradients(backend: str) -> None:
    check(mixed, backend)


def test_graph_holds_autocasts_casts() -> None:
    compiled = check(mixed)
    text = print_program(compiled.graphs[0])
    assert "aten::_to_copy.default(%w, dtype=torch.bfloat16)" in text
    assert "aten::_to_copy.default(%x, dtype=torch.bfloat16)" in text
    mm = [line for line in text.splitlines() if "aten::mm.default" in line]
    assert len(mm) == 1 and ": bf16[4, 8]" in mm[0], mm
    # x.sum() after the block: float32, no cast
    assert "aten::sum.default(%x)" in text


def test_fullgraph_captures_the_block() -> None:
    compiled = check(mixed, fullgraph=True)
    assert compiled.breaks == []


def nested(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
        with torch.autocast("cpu", enabled=False):
            z = y.float() @ w.t()  # float32: autocast is off here
            on = torch.is_autocast_enabled("cpu")
        # (with the cache, eager would reuse w's bfloat16 copy cached above)
        with torch.autocast("cpu", dtype=torch.float16, cache_enabled=False):
            h = z @ w
        q = z @ w
    return y, z, h, q, on, torch.is_autocast_enabled("cpu")


@pytest.mark.parametrize("backend", BACKENDS)
def test_nested_and_disabled_blocks(backend: str) -> None:
    check(nested, backend, fullgraph=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_graph_runs_with_autocast_off_under_an_outer_block(backend: str) -> None:
    # run under the caller's autocast, the float32 matmul of the enabled=False block
    # would be cast to bfloat16 a second time
    check(nested, backend, outer=True)


def aliases(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    with torch.amp.autocast(device_type="cpu", dtype=torch.bfloat16):
        a = x @ w
    with torch.autocast(device_type="cpu", dtype=torch.float16):
        b = x @ w
    with torch.cpu.amp.autocast():  # deprecated alias of torch.autocast("cpu")
        c = x @ w
    with torch.cuda.amp.autocast():  # (disables itself with a warning without CUDA)
        d = x @ w
    return a, b, c, d


def test_amp_spellings_and_deprecated_aliases() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(aliases, fullgraph=True)


class Rotary(nn.Module):
    """A block with autocast off inside a submodule's forward (HF rotary embeddings)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=h.device.type, enabled=False):
            return self.proj(h.float()).sin()


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inp = nn.Linear(8, 8)
        self.rotary = Rotary()
        self.out = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = self.inp(x)
            h = self.rotary(h)
            return self.out(h).float().pow(2).mean()


@pytest.mark.parametrize("backend", BACKENDS)
def test_training_step_with_autocast_in_submodules_is_one_graph(backend: str) -> None:
    x = inputs()[0]
    eager, ember = Model(), Model()
    compiled = ef.compile(ember, backend=backend, fullgraph=True)
    for _ in range(2):
        expected, got = eager(x), compiled(x)
        same(got, expected)
        expected.backward()
        got.backward()
        for (name, p), q in zip(eager.named_parameters(), ember.parameters()):
            assert p.grad is not None and q.grad is not None, name
            torch.testing.assert_close(q.grad, p.grad, msg=name)
    assert (compiled.stats.graphs, compiled.stats.graph_breaks) == (1, 0)


# ---- the state after the call: exceptions, graph breaks ---------------------------------

class Boom(Exception):
    pass


def raises_in_block(x: torch.Tensor, w: torch.Tensor, fail: bool) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
        if fail:
            raise Boom("inside the block")
    return y


def test_state_restored_when_an_exception_leaves_the_block() -> None:
    compiled = ef.compile(raises_in_block, backend="aot_eager")
    x, w = inputs()
    for _ in range(2):
        with pytest.raises(Boom, match="inside the block"):
            compiled(x, w, True)
        assert autocast_state() == START
        assert compiled(x, w, False).dtype == BF16
        assert autocast_state() == START


def handled_in_function(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, bool]:
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ w
            raise Boom
    except Boom:
        y = y.float() @ w  # autocast is off again here
    return y, torch.is_autocast_enabled("cpu")


def test_exception_handled_after_the_block_is_one_graph() -> None:
    check(handled_in_function, "aot_eager", fullgraph=True)


seen: list[tuple[bool, torch.dtype]] = []


@ef.disable
def eager_probe(t: torch.Tensor) -> torch.Tensor:
    seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
    return t @ t.t()  # eagerly under autocast: bfloat16 inputs stay bfloat16


def break_in_block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    # cache_enabled=False: with the cast cache, eager sums the gradients of the two uses
    # of w's cached bfloat16 copy in bfloat16; the two graphs cast w once each
    with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
        y = x @ w
        p = eager_probe(y)
        z = p @ (y @ w.t())
    return z.float().sum() + (x @ w).sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_graph_break_inside_the_block_runs_eagerly_with_autocast_on(backend: str) -> None:
    seen.clear()
    compiled = check(break_in_block, backend, graphs=2, breaks=1, calls=3)
    assert "ember.frontend.disable" in compiled.breaks[0].reason
    assert seen == [(True, BF16)] * 6  # eager's three calls and the compiled ones


@ef.disable
def eager_matmul(t: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return t @ w  # eagerly under autocast: w's bfloat16 copy goes into autocast's cache


def break_uses_weight(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = eager_matmul(x, w)
        z = y * 2
    return z


def test_cast_cache_is_dropped_when_the_block_ends_after_a_break() -> None:
    # the segments enter and leave the block's nesting level as eager does, so the cast
    # cached at the break is dropped at the block's end (else the next call would read
    # the copy of the weight from before the update)
    compiled = ef.compile(break_uses_weight, backend="aot_eager")
    x, w = inputs()
    for _ in range(3):
        got = compiled(x, w)
        torch.testing.assert_close(got, (x.to(BF16) @ w.detach().to(BF16)) * 2)
        with torch.no_grad():
            w.add_(1.0)  # an optimizer step
    assert (compiled.stats.graphs, compiled.stats.graph_breaks) == (1, 1)


def test_recompile_limit_fallback_inside_the_block_leaves_the_block() -> None:
    # the second call misses the resume point after the break (k's guard) at the limit:
    # the rest runs in the concrete interpreter, which calls the block's saved __exit__
    def fn(x: torch.Tensor, w: torch.Tensor, k: float) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = eager_probe(x @ w)
            z = y * k
        return z.float() + torch.is_autocast_enabled("cpu")

    compiled = ef.compile(fn, backend="aot_eager")
    x, w = inputs()
    with patch(recompile_limit=1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in (1.0, 2.0, 3.0):
            same(compiled(x, w, k), fn(x, w, k))
            assert autocast_state() == START
    assert compiled.stats.recompile_limit_fallbacks == 2


# ---- the caller's autocast state --------------------------------------------------------

def plain(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x @ w


def test_outside_autocast_is_guarded_and_recompiles() -> None:
    compiled = ef.compile(plain, backend="aot_eager")
    x, w = inputs()
    seen_dtypes = []
    for enabled, dtype in ((False, BF16), (True, BF16), (True, torch.float16), (False, BF16)):
        with torch.autocast("cpu", dtype=dtype, enabled=enabled):
            seen_dtypes.append(compiled(x, w).dtype)
    assert seen_dtypes == [torch.float32, BF16, torch.float16, torch.float32]
    assert (compiled.stats.compiles, compiled.stats.cache_hits) == (3, 1)
    torch.set_autocast_enabled("cuda", True)  # only CUDA's: a different state too
    try:
        assert compiled(x, w).dtype == torch.float32
    finally:
        torch.set_autocast_enabled("cuda", False)
    assert compiled.stats.compiles == 4


def enabled_by(x: torch.Tensor, w: torch.Tensor, on: bool) -> torch.Tensor:
    with torch.autocast("cpu", enabled=on):  # the dtype: torch.get_autocast_dtype("cpu")
        return x @ w


def test_block_settings_from_arguments_and_global_defaults_are_guarded() -> None:
    compiled = ef.compile(enabled_by, backend="aot_eager")
    x, w = inputs()
    assert [compiled(x, w, on).dtype for on in (True, False, True)] == [
        BF16, torch.float32, BF16]
    torch.set_autocast_dtype("cpu", torch.float16)
    try:
        assert compiled(x, w, True).dtype == torch.float16
    finally:
        torch.set_autocast_dtype("cpu", BF16)
    assert compiled.stats.compiles == 3


# ---- what stays a graph break -----------------------------------------------------------

def direct_enter(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    cm = torch.autocast("cpu", dtype=torch.bfloat16)
    cm.__enter__()
    y = x @ w
    cm.__exit__(None, None, None)
    return y


def set_directly(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    torch.set_autocast_enabled("cpu", True)
    y = x @ w
    torch.set_autocast_enabled("cpu", False)
    return y


def other_device(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    with torch.autocast("mps", dtype=torch.float16):
        return x @ w


@pytest.mark.parametrize("fn,reason", [
    (direct_enter, "torch.autocast.__enter__() called directly"),
    (set_directly, "torch.set_autocast_enabled (changes global state)"),
    (other_device, "torch.autocast for device type 'mps'"),
])
def test_unfollowed_autocast_changes_break_with_a_reason(fn: Callable[..., Any],
                                                         reason: str) -> None:
    # the change runs eagerly, and so does the call that undoes it (a second break)
    compiled = check(fn, "aot_eager", graphs=1, breaks=2)
    assert reason in compiled.breaks[0].reason


# ---- backward inside autocast, the tracing capture --------------------------------------

@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_backward_inside_an_autocast_block_keeps_the_graphs_dtypes(backend: str) -> None:
    # the compiled backward runs with autocast off: its float32 matmul (of the forward's
    # enabled=False block) is not cast to bfloat16 (with the inductor, compiled code
    # would read a bfloat16 buffer as float32)
    def loss(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return sum(t.float().sum() for t in nested(x, w)[:4])  # type: ignore[return-value]

    compiled = ef.compile(loss, backend=backend)
    x, w = inputs()
    grads = []
    for inside in (False, True):
        w1 = w.detach().clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=BF16):
            out = compiled(x, w1)
            if inside:
                out.backward()
        if not inside:
            out.backward()
        grads.append(w1.grad)
    torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("outer", [False, True])
def test_tracing_capture(backend: str, outer: bool) -> None:
    check(mixed, backend, outer=outer, options={"capture": "trace"})
    check(nested, backend, outer=outer, options={"capture": "trace"})


# ---- CUDA ---------------------------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_cuda_training_step_under_autocast(backend: str) -> None:
    def step(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return model(x).float().pow(2).mean()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64)).cuda()
    ember = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64)).cuda()
    ember.load_state_dict(model.state_dict())
    compiled = ef.compile(step, backend=backend, fullgraph=True)
    x = torch.randn(32, 64, device="cuda")
    for _ in range(2):
        expected, got = step(model, x), compiled(ember, x)
        torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2)
        expected.backward()
        got.backward()
        for p, q in zip(model.parameters(), ember.parameters()):
            assert p.grad is not None and q.grad is not None
            assert q.grad.dtype == p.grad.dtype == torch.float32
            assert ((q.grad - p.grad).norm() / p.grad.norm()) < 2e-2
            p.grad, q.grad = None, None
        assert autocast_state() == START
    assert (compiled.stats.graphs, compiled.stats.graph_breaks) == (1, 0)
    text = print_program(compiled.graphs[0])
    assert "dtype=torch.bfloat16" in text and "bf16[32, 128]" in text


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_cuda_autocast_outside_the_call_is_guarded() -> None:
    compiled = ef.compile(plain, backend="aot_eager")
    x, w = (t.detach().cuda() for t in inputs())
    dtypes = []
    for enabled, dtype in ((False, BF16), (True, BF16), (True, torch.float16), (False, BF16)):
        with torch.autocast("cuda", dtype=dtype, enabled=enabled):
            dtypes.append(compiled(x, w).dtype)
    assert dtypes == [torch.float32, BF16, torch.float16, torch.float32]
    assert (compiled.stats.compiles, compiled.stats.cache_hits) == (3, 1)
