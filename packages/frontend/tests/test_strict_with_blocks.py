"""``with`` blocks interpreted symbolically: user context managers (their ``__exit__``
sees the block's exception and may suppress it), ``@contextlib.contextmanager``
generators inlined, ``contextlib.nullcontext``/``suppress``; breaks inside blocks; torch
context managers other than grad mode and autocast (``torch.device``) break and still
exit at every call (autocast blocks: test_autocast.py)."""

from __future__ import annotations

import contextlib
import dataclasses

import ember.frontend as ef
import pytest
import torch
from strict_helpers import check, strict


def r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


# ---- context managers --------------------------------------------------------------------

@dataclasses.dataclass
class Counter:
    """A context manager passed in as an argument (compared with eager after the call)."""

    entered: int = 0
    exited: int = 0
    seen: str = ""

    def __enter__(self):
        self.entered += 1
        return 2.0

    def __exit__(self, typ, value, tb):
        self.exited += 1
        self.seen = "" if typ is None else typ.__name__
        return False


class SuppressKeyError:
    def __enter__(self):
        return self

    def __exit__(self, typ, value, tb):
        return typ is not None and issubclass(typ, KeyError)


def t_with_user(x, cm):
    with cm as s:
        y = x * s
    return y + cm.entered


def t_with_user_exception_not_suppressed(x, cm):
    try:
        with cm:
            x = x + 1
            raise ValueError("in block")
    except ValueError:
        x = x * 3
    return x


def t_with_suppress(x):
    y = x
    with SuppressKeyError():
        y = y + 1
        {}["k"]
        y = y + 100
    return y


@contextlib.contextmanager
def scaled(x, k, log):
    log.append("enter")
    try:
        yield x * k
    finally:
        log.append("exit")


@contextlib.contextmanager
def catching(log):
    try:
        yield
    except KeyError as e:
        log.append(f"caught {e.args[0]}")


def t_contextmanager(x):
    log = []
    with scaled(x, 2.0, log) as y:
        z = y + 1
    return z * len(log)


def t_contextmanager_swallows(x):
    log = []
    y = x
    with catching(log):
        y = y + 1
        {}["gone"]
        y = y + 100
    return y, log


def t_contextmanager_propagates(x):
    log = []
    try:
        with scaled(x, 3.0, log):
            raise ValueError("through the generator")
    except ValueError:
        x = x - 1
    return x * len(log), log


def t_stdlib_context_managers(x):
    with contextlib.nullcontext(x) as y:
        z = y + 1
    with contextlib.suppress(KeyError, IndexError):
        {}["a"]
        z = z + 100
    return z



@pytest.mark.parametrize("fn,make", [
    (t_with_user, lambda: (r(3), Counter())),
    (t_with_user_exception_not_suppressed, lambda: (r(3), Counter())),
    (t_with_suppress, lambda: (r(3),)),
    (t_contextmanager, lambda: (r(3),)),
    (t_contextmanager_swallows, lambda: (r(3),)),
    (t_contextmanager_propagates, lambda: (r(3),)),
    (t_stdlib_context_managers, lambda: (r(3),)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_one_graph_matching_eager(fn, make):
    check(fn, *make(), graphs=1, breaks=0, compiles=1)


def test_user_context_manager_sees_the_exception():
    cm = Counter()
    compiled = strict(t_with_user_exception_not_suppressed)
    x = r(3)
    torch.testing.assert_close(compiled(x, cm), (x + 1) * 3)
    assert (cm.entered, cm.exited, cm.seen) == (1, 1, "ValueError")
    assert compiled.stats.graph_breaks == 0


def t_break_inside_generator_with(x):
    log = []
    with scaled(x, 2.0, log) as y:
        print("inside")
        z = y + 1
    return z * len(log)


def test_break_inside_a_contextmanager_block(capsys):
    # the break moves to the `with`, entered for real; the print breaks again, and the
    # real generator is resumed for real at the block's end
    compiled = check(t_break_inside_generator_with, r(3), graphs=2, breaks=3, compiles=4,
                     calls=3)
    assert "print" in compiled.breaks[0].reason
    assert "runs eagerly" in compiled.breaks[0].reason


class Recording:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        self.log.append("enter")
        return 2.0

    def __exit__(self, typ, value, tb):
        self.log.append("exit")
        return False


def t_breaks_inside_user_with(x, log):
    with Recording(log) as s:
        print("one")
        y = x * s
        print("two")
    return y


def test_breaks_inside_user_with_block(capsys):
    # the block's __exit__, bound to the manager made at this call, is on the stack at
    # both breaks: each call must exit its own manager (and log into its own list)
    check(t_breaks_inside_user_with, r(3), [], graphs=1, breaks=2, compiles=3, calls=3)


# ---- torch context managers --------------------------------------------------------------

def t_default_device(x):
    with torch.device("cpu"):
        y = torch.ones(3) * x
    return y + 1


def test_other_torch_context_managers_break_with_a_clear_reason():
    compiled = strict(t_default_device)
    for _ in range(3):
        x = r(3)
        torch.testing.assert_close(compiled(x), t_default_device(x))
    assert compiled.stats.compiles == 3 and compiled.stats.graph_breaks == 2
    assert "context manager device" in compiled.breaks[0].reason
    assert "torch.autocast" in compiled.breaks[0].hint  # (names what is captured)


@ef.disable
@contextlib.contextmanager
def eager_context(log):
    log.append("enter")
    yield 2.0
    log.append("exit")


def t_disabled_contextmanager(x, log):
    with eager_context(log) as k:
        y = x * k
    return y


def test_disabled_contextmanager_is_not_inlined():
    # the real context manager's __enter__/__exit__ then break at next(generator); run
    # at those breaks they are plain Python (standard-library code is not compiled, so
    # __enter__ is no longer a second frame that breaks at its next() again)
    compiled = check(t_disabled_contextmanager, r(3), [], graphs=1, breaks=3)
    assert "ember.frontend.disable" in compiled.breaks[0].reason
    assert all("next() on a generator" in b.reason for b in compiled.breaks[1:])


def t_cudnn_flags(x):
    with torch.backends.cudnn.flags(enabled=False):
        inside = torch.backends.cudnn.enabled
        return x * 2, inside


def test_torch_contextmanager_function_is_entered_fresh_at_every_call():
    # torch's @contextmanager functions (cudnn.flags, which HF's CTC loss uses): the
    # call was run at capture and its contextlib object was a constant, entered again by
    # the second call (AttributeError: no attribute 'args'); now the object is made at
    # every call and its `with` breaks once, with the block's end run eagerly
    before = torch.backends.cudnn.enabled
    compiled = strict(t_cudnn_flags)
    for _ in range(3):
        x = r(3)
        got, inside = compiled(x)
        torch.testing.assert_close(got, x * 2)
        assert inside is False and torch.backends.cudnn.enabled == before
    assert "context manager torch.backends.cudnn.flags(...)" in compiled.breaks[0].reason
    assert all("next() on a generator" not in b.reason for b in compiled.breaks)
