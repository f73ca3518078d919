"""CUDA graphs bookkeeping, on the CPU: warm-up, recording per input shape, static
inputs, outputs (copies, or views revoked at the next replay), parameters moving, the shape limit, saved tensors in use and
the step marker, one pool per program.

The capture is emulated (:class:`EmulatedCapture`): "recording" runs the graph once and
keeps its results; "replaying" runs it again and writes the new results over the kept
ones, as a CUDA graph replay writes into the memory it recorded. Everything above the
capture (``GraphedExecutor``, ``ModelGraphs``, ``StaticInputs``, ``ProgramCallable``,
autograd) is the code that runs on the GPU. The GPU itself: ``integration_tests/
test_cuda_graphs_replay.py`` (marked ``cuda``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from ember.runtime.callable import ProgramCallable
from ember.runtime.config import patch
from ember.runtime.cudagraphs import CudaGraphs, OverwrittenSavedTensorError, mark_step_begin
from ember.runtime.cudagraphs_policy import (
    RECORDING_FAILED,
    SAVED_IN_USE,
    SHAPE_LIMIT,
    STORAGE_CHANGES,
)
from ember.runtime.cudagraphs_pool import current_step
from ember.runtime.ir import InputKind, InputSpec, Program
from ember.runtime.pipeline import compile_program
from ember.runtime.tracing import GraphRecorder

pytest.importorskip("ember.inductor")


class EmulatedCapture:
    """A CPU stand-in for ``CudaCapture`` (module docstring)."""

    device_type = "cpu"

    def __init__(self) -> None:
        self.pools: list[object] = []
        self.recorded_in: list[object] = []

    def new_pool(self) -> object:
        pool = object()
        self.pools.append(pool)
        return pool

    def record(self, run: Callable[[], list[Any]],
               pool: object) -> tuple[Callable[[], None], list[Any]]:
        self.recorded_in.append(pool)
        # NOTE: a CUDA capture computes nothing; running the graph here applies its
        # in-place writes to the static inputs (a mutated input the kernels write) once
        # more than the replays do, so the inputs are put back as they were
        inputs = [t for cell in run.__closure__ or ()
                  for t in getattr(cell.cell_contents, "tensors", ())
                  if isinstance(t, torch.Tensor)]
        before = [t.clone() for t in inputs]
        outputs = run()
        with torch.no_grad():
            for t, old in zip(inputs, before):
                t.copy_(old)

        def replay() -> None:
            for kept, new in zip(outputs, run()):
                if isinstance(kept, torch.Tensor):
                    kept.copy_(new)

        return replay, outputs


def _record(fn: Callable[..., torch.Tensor], inputs: list[torch.Tensor],
            params: dict[str, torch.Tensor], dynamic: bool = False) -> Program:
    rec = GraphRecorder(dynamic=dynamic)
    fakes = [rec.add_input(x, InputSpec(f"x{i}"), **({"dynamic_dims": {0: (2, None)}}
                                                      if dynamic else {}))
             for i, x in enumerate(inputs)]
    fakes += [rec.add_input(p, InputSpec(n, InputKind.PARAMETER, n)) for n, p in params.items()]
    with rec:
        out = fn(*fakes)
    return rec.finish([out])


def _linear_tanh(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ w + b)


@pytest.fixture(scope="module")
def linear() -> tuple[Program, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    w = torch.randn(4, 3, requires_grad=True)
    b = torch.randn(3, requires_grad=True)
    program = _record(_linear_tanh, [torch.randn(2, 4)], {"w": w, "b": b})
    return compile_program(program, "inductor").program, w, b


def _graphed(program: Program) -> tuple[ProgramCallable, CudaGraphs, EmulatedCapture]:
    capture = EmulatedCapture()
    fn = ProgramCallable(program)
    return fn, fn.enable_cuda_graphs(capture), capture


def test_inference_warms_up_records_once_then_replays(
        linear: tuple[Program, torch.Tensor, torch.Tensor]) -> None:
    program, w, b = linear
    fn, graphs, capture = _graphed(program)
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(2, 4)
            (out,) = fn([x, w, b])
            torch.testing.assert_close(out, _linear_tanh(x, w, b))
    stats = graphs.stats
    assert (stats.recordings, stats.replays, dict(stats.plain_calls)) == (1, 3, {"warm-up": 1})
    assert len(capture.pools) == 1


def test_outputs_are_copied_out_so_an_older_one_stays_right(
        linear: tuple[Program, torch.Tensor, torch.Tensor]) -> None:
    program, w, b = linear
    fn, graphs, _ = _graphed(program)
    with torch.no_grad():
        xs = [torch.randn(2, 4) for _ in range(4)]
        outs = [fn([x, w, b])[0] for x in xs]
    assert graphs.stats.replays == 3
    for x, out in zip(xs, outs):  # every one still holds its own call's values
        torch.testing.assert_close(out, _linear_tanh(x, w, b))
    assert len({o.data_ptr() for o in outs}) == 4


def _revocable(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A torch that can revoke a storage (the CUDA build's), emulated: the addresses of
    the storages revoked, in order (a real revocation makes every read raise)."""
    from ember.runtime import _torch

    revoked: list[int] = []
    monkeypatch.setattr(_torch, "can_revoke_storage", lambda: True)
    monkeypatch.setattr(_torch, "revoke_storage",
                        lambda storage, message: revoked.append(storage.data_ptr()))
    return revoked


