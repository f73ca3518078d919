"""``with torch.inference_mode():`` blocks (and ``@torch.inference_mode()`` functions)
inside one captured graph.

The block is a grad-mode block (:mod:`.grad_mode`: its ops run with grad mode off, so
they read their inputs that require grad through ``aten::detach``) that is also entered
for real while capturing (:class:`InferenceModeExit`): the ops in it run on fake tensors
in inference mode, so, as eagerly, ``torch.is_inference_mode_enabled()`` answers True
there, the fakes it makes are inference tensors (their results are handed back as
inference tensors: :mod:`ember.frontend.inference_outputs`), and what eager refuses on
them outside the block (an in-place write, saving one for backward) fails the same way
in the capture, which then runs the frame eagerly, where Python raises it.

A graph break inside such a block of the compiled function itself moves to the ``with``
(:meth:`.exception_ops.ExceptionOps.region_start`), which then runs eagerly: the block is
entered for real and the code after the break is captured in inference mode. A block
still open when the capture stops (a break, an error) is left by
:func:`inference_blocks_closed`, so the caller's mode is back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from ember.frontend.bytecode.grad_mode import GradModeRestore

__all__ = ["InferenceModeExit", "enter_inference_block", "inference_blocks_closed"]


class InferenceModeExit(GradModeRestore):
    """Stands for ``cm.__exit__`` of a ``torch.inference_mode`` block on the stack of a
    frame being captured: calling it leaves the inference mode it entered for real,
    which restores the grad mode and inference mode seen at ``__enter__``.
    ``region_ip``: the root frame's ``with`` instruction, where a break inside the
    block moves (None in an inlined frame, whose break moves to its call)."""

    def __init__(self, mode: bool, region_ip: int | None, open_blocks: list[Any]) -> None:
        super().__init__(torch.is_grad_enabled())
        self.region_ip = region_ip
        self._open = open_blocks
        self._real = torch.inference_mode(mode)
        self._real.__enter__()
        open_blocks.append(self)

    def __call__(self, *exc: Any) -> bool:
        if any(b is self for b in self._open):
            self._open[:] = [b for b in self._open if b is not self]
            self._real.__exit__(None, None, None)
        return False


def enter_inference_block(interp: Any, cm: torch.inference_mode, region_ip: int | None
                          ) -> InferenceModeExit:
    """Enter the block of ``cm`` for real in the capture of ``interp``; its exit."""
    blocks = interp.inference_blocks
    assert blocks is not None, "an inference-mode block outside inference_blocks_closed"
    return InferenceModeExit(bool(cm.mode), region_ip, blocks)


@contextlib.contextmanager
def inference_blocks_closed(interp: Any) -> Iterator[None]:
    """While ``interp`` captures: the blocks it enters are noted; on the way out, those
    still open are left, innermost first."""
    interp.inference_blocks = []
    try:
        yield
    finally:
        open_blocks, interp.inference_blocks = interp.inference_blocks, None
        for block in reversed(list(open_blocks)):
            block()
