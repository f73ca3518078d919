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
- Autotuning (``mode="max-autotune"``): :func:`candidate_configs` lists a few
  configurations around the heuristic's, which ``block_tuning`` times on the device.
- Reduction over an outer dimension (*column* reduction: the loads are contiguous along
  the outer index, e.g. ``x.sum(0)``): a row-style tile would read one element per row
  per lane, so the tile is ``COLUMN_XBLOCK`` outer points wide (a 128-byte segment of
  fp32) and walks the reduction ``COLUMN_RBLOCK`` rows at a time. Over 16-bit loads the
  tile is 64 points wide (:data:`COLUMN_XBLOCKS`: the same 128 bytes); the loads that
  decide are the tensor-sized ones (``reduction_layout``), and when the column tiles
  alone give fewer than ``COLUMN_TARGET_PROGRAMS`` programs the rows are split.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

POINTWISE_BLOCK = 1024
#: the most warps a pointwise kernel launches with (``XBLOCK // 128`` up to this)
POINTWISE_WARPS = 4
PERSISTENT_MAX = 4096
TILE = 1024
LOOPED_RBLOCK = 4096
LOOPED_WARPS = 16
WIDE_ROW = 1024  # persistent rows at least this long: one row a program, 2-4 warps
#: persistent rows of ``WIDE_ROW`` or more (one a program): block / ``WIDE_ROW`` -> warps
#: (bf16 rows of 4096 with 4 warps: 84% of copy bandwidth on the H200;
#: ``tools/gpu/norm_bandwidth.py --row-warps`` times other choices on norm training steps)
WIDE_ROW_WARPS = {1: 2, 2: 4, 4: 4}
MAX_WARPS = 16
SPLIT_MAX_ROWS = 64
SPLIT_MAX = 256
SPLIT_TARGET_PROGRAMS = 264  # two programs per multiprocessor of an H100/H200
COLUMN_TARGET_PROGRAMS = 1056
COLUMN_XBLOCK = 32
COLUMN_RBLOCK = 64
#: column reductions: element bytes of the loads contiguous along the outer index ->
#: outer points a tile (16-bit floats: 64, a 128-byte segment a tile row, as 32 fp32;
#: other sizes ``COLUMN_XBLOCK``); warps are those of the ``COLUMN_XBLOCK``-wide tile
COLUMN_XBLOCKS = {2: 64}
#: a split column reduction's chunk: at least this many reduced rows a program (two
#: ``COLUMN_RBLOCK`` steps), so that a channels-last BatchNorm's per-channel statistics
#: over N*H*W rows (64 channels of 32x56x56: 256 programs, 256 channels of 32x14x14: 196)
#: fill the GPU; before, 1024 rows (98 and 28 programs)
COLUMN_MIN_ROWS = 128


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


def warps_for(elements: int) -> int:
    """Warps for a tile of ``elements``: one per 256, a power of two up to ``MAX_WARPS``."""
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


def config_forced() -> bool:
    """Whether a :func:`forced_config` block is active (autotuning then stays off)."""
    return _forced is not None