def test_with_revocable_storages_outputs_are_views_revoked_before_the_next_replay(
        linear: tuple[Program, torch.Tensor, torch.Tensor],
        monkeypatch: pytest.MonkeyPatch) -> None:
    program, w, b = linear
    revoked = _revocable(monkeypatch)
    fn, graphs, _ = _graphed(program)
    with torch.no_grad():
        fn([torch.randn(2, 4), w, b])  # warm-up: the plain code's own result
        x, y = torch.randn(2, 4), torch.randn(2, 4)
        (first,) = fn([x, w, b])  # recorded, replayed: a view of the static result
        torch.testing.assert_close(first, _linear_tanh(x, w, b))
        assert revoked == []
        (second,) = fn([y, w, b])
    assert first.data_ptr() == second.data_ptr()  # no copy
    assert first.untyped_storage()._cdata != second.untyped_storage()._cdata
    assert revoked == [first.data_ptr()]  # the first call's storage, before the replay
    torch.testing.assert_close(second, _linear_tanh(y, w, b))
    with patch(cudagraph_copy_outputs=True), torch.no_grad():  # the user asked for copies
        (third,) = fn([x, w, b])
    assert third.data_ptr() != second.data_ptr() and len(revoked) == 2
    assert graphs.stats.replays == 3


