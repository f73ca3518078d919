"""CUDA graphs on the GPU (``mode="reduce-overhead"``; issue 17 item 1): replay
correctness against eager over several calls, a kept output that a later replay
overwrote raising (a clone, or ``EMBER_CUDAGRAPH_COPY_OUTPUTS=1``, keeping its values),
input mutations, training (forward and backward graphs) against eager's gradients, a
parameter moved to new storage, one memory pool, random ops, and each refusal reason.

Marked ``cuda`` (skipped without a GPU). The bookkeeping itself is tested on the CPU
with an emulated capture: ``packages/runtime/tests/test_cudagraphs_replay.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.runtime.callable import ProgramCallable
from ember.runtime.config import patch
from ember.runtime.cudagraphs import CudaGraphs
from ember.runtime.cudagraphs_policy import (
    SHAPE_LIMIT,
    SYNCHRONIZING,
    cudagraph_skips,
)
from ember.runtime.cudagraphs_replay import CudaCapture
from ember.runtime.ir import InputKind, InputSpec, Program
from ember.runtime.pipeline import compile_program
from ember.runtime.tracing import GraphRecorder

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU"),
]


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


def _mlp(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor,
         w2: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x @ w1 + b1) @ w2


def _mlp_params(requires_grad: bool = False) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return {name: torch.randn(*shape, device="cuda").div_(8).requires_grad_(requires_grad)
            for name, shape in (("w1", (32, 64)), ("b1", (64,)), ("w2", (64, 16)))}


def _compiled(fn: Callable[..., torch.Tensor], inputs: list[torch.Tensor],
              params: dict[str, torch.Tensor], dynamic: bool = False) -> ProgramCallable:
    return compile_program(_record(fn, inputs, params, dynamic), "inductor",
                           mode="reduce-overhead")


def _stats(fn: ProgramCallable) -> tuple[int, int]:
    assert fn.cuda_graphs is not None
    return fn.cuda_graphs.stats.recordings, fn.cuda_graphs.stats.replays


def test_inference_replays_match_eager_with_new_input_values() -> None:
    params = _mlp_params()
    fn = _compiled(_mlp, [torch.randn(8, 32, device="cuda")], params)
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn(8, 32, device="cuda")
            torch.testing.assert_close(fn([x, *params.values()])[0], _mlp(x, *params.values()))
    assert _stats(fn) == (1, 4)


def test_a_kept_output_raises_once_a_later_replay_overwrote_it() -> None:
    params = _mlp_params()
    fn = _compiled(_mlp, [torch.randn(8, 32, device="cuda")], params)
    with torch.no_grad():
        for _ in range(2):  # warm-up, recording
            fn([torch.randn(8, 32, device="cuda"), *params.values()])
        x = torch.randn(8, 32, device="cuda")
        kept = fn([x, *params.values()])[0]
        kept_at = kept.data_ptr()  # read before it is revoked: data_ptr() raises after
        expected = _mlp(x, *params.values())
        saved = kept.clone()
        latest = fn([torch.randn(8, 32, device="cuda"), *params.values()])[0]
        assert kept.shape == (8, 16)  # sizes stay readable
        with pytest.raises(RuntimeError, match="overwritten by a later call"):
            kept.sum()
        torch.testing.assert_close(saved, expected)  # a clone keeps its values
        assert latest.data_ptr() == kept_at and torch.isfinite(latest).all()
        with patch(cudagraph_copy_outputs=True):  # copies, kept across calls
            first = fn([x, *params.values()])[0]
            fn([torch.randn(8, 32, device="cuda"), *params.values()])
            torch.testing.assert_close(first, expected)


def test_input_mutation_is_copied_back_after_each_replay() -> None:
    def accumulate(x: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
        acc.add_(x)
        return acc.sin()

    fn = _compiled(accumulate, [torch.randn(64, device="cuda"), torch.zeros(64, device="cuda")],
                   {})
    acc, expected = torch.zeros(64, device="cuda"), torch.zeros(64, device="cuda")
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(64, device="cuda")
            (out,) = fn([x, acc])
            expected += x
            torch.testing.assert_close((acc, out), (expected, expected.sin()))
    assert _stats(fn) == (1, 3)


def test_training_forward_and_backward_match_eager_over_three_steps() -> None:
    def make() -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.BatchNorm1d(64),
                                   torch.nn.GELU(), torch.nn.Linear(64, 8)).cuda()

    torch.manual_seed(0)
    model, reference = make(), make()
    reference.load_state_dict(model.state_dict())
    compiled = ef.compile(model, backend="inductor", mode="reduce-overhead")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_ref = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(3):
        ef.cudagraph_mark_step_begin()
        x = torch.randn(16, 32, device="cuda")
        compiled(x).square().mean().backward()
        reference(x).square().mean().backward()
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
        for u, v in zip(model.buffers(), reference.buffers()):  # running statistics
            torch.testing.assert_close(u, v)
        opt.step()
        opt_ref.step()
        opt.zero_grad()
        opt_ref.zero_grad()


def test_training_records_both_graphs_in_one_pool() -> None:
    class PoolSpy(CudaCapture):
        def __init__(self) -> None:
            self.pools: list[object] = []

        def record(self, run: Callable[[], list[Any]],
                   pool: object) -> tuple[Callable[[], None], list[Any]]:
            self.pools.append(pool)
            return super().record(run, pool)

    params = _mlp_params(requires_grad=True)
    fn = ProgramCallable(compile_program(
        _record(_mlp, [torch.randn(8, 32, device="cuda")], params), "inductor").program)
    spy = PoolSpy()
    graphs: CudaGraphs = fn.enable_cuda_graphs(spy)
    for n in (8, 8, 8):
        fn([torch.randn(n, 32, device="cuda"), *params.values()])[0].sum().backward()
    assert set(graphs.graphs) == {"forward", "backward"}
    assert len(spy.pools) == 2 and spy.pools[0] is spy.pools[1] is graphs.model.pool
    assert (graphs.stats.recordings, graphs.stats.replays) == (2, 4)


def test_a_parameter_in_new_storage_is_recorded_again() -> None:
    params = _mlp_params()
    fn = _compiled(_mlp, [torch.randn(8, 32, device="cuda")], params)
    x = torch.randn(8, 32, device="cuda")
    with torch.no_grad():
        fn([x, *params.values()])
        fn([x, *params.values()])
        moved = {k: v.clone() * 2 for k, v in params.items()}
        for _ in range(2):
            torch.testing.assert_close(fn([x, *moved.values()])[0], _mlp(x, *moved.values()))
    assert fn.cuda_graphs is not None and fn.cuda_graphs.stats.rerecords == 1
    assert _stats(fn) == (2, 3)
    torch.rand(4, device="cuda")  # the random generator is not left in capture state


def test_a_model_whose_graphs_were_all_dropped_records_into_its_pool_again() -> None:
    # the model holds its pool: with graph_pool_handle() the pool died with the last
    # graph and the next capture failed inside torch, leaving the CUDA random generator
    # in capture state ("Offset increment outside graph capture" on every later rand)
    from ember.runtime.cudagraphs_policy import RERECORD_LIMIT

    params = _mlp_params()
    fn = _compiled(_mlp, [torch.randn(8, 32, device="cuda")], params, dynamic=True)
    x = torch.randn(8, 32, device="cuda")
    with torch.no_grad():
        fn([x, *params.values()])
        for _ in range(RERECORD_LIMIT + 2):  # recorded, then moved each call: refused
            moved = [v.clone() for v in params.values()]
            torch.testing.assert_close(fn([x, *moved])[0], _mlp(x, *moved))
        y = torch.randn(12, 32, device="cuda")  # a new signature records into the pool
        for _ in range(3):
            torch.testing.assert_close(fn([y, *params.values()])[0], _mlp(y, *params.values()))
    assert fn.cuda_graphs is not None
    assert fn.cuda_graphs.stats.plain_calls["recording failed"] == 0
    assert fn.cuda_graphs.stats.recordings == RERECORD_LIMIT + 2
    torch.rand(4, device="cuda")


def test_random_ops_differ_between_replays_and_follow_manual_seed() -> None:
    def drop(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.dropout(x, 0.5, training=True) + 1

    x = torch.ones(4096, device="cuda")
    graphed = _compiled(drop, [x], {})
    plain = compile_program(_record(drop, [x], {}), "inductor")
    with torch.no_grad():
        graphed([x])
        graphed([x])  # warm-up, then recorded
        a, b = graphed([x])[0].clone(), graphed([x])[0]
        assert not torch.equal(a, b)
        assert 0.4 < (a == 1).float().mean().item() < 0.6
        torch.manual_seed(7)
        c = graphed([x])[0].clone()
        torch.manual_seed(7)
        d = graphed([x])[0]
        torch.manual_seed(7)
        e = plain([x])[0]
    torch.testing.assert_close(c, d)
    torch.testing.assert_close(c, e)  # a replay draws what the plain code draws
    assert _stats(graphed)[1] >= 4


def test_a_synchronizing_program_runs_plain_and_says_why(
        capsys: pytest.CaptureFixture[str]) -> None:
    def positive_at(x: torch.Tensor) -> torch.Tensor:
        return (x > 0).nonzero() * 2  # the host waits for the result's size

    before = cudagraph_skips[SYNCHRONIZING]
    with patch(logs="cudagraphs"):
        fn = _compiled(positive_at, [torch.randn(16, device="cuda")], {}, dynamic=True)
        with torch.no_grad():
            for _ in range(3):
                x = torch.randn(16, device="cuda")
                torch.testing.assert_close(fn([x])[0], positive_at(x))
    assert cudagraph_skips[SYNCHRONIZING] == before + 1
    assert _stats(fn) == (0, 0)
    assert "runs without CUDA graphs: an operation that synchronizes" in capsys.readouterr().err


def test_one_recording_per_size_up_to_the_limit() -> None:
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2 + 1

    with patch(cudagraph_shapes=2):
        fn = _compiled(double, [torch.randn(8, 4, device="cuda")], {}, dynamic=True)
    with torch.no_grad():
        for n in (8, 8, 9, 9, 10, 10, 8):
            x = torch.randn(n, 4, device="cuda")
            torch.testing.assert_close(fn([x])[0], double(x))
    assert fn.cuda_graphs is not None
    assert fn.cuda_graphs.stats.plain_calls == {"warm-up": 2, SHAPE_LIMIT: 2}
    assert _stats(fn) == (2, 3)


def test_frontend_inference_matches_eager() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 64)).cuda().eval()
    compiled = ef.compile(model, backend="inductor", mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(4, 64, device="cuda")
            torch.testing.assert_close(compiled(x), model(x))


def test_torch_compile_backend_ember_reduce_overhead_matches_eager() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU()).cuda()
    compiled = torch.compile(model, backend="ember", mode="reduce-overhead")
    for _ in range(4):
        x = torch.randn(8, 64, device="cuda")
        torch.testing.assert_close(compiled(x), model(x))
        compiled(x).sum().backward()
