"""A backward pass inside a function compiled with the trace capture is refused with an
error naming the user's line (``trace_refusals.RefuseAutograd``). Before, it ran once at
capture time on fake tensors: the first call left a fake tensor as each parameter's
``.grad``, and later calls computed no gradient at all, silently."""

from __future__ import annotations

import ember.frontend as ef
import pytest
import torch
from ember.frontend.trace import CaptureError


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(3, 1)


@pytest.mark.parametrize("how", ["tensor", "autograd.backward", "autograd.grad"])
def test_a_backward_pass_inside_a_trace_is_refused_at_its_line(how: str) -> None:
    model = _model()

    def step(x: torch.Tensor) -> torch.Tensor:
        loss = model(x).sum()
        if how == "tensor":
            loss.backward()
        elif how == "autograd.backward":
            torch.autograd.backward([loss])
        else:
            torch.autograd.grad(loss, [model.weight])
        return loss

    compiled = ef.compile(step, options={"capture": "trace"})
    with pytest.raises(CaptureError, match=r"could not trace .*step at .*test_trace_refusals"
                                           r"\.py:\d+ in step"):
        compiled(torch.ones(2, 3))
    assert model.weight.grad is None  # nothing ran: no fake tensor left behind


def test_the_forward_alone_is_traced_and_backward_outside_works() -> None:
    model = _model()
    compiled = ef.compile(lambda x: model(x).sum(), options={"capture": "trace"})
    for _ in range(2):
        model.zero_grad()
        compiled(torch.ones(2, 3)).backward()
        torch.testing.assert_close(model.weight.grad, torch.full((1, 3), 2.0))


GLOBAL_STATE = torch.zeros(3)


def _closure_writer() -> object:
    state = torch.zeros(3)

    def h(x: torch.Tensor) -> torch.Tensor:
        state.mul_(2)
        return x + state
    return h


class _PlainAttribute(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cache = torch.zeros(3)  # not a buffer: a constant of a trace

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.cache[1:].add_(1)
        return x + self.cache


def _global_writer(x: torch.Tensor) -> torch.Tensor:
    GLOBAL_STATE.add_(x)
    return x * 2


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize(("make", "line", "name"), [
    (lambda: _global_writer, r"GLOBAL_STATE\.add_\(x\)", "the global 'GLOBAL_STATE'"),
    (_closure_writer, r"state\.mul_\(2\)", "the closure variable 'state'"),
    (_PlainAttribute, r"self\.cache\[1:\]\.add_\(1\)", "the attribute self.cache"),
])
def test_an_in_place_write_into_a_python_tensor_names_the_line_and_the_tensor(
        backend: str, make: object, line: str, name: str) -> None:
    # before: aot's IR error asking to make '_tensor_constant0' a buffer (the eager
    # backend wrote into the graph's copy)
    fn = make()  # type: ignore[operator]
    compiled = ef.compile(fn, backend=backend, options={"capture": "trace"})
    with pytest.raises(CaptureError, match=rf"test_trace_refusals\.py:\d+ in \w+: {line}\n"
                                           rf"  it writes in place into {name}(.|\n)*strict"):
        compiled(torch.ones(3))
    before = GLOBAL_STATE.clone()
    if fn is _global_writer:  # the strict capture writes it back, at every call
        strict = ef.compile(fn, backend=backend)
        strict(torch.ones(3))
        strict(torch.ones(3))
        torch.testing.assert_close(GLOBAL_STATE, before + 2)


def test_sizes_in_a_traced_result_are_this_call_s() -> None:
    # before: with a symbolic size the trace returned the SymInt itself (s0) and the
    # text 'torch.Size([s0, s1])' at every later call
    def f(x: torch.Tensor) -> tuple[torch.Tensor, int, int, bool, str]:
        return x * 2, x.shape[0], x.size(1) * 2, x.shape[0] > 3, f"{x.shape}"

    compiled = ef.compile(f, backend="eager", options={"capture": "trace"})
    for shape in [(2, 3), (4, 6), (5, 6), (5, 7)]:
        x = torch.ones(*shape)
        out = compiled(x)
        assert out[1:] == f(x)[1:] and type(out[1]) is int


def test_text_of_a_marked_dimension_is_refused() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, str]:
        return x * 2, f"rows={x.shape[0]}"

    x = torch.ones(4, 3)
    ef.mark_dynamic(x, 0)
    with pytest.raises(CaptureError, match=r"text made of the symbolic size x\.size\(0\) "
                                           r"\(s\d+\): 'rows=s\d+'"):
        ef.compile(f, backend="eager", options={"capture": "trace"})(x)