def choose_config(numel: int, reduction_numel: int = 0, *, columns: bool = False,
                  element_bytes: int = 4) -> LaunchConfig:
    """The launch configuration of a kernel over ``numel`` outer points and, for a
    reduction, ``reduction_numel`` points reduced per outer point; ``columns``: the
    reduction's loads are contiguous along the outer index, not the reduction index
    (``reduction_layout``), ``element_bytes`` their element size (the tile's width:
    :data:`COLUMN_XBLOCKS`)."""
    if _forced is not None:
        return _forced
    if reduction_numel == 0:
        xblock = min(POINTWISE_BLOCK, next_power_of_2(numel))
        return LaunchConfig(xblock, 0, False, max(1, min(POINTWISE_WARPS, xblock // 128)))
    rblock = next_power_of_2(reduction_numel)
    if columns and numel > 1:
        width = COLUMN_XBLOCKS.get(element_bytes, COLUMN_XBLOCK)
        xblock = min(width, next_power_of_2(numel))
        narrow = min(xblock, COLUMN_XBLOCK)  # warps: those of the 32-wide tile
        if rblock <= COLUMN_RBLOCK:
            return LaunchConfig(xblock, rblock, True, warps_for(narrow * rblock))
        programs = -(-numel // xblock)
        split = min(SPLIT_MAX, max(1, COLUMN_TARGET_PROGRAMS // programs),
                    -(-reduction_numel // COLUMN_MIN_ROWS))
        return LaunchConfig(xblock, COLUMN_RBLOCK, False,
                            warps_for(narrow * COLUMN_RBLOCK),
                            1, split if split >= 4 else 1)
    if WIDE_ROW <= rblock <= PERSISTENT_MAX:
        return LaunchConfig(1, rblock, True, WIDE_ROW_WARPS.get(rblock // WIDE_ROW, 4))
    if rblock <= PERSISTENT_MAX:
        xblock = max(1, min(TILE // rblock, next_power_of_2(numel), 64))
        return LaunchConfig(xblock, rblock, True, warps_for(xblock * rblock))
    split = 1
    if numel <= SPLIT_MAX_ROWS:
        split = min(SPLIT_MAX, max(1, SPLIT_TARGET_PROGRAMS // numel),
                    -(-reduction_numel // (4 * LOOPED_RBLOCK)))
    return LaunchConfig(1, LOOPED_RBLOCK, False, LOOPED_WARPS, 1, split if split >= 4 else 1)


#: autotuning candidates of a pointwise kernel: (XBLOCK, warps)
POINTWISE_CANDIDATES = ((256, 2), (512, 4), (1024, 4), (1024, 8), (2048, 8))
#: autotuning candidates of a looped row reduction: (RBLOCK, warps)
LOOPED_CANDIDATES = ((1024, 4), (2048, 8), (4096, 8), (4096, 16), (8192, 16))
#: the largest persistent tile (XBLOCK * RBLOCK elements) an autotuning candidate holds
MAX_TUNED_TILE = 8192
#: persistent rows at least this long (one a program) also get a looped candidate
LOOPED_VARIANT_ROW = 2048
#: kernels over fewer elements (outer x reduction) keep the heuristic's configuration:
#: their time is the launch's, whatever the blocks (timing them costs compiles only)
MIN_TUNED_ELEMENTS = 1 << 16


def config_name(config: LaunchConfig) -> str:
    """A candidate's name: ``x1024_w4`` (pointwise), ``x8_r128_w4_persistent``,
    ``x1_r4096_w16_looped_split8``."""
    if config.rblock == 0:
        return f"x{config.xblock}_w{config.num_warps}"
    form = "persistent" if config.persistent else "looped"
    split = f"_split{config.split}" if config.split > 1 else ""
    return f"x{config.xblock}_r{config.rblock}_w{config.num_warps}_{form}{split}"


def candidate_configs(default: LaunchConfig, numel: int, reduction_numel: int = 0
                      ) -> list[LaunchConfig]:
    """The configurations autotuning times for a kernel whose heuristic chose
    ``default`` (sizes at their hints), ``default`` first; only ``default`` for a
    kernel over fewer than :data:`MIN_TUNED_ELEMENTS` elements. They keep what correctness
    rests on: a persistent reduction keeps its ``RBLOCK`` (whole rows: the range's
    bound decided it), a looped one stays looped, a split keeps its chunk count.

    - pointwise: ``XBLOCK`` and warps from :data:`POINTWISE_CANDIDATES` (blocks up to
      the tensor's size);
    - persistent reduction: half and twice the rows a program, half and twice the
      warps, and (rows of :data:`LOOPED_VARIANT_ROW` or more) a looped walk of a
      quarter row;
    - looped reduction: ``RBLOCK`` and warps from :data:`LOOPED_CANDIDATES` (blocks
      up to the row's length), or for a column reduction half and twice ``RBLOCK``.
    """
    out = [default]
    if numel * max(reduction_numel, 1) < MIN_TUNED_ELEMENTS:
        return out
    if reduction_numel == 0:
        limit = next_power_of_2(numel)
        out += [LaunchConfig(x, 0, False, w) for x, w in POINTWISE_CANDIDATES if x <= limit]
    elif default.persistent:
        rblock = default.rblock
        for xblock in (default.xblock // 2, default.xblock * 2):
            if 1 <= xblock <= next_power_of_2(numel) and xblock * rblock <= MAX_TUNED_TILE:
                out.append(dataclasses.replace(default, xblock=xblock,
                                               num_warps=warps_for(xblock * rblock)))
        out += _warp_variants(default)
        if rblock >= LOOPED_VARIANT_ROW and default.xblock == 1:
            out.append(dataclasses.replace(default, rblock=rblock // 4, persistent=False,
                                           num_warps=8))
    elif default.xblock > 1:  # a column reduction: a tile of outer points walks the rows
        for rblock in (default.rblock // 2, default.rblock * 2):
            if rblock >= 8:
                out.append(dataclasses.replace(
                    default, rblock=rblock, num_warps=warps_for(default.xblock * rblock)))
        out += _warp_variants(default)
    else:
        row = next_power_of_2(reduction_numel)
        out += [dataclasses.replace(default, rblock=r, num_warps=w)
                for r, w in LOOPED_CANDIDATES if r <= row]
    unique: list[LaunchConfig] = []
    for config in out:
        if config not in unique:
            unique.append(config)
    return unique


def _warp_variants(config: LaunchConfig) -> list[LaunchConfig]:
    return [dataclasses.replace(config, num_warps=w)
            for w in (config.num_warps // 2, config.num_warps * 2) if 1 <= w <= MAX_WARPS]