def test_an_output_passed_back_in_is_read_before_it_is_revoked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    revoked = _revocable(monkeypatch)

    def step(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * 2

    program = compile_program(_record(step, [torch.randn(3)], {}), "inductor").program
    fn, _, _ = _graphed(program)
    x = expected = torch.randn(3)
    with torch.no_grad():
        for _ in range(5):  # x = f(x): each call reads the previous call's output
            (x,) = fn([x])
            expected = step(expected)
            torch.testing.assert_close(x, expected)
    assert len(revoked) == 3


@pytest.mark.parametrize("revocable", [False, True], ids=["copies", "views"])
def test_training_three_steps_match_eager_gradients(
        linear: tuple[Program, torch.Tensor, torch.Tensor], revocable: bool,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # with views, gradients are copies all the same (autograd keeps them as .grad)
    program, w0, b0 = linear
    revoked = _revocable(monkeypatch) if revocable else []
    fn, graphs, capture = _graphed(program)
    w, b = w0.detach().clone().requires_grad_(), b0.detach().clone().requires_grad_()
    we, be = w0.detach().clone().requires_grad_(), b0.detach().clone().requires_grad_()
    for _ in range(3):
        x = torch.randn(2, 4)
        (fn([x, w, b])[0] ** 2).sum().backward()
        torch.autograd.backward((_linear_tanh(x, we, be) ** 2).sum())
        torch.testing.assert_close((w.grad, b.grad), (we.grad, be.grad))
        with torch.no_grad():
            for p, q in ((w, we), (b, be)):
                assert p.grad is not None and q.grad is not None
                p -= 0.1 * p.grad  # in place: the recorded storage stays valid
                q -= 0.1 * q.grad
                p.grad = q.grad = None
    assert set(graphs.graphs) == {"forward", "backward"}
    assert graphs.stats.recordings == 2 and graphs.stats.replays == 4
    assert capture.recorded_in == [capture.pools[0]] * 2  # one pool for both graphs
    assert len(revoked) == (1 if revocable else 0)  # the forward's output, third step


def test_a_parameter_in_new_storage_is_recorded_again(
        linear: tuple[Program, torch.Tensor, torch.Tensor]) -> None:
    program, w, b = linear
    fn, graphs, _ = _graphed(program)
    x = torch.randn(2, 4)
    with torch.no_grad():
        fn([x, w, b])
        fn([x, w, b])
        w2 = w.detach() * 2  # what load_state_dict(assign=True) or .to() leaves
        (out,) = fn([x, w2, b])
        torch.testing.assert_close(out, _linear_tanh(x, w2, b))
        (out,) = fn([x, w2, b])
        torch.testing.assert_close(out, _linear_tanh(x, w2, b))
    assert (graphs.stats.recordings, graphs.stats.rerecords, graphs.stats.replays) == (2, 1, 3)


def test_a_parameter_that_keeps_moving_runs_plain(
        linear: tuple[Program, torch.Tensor, torch.Tensor]) -> None:
    program, w, b = linear
    fn, graphs, _ = _graphed(program)
    x = torch.randn(2, 4)
    with torch.no_grad(), patch(logs="cudagraphs"):
        fn([x, w, b])
        for i in range(12):
            (out,) = fn([x, w.detach() + i, b])
            torch.testing.assert_close(out, _linear_tanh(x, w + i, b))
    assert graphs.stats.plain_calls[STORAGE_CHANGES] > 0
    assert ("forward", STORAGE_CHANGES) in graphs.skips.seen


def _accumulate(x: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
    acc.add_(x)
    return acc * 2


def test_input_mutations_are_copied_back_after_a_replay() -> None:
    program = compile_program(_record(_accumulate, [torch.randn(3), torch.zeros(3)], {}),
                              "inductor").program
    fn, graphs, _ = _graphed(program)
    acc, expected = torch.zeros(3), torch.zeros(3)
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(3)
            (out,) = fn([x, acc])
            expected += x
            torch.testing.assert_close((acc, out), (expected, expected * 2))
    assert graphs.stats.replays == 3


def test_one_recording_per_shape_up_to_the_limit() -> None:
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2 + 1

    program = compile_program(_record(double, [torch.randn(4, 3)], {}, dynamic=True),
                              "inductor").program
    assert program.forward.symbols
    with patch(cudagraph_shapes=2):  # EMBER_CUDAGRAPH_SHAPES=2
        fn, graphs, _ = _graphed(program)
    with torch.no_grad(), patch(logs="cudagraphs"):
        for n in (4, 4, 5, 5, 6, 6, 4):
            x = torch.randn(n, 3)
            torch.testing.assert_close(fn([x])[0], double(x))
    assert graphs.stats.recordings == 2 and graphs.stats.replays == 3
    assert graphs.stats.plain_calls == {"warm-up": 2, SHAPE_LIMIT: 2}


def test_forward_again_before_backward_runs_plain_and_both_gradients_are_right(
        linear: tuple[Program, torch.Tensor, torch.Tensor]) -> None:
    program, w, b = linear
    fn, graphs, _ = _graphed(program)
    for _ in range(2):  # warm-up and recording
        x = torch.randn(2, 4)
        fn([x, w, b])[0].sum().backward()
    w.grad = b.grad = None
    x1, x2 = torch.randn(2, 4), torch.randn(2, 4)
    loss = fn([x1, w, b])[0].sum() + 2 * fn([x2, w, b])[0].sum()  # a siamese step
    loss.backward()
    we, be = w.detach().requires_grad_(), b.detach().requires_grad_()
    torch.autograd.backward(_linear_tanh(x1, we, be).sum() + 2 * _linear_tanh(x2, we, be).sum())
    torch.testing.assert_close((w.grad, b.grad), (we.grad, be.grad))
    # the second forward runs plain, and so does its backward (its saved tensors are
    # not where the recorded backward reads them); the first pair replays
    assert graphs.stats.plain_calls[SAVED_IN_USE] == 2
    assert graphs.stats.replays == 4
    w.grad = b.grad = None


def test_step_marker_releases_saved_tensors_and_a_late_backward_says_so(
        linear: tuple[Program, torch.Tensor, torch.Tensor]) -> None:
    program, w, b = linear
    fn, graphs, _ = _graphed(program)
    for _ in range(2):
        fn([torch.randn(2, 4), w, b])[0].sum().backward()
    kept = fn([torch.randn(2, 4), w, b])[0].sum()  # a forward never run backward
    mark_step_begin()
    replays = graphs.stats.replays
    fn([torch.randn(2, 4), w, b])[0].sum().backward()  # replays over kept's saved tensors
    assert graphs.stats.replays == replays + 2
    with pytest.raises(OverwrittenSavedTensorError, match="mark_step_begin"):
        kept.backward()
    w.grad = b.grad = None


def test_a_forward_kept_without_the_marker_only_costs_plain_calls(
        linear: tuple[Program, torch.Tensor, torch.Tensor]) -> None:
    program, w, b = linear
    fn, graphs, _ = _graphed(program)
    for _ in range(2):
        fn([torch.randn(2, 4), w, b])[0].sum().backward()
    x = torch.randn(2, 4)
    kept = fn([x, w, b])[0].sum()
    fn([torch.randn(2, 4), w, b])[0].sum().backward()
    w.grad = b.grad = None
    kept.backward()
    we, be = w.detach().requires_grad_(), b.detach().requires_grad_()
    torch.autograd.backward(_linear_tanh(x, we, be).sum())
    torch.testing.assert_close((w.grad, b.grad), (we.grad, be.grad))
    assert graphs.stats.plain_calls[SAVED_IN_USE] >= 1
    w.grad = b.grad = None


def test_a_capture_torch_refuses_runs_plain_and_says_why(
        linear: tuple[Program, torch.Tensor, torch.Tensor],
        capsys: pytest.CaptureFixture[str]) -> None:
    class Refusing(EmulatedCapture):
        def record(self, run: Callable[[], list[Any]],
                   pool: object) -> tuple[Callable[[], None], list[Any]]:
            raise RuntimeError("operation not permitted when stream is capturing\nmore")

    program, w, b = linear
    fn = ProgramCallable(program)
    graphs = fn.enable_cuda_graphs(Refusing())
    x = torch.randn(2, 4)
    with torch.no_grad(), patch(logs="cudagraphs"):
        for _ in range(3):
            torch.testing.assert_close(fn([x, w, b])[0], _linear_tanh(x, w, b))
    assert graphs.stats.plain_calls == {"warm-up": 1, RECORDING_FAILED: 2}
    assert ("graph 'forward' runs without CUDA graphs: recording failed: operation not "
            "permitted when stream is capturing\n") in capsys.readouterr().err


def test_the_step_marker_is_public_and_counts_steps() -> None:
    import ember.runtime

    before = current_step()
    ember.runtime.cudagraph_mark_step_begin()
    mark_step_begin()
    assert current_step() == before + 2


def _batch_norm_relu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, mean: torch.Tensor,
                     var: torch.Tensor) -> torch.Tensor:
    # scaled by w again: the backward reads w itself, so the weight is saved (without it
    # the min cut saves the ReLU's mask, as many bytes as w and b)
    return torch.nn.functional.batch_norm(x, mean, var, w, b, training=True).relu() * w


def test_training_with_buffer_mutations_and_a_saved_weight() -> None:
    """Running statistics (BUFFER inputs the forward mutates) are copied back after each
    replay; the saved weights reach the backward graph in place."""
    torch.manual_seed(0)
    w, b = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    mean, var = torch.zeros(4), torch.ones(4)
    rec = GraphRecorder()
    fakes = [rec.add_input(torch.randn(8, 4), InputSpec("x"))]
    fakes += [rec.add_input(t, InputSpec(n, kind, n)) for n, t, kind in (
        ("w", w, InputKind.PARAMETER), ("b", b, InputKind.PARAMETER),
        ("mean", mean, InputKind.BUFFER), ("var", var, InputKind.BUFFER))]
    with rec:
        out = _batch_norm_relu(*fakes)
    fn, graphs, _ = _graphed(compile_program(rec.finish([out]), "inductor").program)
    we, be = w.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    mean_e, var_e = mean.clone(), var.clone()
    for _ in range(4):
        x = torch.randn(8, 4)
        fn([x, w, b, mean, var])[0].square().sum().backward()
        torch.autograd.backward(_batch_norm_relu(x, we, be, mean_e, var_e).square().sum())
        torch.testing.assert_close((w.grad, b.grad, mean, var), (we.grad, be.grad, mean_e, var_e))
        w.grad = b.grad = we.grad = be.grad = None
    assert (graphs.stats.recordings, graphs.stats.replays) == (2, 6)
    backward = graphs.graphs["backward"]
    (recording,) = backward.recordings.values()
    # saved x (the forward's static buffer), saved w and b in place; tangents copied
    assert [r.value for r in recording.inputs.roles[:3]] == ["pool_output", "in_place",
                                                             "in_place"]


def test_a_mutated_input_at_a_stable_address_stays_in_place_until_it_moves() -> None:
    """A mutated input passed again and again (a module's buffer) is read where it is;
    once another tensor comes, the graph is recorded again with that input copied.
    Inputs the graph does not mutate are always copied."""
    program = compile_program(_record(_accumulate, [torch.randn(3), torch.zeros(3)], {}),
                              "inductor").program
    fn, graphs, _ = _graphed(program)
    x, acc, expected = torch.randn(3), torch.zeros(3), torch.zeros(3)
    with torch.no_grad():
        for _ in range(3):
            fn([x, acc])
            expected += x
        torch.testing.assert_close(acc, expected)
        (recording,) = graphs.graphs["forward"].recordings.values()
        assert recording.stable == {1}
        assert [r.value for r in recording.inputs.roles] == ["copied", "in_place"]
        other = acc.clone()
        for _ in range(2):
            (out,) = fn([x, other])
        torch.testing.assert_close((other, out), (expected + 2 * x, (expected + 2 * x) * 2))
        (recording,) = graphs.graphs["forward"].recordings.values()
        assert recording.stable == set()
        assert [r.value for r in recording.inputs.roles] == ["copied", "copied"]
    assert (graphs.stats.recordings, graphs.stats.rerecords, graphs.stats.replays) == (2, 1, 4)