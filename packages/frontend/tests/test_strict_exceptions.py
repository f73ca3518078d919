"""Exceptions interpreted symbolically: try/except/else/finally, handlers across inlined
calls, re-raise, ``raise ... from``, exceptions that escape (a break that raises
eagerly), the guards of failed lookups, and exceptions that must stay graph breaks
(Ember's own, fake-tensor limits). ``with`` blocks: ``test_strict_with_blocks.py``."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import torch
from ember.frontend.bytecode.breaks import GraphBreak
from ember.frontend.bytecode.capture import CaptureContext
from ember.frontend.bytecode.exceptions import capture_limitation
from ember.frontend.bytecode.sources import LocalSource
from strict_helpers import check, strict


def r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


# ---- try / except / else / finally --------------------------------------------------------

def t_else_finally(x):
    log = []
    try:
        y = x + 1
    except ValueError:
        y = x - 1
    else:
        log.append("else")
        y = y * 2
    finally:
        log.append("finally")
    return y * len(log)


def t_raise_caught(x):
    try:
        raise ValueError("bad value")
    except ValueError as e:
        msg = str(e)
    finally:
        x = x + 1
    return x * len(msg)


def t_dict_miss(x):
    d = {"a": 2.0}
    try:
        v = d["b"]
    except KeyError as e:
        v = len(e.args[0]) + 3.0
    return x * v


def t_loop_handlers(x):
    d = {"a": 1.0}
    for k in ["a", "b", "a", "c"]:
        try:
            x = x + d[k]
        except KeyError:
            x = x * 2
    return x


def t_attribute_error(x):
    try:
        n = x.no_such_attribute
    except AttributeError:
        n = 3
    return x * n


def t_index_error(x):
    items = [1, 2]
    try:
        n = items[5]
    except IndexError:
        n = -1
    return x + n


def t_next_exhausted(x):
    it = iter([1.0])
    first = next(it)
    try:
        second = next(it)
    except StopIteration:
        second = 10.0
    return x * first + second


def t_finally_return(x):
    try:
        return x + 1
    finally:
        x = x * 100  # runs, but the value returned was computed before


def t_except_tuple_and_order(x):
    try:
        int("not a number")
    except (KeyError, ValueError) as e:
        kind = type(e).__name__
    except Exception:  # noqa: BLE001 - what these cases are about
        kind = "other"
    return x * len(kind)


# ---- across inlined calls ----------------------------------------------------------------

def _inner(x):
    if x.shape[0] > 2:
        raise KeyError("deep")
    return x


def _middle(x, log):
    try:
        return _inner(x) + 1
    except IndexError:
        return x - 1  # not taken: KeyError is no IndexError
    finally:
        log.append("middle finally")


def t_nested_frames(x):
    log = []
    try:
        y = _middle(x, log)
    except LookupError as e:
        y = x * 3 + len(e.args)
    return y * len(log)


def _middle_catches(x):
    try:
        return _inner(x)
    except KeyError:
        return x * 5


def t_caught_in_callee(x):
    return _middle_catches(x) + 1


def _reraise(x):
    try:
        {}["k"]
    except KeyError:
        x = x + 1
        raise


def t_reraise(x):
    try:
        _reraise(x)
    except KeyError as e:
        return x * 2 + len(e.args[0])
    return x


def t_raise_from(x):
    try:
        try:
            {}["k"]
        except KeyError as e:
            raise ValueError("wrapped") from e
    except ValueError as e:
        cause = type(e.__cause__).__name__
        flags = (e.__suppress_context__, type(e.__context__).__name__)
    return x + len(cause), flags


def t_raise_from_none_and_context(x):
    try:
        try:
            {}["k"]
        except KeyError:
            raise ValueError("no cause") from None
    except ValueError as e:
        a = (e.__cause__ is None, e.__suppress_context__, type(e.__context__).__name__)
    try:
        try:
            [][0]  # noqa: PLE0643
        except IndexError:
            raise TypeError("implicit")
    except TypeError as e:
        b = (e.__cause__ is None, e.__suppress_context__, type(e.__context__).__name__)
    return x * 2, a, b


class CodedError(Exception):
    def __init__(self, code):
        super().__init__(f"code {code}")
        self.code = code


def _raise_coded(code):
    raise CodedError(code)


def t_user_exception(x):
    try:
        _raise_coded(3)
    except CodedError as e:
        return x * e.code, str(e), e.args


def t_bare_raise_in_nested_handler(x):
    try:
        try:
            raise KeyError("first")
        except KeyError:
            try:
                raise ValueError("second")
            except ValueError:
                pass
            raise  # re-raises KeyError("first"), the one being handled
    except KeyError as e:
        return x + len(e.args[0])


def t_generator_raising(x):
    def gen():
        yield 1.0
        raise ValueError("from generator")

    total = x
    try:
        for v in gen():
            total = total + v
    except ValueError:
        total = total * 10
    return total


@pytest.mark.parametrize("fn,make", [
    (t_else_finally, lambda: (r(3),)),
    (t_raise_caught, lambda: (r(3),)),
    (t_dict_miss, lambda: (r(3),)),
    (t_loop_handlers, lambda: (r(3),)),
    (t_attribute_error, lambda: (r(3),)),
    (t_index_error, lambda: (r(3),)),
    (t_next_exhausted, lambda: (r(3),)),
    (t_finally_return, lambda: (r(3),)),
    (t_except_tuple_and_order, lambda: (r(3),)),
    (t_nested_frames, lambda: (r(3),)),
    (t_caught_in_callee, lambda: (r(3),)),
    (t_reraise, lambda: (r(3),)),
    (t_raise_from, lambda: (r(3),)),
    (t_raise_from_none_and_context, lambda: (r(3),)),
    (t_user_exception, lambda: (r(3),)),
    (t_bare_raise_in_nested_handler, lambda: (r(3),)),
    (t_generator_raising, lambda: (r(3),)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_one_graph_matching_eager(fn, make):
    check(fn, *make(), graphs=1, breaks=0, compiles=1)


# ---- exceptions that escape: the frame runs eagerly and raises -----------------------------

def t_escapes(x):
    y = x + 1
    if y.shape[0] == 3:
        raise ValueError(f"escaped with {y.shape[0]} items")
    return y


def t_escapes_from_callee(x):
    y = x * 2
    return _middle(y, [])


def t_escapes_after_handler(x):
    try:
        {}["k"]
    except KeyError:
        x = x + 1
        raise


@pytest.mark.parametrize("fn,error,message", [
    (t_escapes, ValueError, "escaped with 3 items"),
    (t_escapes_from_callee, KeyError, "deep"),
    (t_escapes_after_handler, KeyError, "k"),
])
def test_unhandled_exception_raises_eagerly(fn, error, message):
    compiled = strict(fn)
    for _ in range(2):
        with pytest.raises(error) as eager:
            fn(r(3))
        with pytest.raises(error) as got:
            compiled(r(3))
        assert str(got.value) == str(eager.value)
        assert message in str(got.value)
    # before: the prefix up to the raising root instruction was compiled, that instruction
    # ran eagerly. Now the whole call runs eagerly (one guarded eager entry, hit by the
    # second call), as do the callees it runs (each its own frame, which raises too)
    stats = compiled.stats
    assert stats.graphs == 0 and [s.eager for s in compiled.segments[0]] == [True]
    assert stats.compiles == stats.graph_breaks == len(compiled.breaks)
    assert stats.eager_fallback_calls == 2 * stats.compiles
    assert all(b.reason.startswith(
        f"the frame runs eagerly: {error.__name__} raised during capture and not handled "
        "in the compiled function") for b in compiled.breaks)


def t_break_inside_handler(x):
    y = x + 1
    try:
        {}["k"]
    except KeyError:
        print("handled")  # a break while the exception is handled
        y = y * 2
        try:
            raise
        except KeyError as e:
            y = y + len(e.args[0])
    return y


def test_break_inside_an_except_block(capsys):
    # the break moves to `{}["k"]`; the handler then starts a segment, which breaks again
    compiled = check(t_break_inside_handler, r(3), graphs=2, breaks=2, compiles=3, calls=3)
    assert "print" in compiled.breaks[0].reason
    assert "runs eagerly" in compiled.breaks[0].reason


# ---- guards: the handler's branch depends on the lookup that failed ----------------------

def t_dict_arg(x, d):
    try:
        v = d["scale"]
    except KeyError:
        v = 1.0
    return x * v


CONFIG: dict[str, float] = {}


def t_global_dict(x):
    try:
        v = CONFIG["scale"]
    except KeyError:
        v = -1.0
    return x * v


def test_dict_key_added_later_recompiles():
    compiled = strict(t_dict_arg)
    x = r(3)
    torch.testing.assert_close(compiled(x, {}), x)
    torch.testing.assert_close(compiled(x, {"scale": 3.0}), x * 3.0)
    torch.testing.assert_close(compiled(x, {}), x)
    assert compiled.stats.compiles == 2 and compiled.stats.graph_breaks == 0

    compiled = strict(t_global_dict)
    torch.testing.assert_close(compiled(x), -x)
    CONFIG["scale"] = 5.0
    try:
        torch.testing.assert_close(compiled(x), x * 5.0)
    finally:
        CONFIG.clear()
    torch.testing.assert_close(compiled(x), -x)
    assert compiled.stats.compiles == 2 and compiled.stats.graph_breaks == 0


class Environment(Mapping):
    """Like ``os.environ``: ``__getitem__`` raises KeyError, ``Mapping.get`` catches it."""

    def __init__(self, data: dict[str, str]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> str:
        if key not in self._data:
            raise KeyError(key) from None
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


ENV = Environment({"OTHER": "1"})


def t_environment(x):
    flag = ENV.get("EMBER_TEST_FLAG")
    if flag is None:
        return x + 1
    return x * int(flag)


def test_mapping_get_on_custom_mapping():
    compiled = check(t_environment, r(3), graphs=1, breaks=0, compiles=1)
    x = r(3)
    ENV._data["EMBER_TEST_FLAG"] = "4"
    try:
        torch.testing.assert_close(compiled(x), x * 4)
    finally:
        del ENV._data["EMBER_TEST_FLAG"]
    torch.testing.assert_close(compiled(x), x + 1)
    assert compiled.stats.compiles == 2 and compiled.stats.graph_breaks == 0
    assert "raises(" in compiled.guard_text()


class Options:
    pass


OPTIONS = Options()


def t_attribute_guard(x):
    try:
        k = OPTIONS.factor
    except AttributeError:
        k = 1.0
    return x * k


def test_attribute_added_later_recompiles():
    compiled = strict(t_attribute_guard)
    x = r(3)
    torch.testing.assert_close(compiled(x), x)
    OPTIONS.factor = 7.0
    try:
        torch.testing.assert_close(compiled(x), x * 7.0)
    finally:
        del OPTIONS.factor
    assert compiled.stats.compiles == 2 and compiled.stats.graph_breaks == 0


# ---- what user handlers never see ----------------------------------------------------------

def t_item_in_try(x):
    try:
        n = x.sum().item()  # needs real data: a graph break, not an exception
    except Exception:  # noqa: BLE001 - what these cases are about
        n = -1.0
    return x * n


def t_nonzero_in_try(x):
    try:
        n = x.nonzero().shape[0]  # data-dependent shape: a fake-tensor limitation
    except Exception:  # noqa: BLE001 - what these cases are about
        n = -1
    return x * n


# NOTE: nonzero breaks only without symbolic shapes (they give it an unbacked size)
@pytest.mark.parametrize("fn,graphs", [(t_item_in_try, 2), (t_nonzero_in_try, 1)])
def test_user_except_never_swallows_a_break(fn, graphs):
    compiled = check(fn, r(4), graphs=graphs, breaks=1, dynamic=False)
    assert "raised during capture" not in compiled.breaks[0].reason


def t_pure_call_in_try(x):
    try:
        k = math.sqrt(4.0)
    except Exception:  # noqa: BLE001 - what these cases are about
        k = -1.0
    return x * k


def test_user_except_never_swallows_an_internal_error(monkeypatch):
    # an error inside Ember's own code (here: a failing attribute read in a Source)
    # while capturing the call: a graph break, never the program's exception
    def broken_note_made(self: CaptureContext, value: Any) -> None:
        LocalSource("x").fetch(None, None)

    monkeypatch.setattr(CaptureContext, "note_made", broken_note_made)
    compiled = check(t_pure_call_in_try, r(3), graphs=1, breaks=1)
    assert "internal error of Ember" in compiled.breaks[0].reason


def test_limitation_rules():
    with pytest.raises(AttributeError) as internal:
        LocalSource("x").fetch(None, None)
    assert capture_limitation(internal.value) == "an internal error of Ember"
    assert capture_limitation(GraphBreak("x")) == "an exception of Ember's own"
    from torch._subclasses.fake_tensor import DynamicOutputShapeException

    limit = DynamicOutputShapeException(torch.ops.aten.nonzero.default)
    assert capture_limitation(limit) == "a fake-tensor limitation"
    with pytest.raises(KeyError) as program:
        {}["k"]
    assert capture_limitation(program.value) is None


# ---- exceptions as values, except*, hasattr/getattr guards -------------------------------

def t_returns_caught(x):
    try:
        {}["k"]
    except KeyError as e:
        caught = e
    return x + 1, caught


def test_caught_exception_is_new_at_each_call():
    compiled = strict(t_returns_caught)
    x = r(3)
    (y1, e1), (_, e2) = compiled(x), compiled(x)
    torch.testing.assert_close(y1, x + 1)
    assert type(e1) is KeyError and e1.args == ("k",) and e2.args == ("k",)
    assert e1 is not e2  # eager makes a new KeyError at every call
    assert compiled.stats.graph_breaks == 0 and compiled.stats.compiles == 1


def t_except_star(x):
    try:
        raise ExceptionGroup("group", [ValueError("v")])
    except* ValueError:
        x = x + 1
    return x


def test_except_star_runs_eagerly():
    compiled = check(t_except_star, r(3), graphs=0, breaks=1)
    assert "CHECK_EG_MATCH" in compiled.breaks[0].reason


def t_hasattr_getattr(x):
    if hasattr(OPTIONS, "factor"):
        return x * OPTIONS.factor
    return x + getattr(OPTIONS, "offset", 5.0)


def test_hasattr_and_getattr_default_guard_the_missing_attribute():
    compiled = strict(t_hasattr_getattr)
    x = r(3)
    torch.testing.assert_close(compiled(x), x + 5.0)
    OPTIONS.factor = 3.0
    try:
        torch.testing.assert_close(compiled(x), x * 3.0)
    finally:
        del OPTIONS.factor
    OPTIONS.offset = 1.0
    try:
        torch.testing.assert_close(compiled(x), x + 1.0)
    finally:
        del OPTIONS.offset
    assert compiled.stats.compiles == 3 and compiled.stats.graph_breaks == 0


def t_delete_then_probe(x, obj):
    del obj.tag
    return x * (2.0 if hasattr(obj, "tag") else 3.0)


def test_attribute_deleted_by_the_capture_is_not_guarded_missing():
    compiled = strict(t_delete_then_probe)
    for _ in range(3):
        obj = Options()
        obj.tag = "t"
        x = r(3)
        torch.testing.assert_close(compiled(x, obj), x * 3.0)
        assert not hasattr(obj, "tag")
    assert compiled.stats.compiles == 1
