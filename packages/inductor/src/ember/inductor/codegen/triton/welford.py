"""The loop IR's ``m2`` reduction in Triton: the sum of squared deviations from the mean,
in one pass over the reduced values.

Each lane of an ``[XBLOCK, RBLOCK]`` tile keeps Welford's running state (mean, m2,
count) over the elements it sees; the lanes of a row, and the chunks of a split
reduction, are merged by Chan's formula (:data:`COMBINE`): for states ``a`` and ``b``
with ``n = na + nb`` and ``d = mean_b - mean_a``, the mean is ``mean_a + d * nb / n``
and ``m2 = m2_a + m2_b + d * d * na * nb / n``; an empty state (``n = 0``) changes
nothing. A persistent reduction, whose row is in registers, takes the mean first and
then the squared deviations from it (two passes over registers, no memory read twice).

The writers (``kernel_writer.py``, ``split_writer.py``) call these functions for an
``m2`` statement; each returns the lines to emit. ``mask`` is the tile's mask of valid
elements (``xrmask``); values are computed in ``ty`` (a Triton float type).
"""

from __future__ import annotations

#: the combine helper, defined by each kernel module that reduces an ``m2``
#: (``reductions.HELPERS``)
COMBINE = "_ember_welford"

HELPER_SOURCE = '''
@triton.jit
def _ember_welford(mean_a, m2_a, n_a, mean_b, m2_b, n_b):
    # Chan's formula; a state with n == 0 is empty (it changes nothing)
    n = n_a + n_b
    w = tl.where(n == 0, 0.0, n_b / tl.where(n == 0, 1.0, n))
    d = mean_b - mean_a
    return mean_a + d * w, m2_a + m2_b + d * d * n_a * w, n
'''

# the state's parts, as suffixes of the statement's value name: the m2 itself is the
# value, its mean and count sit beside it (a split reduction stores all three)
PARTS = ("", "_mean", "_n")


def parts_of(op: str) -> tuple[str, ...]:
    """The parts a reduction ``op`` keeps per row: an ``m2``'s :data:`PARTS`, else one."""
    return PARTS if op == "m2" else ("",)


def persistent(out: str, arg: str, mask: str, ty: str) -> list[str]:
    """``out`` = m2 of the row ``arg`` held in registers: the mean, then the squares."""
    return [
        f"{out}_x = tl.where({mask}, {arg}.to({ty}), 0.0)",
        f"{out}_n = tl.reduce(tl.where({mask}, 1.0, 0.0).to({ty}), 1, _ember_add)[:, None]",
        (f"{out}_mean = tl.reduce({out}_x, 1, _ember_add)[:, None] / "
         f"tl.maximum({out}_n, 1.0)"),
        f"{out}_d = tl.where({mask}, {out}_x - {out}_mean, 0.0)",
        f"{out} = tl.reduce({out}_d * {out}_d, 1, _ember_add)[:, None]",
    ]


def init(acc: str, ty: str) -> list[str]:
    """The tile's running states, all empty."""
    return [f"{acc}{part} = tl.full([XBLOCK, RBLOCK], 0, {ty})" for part in PARTS]


#: the number of the reduction loop's step, from 1 (``roffset`` runs over the chunk in
#: ``RBLOCK`` steps: ``kernel_writer.emit_reduction_loop``)
LOOP_STEP = "(roffset // RBLOCK + 1)"


def update(acc: str, arg: str, mask: str, ty: str) -> list[str]:
    """Welford's update of each lane's state with its element of this step (none where
    ``mask`` is false).

    The mean moves by ``d / n``. A lane's elements are masked off only past the end of
    its row or chunk, so the steps where ``mask`` holds for a lane are the first ones,
    and wherever ``d`` counts (``mask`` true) ``n`` is the loop's step number: one
    reciprocal per step for the whole tile (:data:`LOOP_STEP`), not a division per
    element (``d`` is 0 elsewhere). ``n`` itself is still counted per lane, for the
    merge."""
    return [
        f"{acc}_x = {arg}.to({ty})",
        f"{acc}_n = {acc}_n + tl.where({mask}, 1.0, 0.0).to({ty})",
        f"{acc}_d = tl.where({mask}, {acc}_x - {acc}_mean, 0.0)",
        f"{acc}_mean = {acc}_mean + {acc}_d * (tl.full([], 1.0, {ty}) / {LOOP_STEP})",
        f"{acc} = {acc} + {acc}_d * tl.where({mask}, {acc}_x - {acc}_mean, 0.0)",
    ]


def finish(out: str, acc: str) -> list[str]:
    """The row's state from its lanes' (``out``, ``out_mean``, ``out_n``: ``[XBLOCK, 1]``)."""
    return [
        f"{out}_mean, {out}, {out}_n = tl.reduce(({acc}_mean, {acc}, {acc}_n), 1, {COMBINE})",
        *(f"{out}{part} = {out}{part}[:, None]" for part in PARTS),
    ]


def combine_partials(out: str, parts: dict[str, str]) -> list[str]:
    """The row's m2 from a split reduction's partial states (``parts``: part suffix ->
    the ``[XBLOCK, SBLOCK]`` tile loaded from its workspace, empty where masked)."""
    return [
        (f"_, {out}, _ = tl.reduce(({parts['_mean']}, {parts['']}, {parts['_n']}), 1, "
         f"{COMBINE})"),
        f"{out} = {out}[:, None]",
    ]


def single(out: str, arg: str, ty: str) -> list[str]:
    """The m2 of one element: 0 (NaN for a NaN or an infinity, as eager's var gives)."""
    return [f"{out}_d = {arg}.to({ty}) - {arg}.to({ty})", f"{out} = {out}_d * {out}_d"]


__all__ = ["COMBINE", "HELPER_SOURCE", "PARTS", "combine_partials", "finish", "init",
           "parts_of", "persistent", "single", "update"]
