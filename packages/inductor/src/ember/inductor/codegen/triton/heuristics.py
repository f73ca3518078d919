"""Block sizes and warps for a generated Triton kernel, from its static sizes.

The constants were picked from a sweep on the H200 (tools/gpu/h200_triton.py --sweep,
Triton 3.6): e.g. a bf16 softmax+layer_norm over rows of 4096 moves 84% of the copy
bandwidth with one row and 4 warps a program against 56% with 16 warps; a looped
8192-row layer_norm and a split ``x.sum()`` do best with 4096-element steps and 16 warps;
a column sum with 8 chunks a column.

- Pointwise: ``XBLOCK`` elements per program (1024 for large tensors: 8 fp32 elements a
  thread at 4 warps, two 16-byte accesses each).
- Reduction, *persistent*: when a whole reduction row fits in registers
  (``next_pow2(rnumel) <= PERSISTENT_MAX``) a program loads its rows once and reduces
  them in registers; rows of ``WIDE_ROW`` or more take a program each (2 warps for 1024
  elements, 4 beyond), shorter ones are packed ``XBLOCK`` rows a program to keep the tile
  near ``TILE`` elements.
- Reduction, *looped*: longer rows are walked in ``RBLOCK``-element steps, one row per
  program, accumulating in registers (and re-reading the row once per pass).
- Reduction, *split*: few rows of many elements (``x.sum()``) would leave most of the GPU
  idle with one program per row, so each row is cut into ``split`` chunks reduced in
  parallel into a workspace, and a second kernel combines the partial results.
- Reduction over an outer dimension (*column* reduction: the loads are contiguous along
  the outer index, e.g. ``x.sum(0)``): a row-style tile would read one element per row
  per lane, so the tile is ``COLUMN_XBLOCK`` outer points wide (a 128-byte segment of
  fp32) and walks the reduction ``COLUMN_RBLOCK`` rows at a time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

POINTWISE_BLOCK = 1024
PERSISTENT_MAX = 4096
TILE = 1024
LOOPED_RBLOCK = 4096
LOOPED_WARPS = 16
WIDE_ROW = 1024  # persistent rows at least this long: one row a program, 2-4 warps
MAX_WARPS = 16
SPLIT_MAX_ROWS = 64
SPLIT_MAX = 256
SPLIT_TARGET_PROGRAMS = 264  # two programs per multiprocessor of an H100/H200
COLUMN_TARGET_PROGRAMS = 1056
COLUMN_XBLOCK = 32
COLUMN_RBLOCK = 64


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
    split: int = 1

    def grid(self, numel: int) -> tuple[int, int, int]:
        return ((numel + self.xblock - 1) // self.xblock, 1, 1)


def _warps_for(elements: int) -> int:
    warps = elements // 256
    return max(1, min(MAX_WARPS, next_power_of_2(warps)))


_forced: LaunchConfig | None = None


@contextlib.contextmanager
def forced_config(config: LaunchConfig) -> Iterator[None]:
    """Within the block every kernel is generated with ``config`` (for benchmarks that
    sweep launch configurations, tools/gpu/h200_triton.py)."""
    global _forced
    saved, _forced = _forced, config
    try:
        yield
    finally:
        _forced = saved


def choose_config(numel: int, reduction_numel: int = 0, *, columns: bool = False
                  ) -> LaunchConfig:
    """The launch configuration of a kernel over ``numel`` outer points and, for a
    reduction, ``reduction_numel`` points reduced per outer point; ``columns``: the
    reduction's loads are contiguous along the outer index, not the reduction index."""
    if _forced is not None:
        return _forced
    if reduction_numel == 0:
        xblock = min(POINTWISE_BLOCK, next_power_of_2(numel))
        return LaunchConfig(xblock, 0, False, max(1, min(4, xblock // 128)))
    rblock = next_power_of_2(reduction_numel)
    if columns and numel > 1:
        xblock = min(COLUMN_XBLOCK, next_power_of_2(numel))
        if rblock <= COLUMN_RBLOCK:
            return LaunchConfig(xblock, rblock, True, _warps_for(xblock * rblock))
        programs = -(-numel // xblock)
        split = min(SPLIT_MAX, max(1, COLUMN_TARGET_PROGRAMS // programs),
                    -(-reduction_numel // (16 * COLUMN_RBLOCK)))
        return LaunchConfig(xblock, COLUMN_RBLOCK, False, _warps_for(xblock * COLUMN_RBLOCK),
                            1, split if split >= 4 else 1)
    if WIDE_ROW <= rblock <= PERSISTENT_MAX:
        return LaunchConfig(1, rblock, True, 2 if rblock == WIDE_ROW else 4)
    if rblock <= PERSISTENT_MAX:
        xblock = max(1, min(TILE // rblock, next_power_of_2(numel), 64))
        return LaunchConfig(xblock, rblock, True, _warps_for(xblock * rblock))
    split = 1
    if numel <= SPLIT_MAX_ROWS:
        split = min(SPLIT_MAX, max(1, SPLIT_TARGET_PROGRAMS // numel),
                    -(-reduction_numel // (4 * LOOPED_RBLOCK)))
    return LaunchConfig(1, LOOPED_RBLOCK, False, LOOPED_WARPS, 1, split if split >= 4 else 1)
