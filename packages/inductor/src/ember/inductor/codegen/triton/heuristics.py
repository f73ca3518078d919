"""Block sizes and warps for a generated Triton kernel, from its static sizes.

- Pointwise: ``XBLOCK`` elements per program (1024 for large tensors: 8 fp32 elements a
  thread at 4 warps, two 16-byte accesses each).
- Reduction, *persistent*: when a whole reduction row fits in registers
  (``next_pow2(rnumel) <= PERSISTENT_MAX``) a program loads its rows once and reduces
  them in registers; ``XBLOCK`` rows per program keep the tile near ``TILE`` elements.
- Reduction, *looped*: longer rows are walked in ``RBLOCK``-element steps, one row per
  program, accumulating in registers (and re-reading the row once per pass).
"""

from __future__ import annotations

from dataclasses import dataclass

POINTWISE_BLOCK = 1024
PERSISTENT_MAX = 4096
TILE = 2048
LOOPED_RBLOCK = 2048
MAX_WARPS = 16


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= ``max(n, 1)``."""
    p = 1
    while p < n:
        p *= 2
    return p


@dataclass(frozen=True)
class LaunchConfig:
    """How one kernel is tiled: ``rblock`` 0 for a pointwise kernel; ``persistent``
    whether a reduction holds whole rows in registers."""

    xblock: int
    rblock: int
    persistent: bool
    num_warps: int
    num_stages: int = 1

    def grid(self, numel: int) -> tuple[int, int, int]:
        return ((numel + self.xblock - 1) // self.xblock, 1, 1)


def _warps_for(elements: int) -> int:
    warps = elements // 256
    return max(1, min(MAX_WARPS, next_power_of_2(warps)))


def choose_config(numel: int, reduction_numel: int = 0) -> LaunchConfig:
    """The launch configuration of a kernel over ``numel`` outer points and, for a
    reduction, ``reduction_numel`` points reduced per outer point."""
    if reduction_numel == 0:
        xblock = min(POINTWISE_BLOCK, next_power_of_2(numel))
        return LaunchConfig(xblock, 0, False, max(1, min(4, xblock // 128)))
    rblock = next_power_of_2(reduction_numel)
    if rblock <= PERSISTENT_MAX:
        xblock = max(1, min(TILE // rblock, next_power_of_2(numel), 64))
        return LaunchConfig(xblock, rblock, True, _warps_for(xblock * rblock))
    return LaunchConfig(1, LOOPED_RBLOCK, False, _warps_for(LOOPED_RBLOCK), 1)