@pytest.mark.parametrize("read", [lambda x: x.tolist(), lambda x: (x * 2, x.sum().item())])
def test_a_number_read_from_the_data_in_the_result_is_refused_clearly(read: object) -> None:
    # before: torch's GuardOnDataDependentSymNode about zuf0, naming no user code
    with pytest.raises(CaptureError, match=r"the result holds a Python number read from "
                                           r"a tensor's data \(\.item\(\), \.tolist\(\)\)"):
        ef.compile(read, backend="eager", options={"capture": "trace"})(torch.ones(3))


def _set_data(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x.data = y
    return x + 1


def _intermediate_requires_grad(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x * 2).requires_grad_()


def _input_requires_grad(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x.requires_grad = True
    return x * 2


@pytest.mark.parametrize(("fn", "message"), [
    (_set_data, r"`tensor.data = \.\.\.` inside the traced function"),
    (_intermediate_requires_grad, "requires_grad changed inside the traced function"),
    (_input_requires_grad, "requires_grad changed inside the traced function"),
])
def test_what_the_trace_cannot_record_is_refused_at_its_line(fn: object, message: str) -> None:
    # before: each was ignored silently (x + 1 read x's old data; requires_grad stayed off)
    compiled = ef.compile(fn, options={"capture": "trace"})
    x, y = torch.zeros(3), torch.ones(3)
    with pytest.raises(CaptureError, match=r"test_trace_refusals\.py:\d+ in _[a-z_]+(.|\n)*"
                                           + message):
        compiled(x, y)
    assert not x.requires_grad
    torch.testing.assert_close(ef.compile(fn)(x, y), fn(torch.zeros(3), torch.ones(3)))


def test_requires_grad_set_to_what_it_is_passes() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).requires_grad_(False) + 1

    torch.testing.assert_close(ef.compile(f, options={"capture": "trace"})(torch.ones(2)),
                               f(torch.ones(2)))


def test_sizes_in_a_traced_result_stay_torch_sizes() -> None:
    # before: torch's pytree rebuilt each torch.Size as a plain tuple
    def f(x: torch.Tensor) -> dict[str, object]:
        return {"shape": x.shape, "rest": [x.size()[1:], x + 1]}

    out = ef.compile(f, options={"capture": "trace"})(torch.ones(2, 3))
    assert type(out["shape"]) is torch.Size and out["shape"] == (2, 3)
    assert type(out["rest"][0]) is torch.Size and out["rest"][0] == (3,)


def test_a_tensor_returned_twice_is_one_object() -> None:
    # before: two graph outputs, so `a is b` was False where eager (and strict) say True
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        y = x * 2
        return y, y, {"again": y}

    x = torch.ones(3, requires_grad=True)
    a, b, d = ef.compile(f, options={"capture": "trace"})(x)
    assert a is b and d["again"] is a
    a.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((3,), 2.0))


def _index_past_the_end(x: torch.Tensor) -> torch.Tensor:
    return x[5]


def _own_check(x: torch.Tensor) -> torch.Tensor:
    if x.dim() != 3:
        raise ValueError("expected a 3-d input")
    return x


def _missing_key(x: torch.Tensor) -> torch.Tensor:
    return {"a": x}["b"]


@pytest.mark.parametrize(("fn", "kind"), [(_index_past_the_end, IndexError),
                                          (_own_check, ValueError), (_missing_key, KeyError)])
def test_an_exception_of_the_traced_code_keeps_its_kind(fn: object, kind: type) -> None:
    # before: a plain CaptureError (a RuntimeError), past the caller's `except IndexError`
    compiled = ef.compile(fn, options={"capture": "trace"})
    with pytest.raises(kind) as caught:
        compiled(torch.ones(2))
    assert isinstance(caught.value, CaptureError)
    assert str(caught.value).startswith("could not trace")  # KeyError's quotes are not added
