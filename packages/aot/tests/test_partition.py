"""The min-cut partitioner: max-flow on small graphs, bytes saved against
save-everything, and what it refuses to recompute."""

from __future__ import annotations

import torch
from aot_capture import capture_module, compile_module
from ember.aot.config import AotConfig
from ember.aot.partition.maxflow import INFINITE, FlowNetwork
from ember.aot.partition.mincut import COMPUTE_BOUND_OPS
from ember.aot.pipeline import aot_compile
from ember.runtime.ir import OutputKind
from ember_testing.training import TransformerBlock


def test_max_flow_min_cut_on_a_small_network() -> None:
    net = FlowNetwork()
    for u, v, c in [("s", "a", 3), ("s", "b", 2), ("a", "b", 1), ("a", "t", 2),
                    ("b", "t", 3)]:
        net.add_edge(u, v, c)
    flow, side = net.min_cut("s", "t")
    assert flow == 5 and side == {"s"}

    net = FlowNetwork()
    for u, v, c in [("s", "a", INFINITE), ("a", "b", 5), ("b", "t", INFINITE),
                    ("a", "c", INFINITE), ("c", "t", 2)]:
        net.add_edge(u, v, c)
    flow, side = net.min_cut("s", "t")
    assert flow == 7 and side == {"s", "a", "c"}


def _saved_bytes(config: AotConfig) -> tuple[int, set[str]]:
    torch.manual_seed(0)
    program = aot_compile(capture_module(TransformerBlock(), torch.randn(2, 6, 32)), config)
    aot_meta = program.metadata["aot"]
    assert isinstance(aot_meta, dict)
    return int(aot_meta["saved_bytes"]), set(aot_meta["recomputed"])


def test_min_cut_saves_fewer_bytes_than_save_everything() -> None:
    min_cut, recomputed = _saved_bytes(AotConfig())
    everything, none = _saved_bytes(AotConfig(save_everything=True))
    print(f"transformer block saved bytes: min-cut {min_cut}, save-everything {everything}")
    assert min_cut < everything
    assert recomputed and not none


def test_no_matmul_is_recomputed() -> None:
    torch.manual_seed(0)
    program, _ = compile_module(TransformerBlock(), torch.randn(2, 6, 32))
    forward_matmuls = {n.name for n in program.forward.calls() if n.target in COMPUTE_BOUND_OPS}
    backward = program.graphs["backward"]
    assert forward_matmuls, "the block has matmuls in its forward graph"
    # every forward matmul the backward graph needs arrives as a saved tensor, never as a
    # node of the backward graph
    assert not forward_matmuls & {n.name for n in backward.nodes}
    recomputed = set(program.metadata["aot"]["recomputed"])  # type: ignore[index]
    assert not {n for n in recomputed if n in forward_matmuls}
    saved = [s.target for s in program.signature.outputs["forward"]
             if s.kind == OutputKind.SAVED_TENSOR]
    assert len(saved) == len(set(saved))


def test_random_ops_are_not_recomputed() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5),
                                torch.nn.Linear(8, 8))
    program, _ = compile_module(model, torch.randn(4, 8))
    backward = program.graphs["backward"]
    from ember.runtime.ir import resolve_op

    for node in backward.calls():
        tags = resolve_op(node.target).tags
        assert torch.Tag.nondeterministic_seeded not in tags, node.target
