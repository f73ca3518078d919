"""GraphSeed: the seed and key counter of one graph's random ops (``lowering/random.py``)."""

from __future__ import annotations

import torch
from typing import Protocol

from ember.inductor.buffers import ExternCall, ScheduledNode
from ember.inductor.lowering.extern_args import ConstantArg, ExternArg, ListArg
from ember.inductor.lowering.values import Stored

# Seeds of random ops are drawn from [0, RNG_SEED_BOUND): 62 bits, so that the seeds of
# different calls practically never collide, and seed + k (one per random op) stays
# below 2**63.
RNG_SEED_BOUND = 2**62


class _Lowering(Protocol):
    """What a GraphSeed uses of the lowering context (see ``context.py``)."""

    device: torch.device
    nodes: list[ScheduledNode]

    def extern_step(self, target: str, args: list[ExternArg], kwargs: dict[str, ExternArg],
                    dtype: torch.dtype, sizes: tuple[int, ...], origin: str,
                    note: str) -> str: ...


class GraphSeed:
    """The one seed a graph's random ops draw from, and which key each one uses."""

    def __init__(self, ctx: _Lowering) -> None:
        self._ctx = ctx
        self._seed: tuple[ExternCall, Stored] | None = None
        self._streams = 0

    def seed(self, origin: str = "") -> Stored:
        """The 0-d int64 seed of the graph's random ops.

        The first call appends an extern step that draws it from torch's default
        generator of the graph's device, ``randint(0, RNG_SEED_BOUND, [])``, so that
        ``torch.manual_seed`` makes a call reproducible and consecutive calls differ;
        later calls return the same value (one draw per graph and call). ``origin``
        names the graph node the step is made for.
        """
        ctx = self._ctx
        if self._seed is not None and any(n is self._seed[0] for n in ctx.nodes):
            return self._seed[1]
        # NOTE: a rule that raised NotLowerable after drawing the seed had its nodes
        # removed, the seed step with them (see GraphLowering.call): then it is drawn again.
        name = ctx.extern_step(
            "aten::randint.low", [ConstantArg(0), ConstantArg(RNG_SEED_BOUND), ListArg(())],
            {"dtype": ConstantArg(torch.int64), "device": ConstantArg(ctx.device)},
            torch.int64, (), origin, "the seed of the graph's random ops")
        step = ctx.nodes[-1]
        assert isinstance(step, ExternCall)
        self._seed = (step, Stored(name, torch.int64, (), ()))
        return self._seed[1]

    def stream(self) -> int:
        """A new ordinal ``k`` for one random op: it draws with key ``seed + k``, so two
        random ops of a graph never share values."""
        k = self._streams
        self._streams += 1
        return k


__all__ = ["RNG_SEED_BOUND", "GraphSeed"]
