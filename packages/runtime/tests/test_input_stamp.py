"""The input stamp (``ember.runtime.input_stamp``): one C++ check that many tensors look as
on a call that passed a slower check, and ProgramCallable's aliasing check built on it
(a call at the stamped addresses with the stamped layouts skips the overlap sort). Every
aliasing the check catches is still caught once the stamp has answered calls."""

from __future__ import annotations

import weakref

import pytest
import torch
from ember.runtime.callable import ProgramCallable
from ember.runtime.input_stamp import MIN_TENSORS, InputStamp
from ember.runtime.ir import Program, parse_program

N = MIN_TENSORS + 2


def _counters_program(n: int = N) -> Program:
    """``a_i += 1`` for n inputs ``f32[4]`` (an optimizer's in-place writes)."""
    inputs = ", ".join(f"%a{i}: f32[4]{{1}} cpu" for i in range(n))
    body = "\n".join(f"  %n{i}: f32[4]{{1}} cpu = aten::add.Tensor(%a{i}, 1)"
                     for i in range(n))
    outs = ", ".join(f"%n{i}" for i in range(n))
    kinds = ", ".join(f"mutated_input a{i}" for i in range(n))
    return parse_program(f"program dialect=core-functional\n\ngraph forward({inputs}):\n"
                         f"{body}\n  return ({outs})  [{kinds}]\n")


def test_the_stamp_holds_for_the_same_metadata_and_pointers_only() -> None:
    xs = [torch.randn(4, 4) for _ in range(3)]
    stamp = InputStamp(pointers=True)
    assert not stamp.holds(*xs)
    stamp.learn(*xs)
    assert stamp.holds(*xs) and stamp.hits == 1
    changed = {
        "stride": xs[0].t().contiguous().t(),
        "dtype": xs[0].double(),
        "shape": torch.randn(2, 8),
        "requires_grad": xs[0].detach().clone().requires_grad_(),
        "type": torch.nn.Parameter(xs[0].clone(), requires_grad=False),
        "pointer": xs[0].clone(),  # same metadata, another address
        "not a tensor": 1.0,
    }
    for what, x in changed.items():
        assert not stamp.holds(x, *xs[1:]), what
    plain = InputStamp()  # without pointers: a copy at another address holds
    plain.learn(*xs)
    assert plain.holds(xs[0].clone(), *xs[1:])


def test_the_stamp_keeps_no_tensor_alive_and_turns_off_on_tensors_that_always_change(
) -> None:
    xs = [torch.randn(3) for _ in range(3)]
    stamp = InputStamp(pointers=True)
    stamp.learn(*xs)
    ref = weakref.ref(xs[0])
    del xs
    assert ref() is None
    for n in range(2, 7):
        ys = [torch.randn(n) for _ in range(3)]
        assert not stamp.holds(*ys)
        stamp.learn(*ys)
    assert stamp.off and not stamp.holds(*ys)


def _run(fn: ProgramCallable, xs: list[torch.Tensor], times: int = 3) -> None:
    for _ in range(times):
        before = [x.clone() for x in xs]
        fn(xs)
        for x, b in zip(xs, before):
            torch.testing.assert_close(x, b + 1)


def test_the_aliasing_check_skips_the_sort_while_the_inputs_are_stamped() -> None:
    fn = ProgramCallable(_counters_program())
    xs = [torch.zeros(4) for _ in range(N)]
    _run(fn, xs)
    stamp = fn._disjoint.stamp
    assert stamp.stamps == 1 and stamp.hits == 2


ALIASED = {
    # the same tensor twice
    "twice": lambda xs: xs[:3] + [xs[2]] + xs[4:],
    # a view of another input, overlapping it
    "view": lambda xs: xs[:3] + [xs[2][1:]] + xs[4:],
}


@pytest.mark.parametrize("how", sorted(ALIASED))
def test_inputs_that_share_memory_are_caught_after_the_stamp_answered(how: str) -> None:
    fn = ProgramCallable(_counters_program())
    xs = [torch.zeros(4) for _ in range(N)]
    _run(fn, xs)
    assert fn._disjoint.stamp.hits >= 1
    with pytest.raises(RuntimeError, match="shares memory with input"):
        fn(ALIASED[how](xs))


def test_same_pointers_with_strides_that_now_overlap_are_caught() -> None:
    # every input a 4-element slice of one storage, side by side: no bytes shared
    storage = torch.zeros(4 * N)
    xs = [storage[4 * i:4 * i + 4] for i in range(N)]
    fn = ProgramCallable(_counters_program())
    _run(fn, xs)
    assert fn._disjoint.stamp.hits >= 1
    # input 0 at the same address, but every other element: it now reaches into input 1
    spread = list(xs)
    spread[0] = storage.as_strided((4,), (2,), 0)
    with pytest.raises(RuntimeError, match="shares memory with input"):
        fn(spread)
    _run(fn, xs, times=1)  # the stamped inputs still run


def test_a_tensor_where_the_stamped_call_had_none_is_not_stamped() -> None:
    fn = ProgramCallable(_counters_program())
    xs = [torch.zeros(4) for _ in range(N)]
    _run(fn, xs)
    assert not fn._disjoint.holds(xs[:-1])  # another number of inputs
