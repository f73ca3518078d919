"""The inputs of a recorded graph: which are used in place, which are copied into static
buffers, and the signature that picks a recording.

A CUDA graph reads its inputs at the addresses it was recorded with. Each placeholder
gets one of three roles, fixed when the graph is recorded:

=================  ==========================================  =========================
role               which inputs                                each replay
=================  ==========================================  =========================
``IN_PLACE``       parameters, buffers and constants (their    same ``data_ptr`` or the
                   ``InputKind``, or an ``nn.Parameter``), a   graph is recorded again
                   backward input at a recorded parameter's    (an input kept in place
                   address (a saved weight), and a mutated     for its stable address is
                   input found at the same address in the      copied from then on)
                   warm-up call (a frontend's buffers)
``POOL_OUTPUT``    a result of an earlier replay of the same   same ``data_ptr`` or the
                   model (the backward graph's saved tensors)  call runs plain
``COPIED``         every other tensor (user inputs, tangents)  copied into a buffer
                                                               allocated at recording
=================  ==========================================  =========================

Non-tensor inputs are part of the signature: the recording holds their values.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence, Set
from dataclasses import dataclass
from typing import Any

import torch
from ember.runtime.ir import InputKind, InputSpec

_IN_PLACE_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT)


class InputRole(enum.Enum):
    """How a replay gets one input into the recorded graph (module docstring)."""

    IN_PLACE = "in_place"
    POOL_OUTPUT = "pool_output"
    COPIED = "copied"
    VALUE = "value"  # not a tensor: part of the signature


def keyed_positions(specs: Sequence[InputSpec], n_inputs: int) -> list[int]:
    """The inputs a call's signature reads: all but the parameters, buffers and
    constants by their ``InputKind`` (a recording checks their addresses instead; their
    sizes are the capture's own, guarded by the frontend)."""
    return [i for i in range(n_inputs)
            if i >= len(specs) or specs[i].kind not in _IN_PLACE_KINDS]


def signature_of(inputs: Sequence[Any], positions: Sequence[int]) -> tuple[object, ...]:
    """The recording key of a call: the device, sizes and strides of each tensor at
    ``positions``, each other input's value (a recording replays exactly one shape)."""
    key: list[object] = []
    for i in positions:
        x = inputs[i]
        if isinstance(x, torch.Tensor):
            key.append((x.shape, x.stride(), x.device.type))
        else:
            key.append(x if isinstance(x, (int, float, bool, str, type(None))) else repr(x))
    return tuple(key)


def is_dense(t: torch.Tensor) -> bool:
    """Whether ``t``'s elements fill a block of memory without gaps or overlaps (some
    permutation of a contiguous layout): then a buffer with its strides holds it."""
    expected = 1
    for stride, extent in sorted(zip(t.stride(), t.shape)):
        if extent == 1:
            continue
        if stride != expected:
            return False
        expected *= extent
    return True


def _static_buffer(x: torch.Tensor) -> torch.Tensor:
    if is_dense(x):
        buffer = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
    else:
        buffer = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    buffer.copy_(x)
    return buffer


@dataclass
class StaticInputs:
    """The inputs a recording was made with, and how each call's inputs reach them.
    ``tensors`` holds new tensor objects (aliases of the in-place inputs), never the
    caller's, so that holding them keeps no caller's object alive."""

    roles: list[InputRole]
    tensors: list[Any]  # the recorded inputs: static buffers, parameters, pool outputs
    pointers: list[int]  # data_ptr of each tensor input at recording (0 for others)

    @staticmethod
    def make(inputs: Sequence[Any], specs: Sequence[InputSpec], in_place: set[int],
             pool_outputs: set[int], stable: Set[int] = frozenset()) -> StaticInputs:
        """Choose each input's role and allocate the static buffers (outside any
        memory pool: they must outlive every replay).

        Args:
            specs: the graph's input specs (missing ones are user inputs).
            in_place: addresses of the model's in-place inputs (a saved parameter
                reaching the backward graph stays in place).
            pool_outputs: addresses of the other results of the model's recordings.
            stable: positions of mutated inputs that were at the same address in the
                warm-up call (a frontend's buffers): kept in place too, until one moves
                (the caller then records again with it copied).
        """
        roles: list[InputRole] = []
        tensors: list[Any] = []
        for i, x in enumerate(inputs):
            kind = specs[i].kind if i < len(specs) else InputKind.USER_INPUT
            if not isinstance(x, torch.Tensor):
                roles.append(InputRole.VALUE)
                tensors.append(x)
            elif (kind in _IN_PLACE_KINDS or isinstance(x, torch.nn.Parameter)
                  or (x.data_ptr() in in_place and x.numel() > 0)):
                roles.append(InputRole.IN_PLACE)
                tensors.append(x.detach())
            elif x.data_ptr() in pool_outputs and x.numel() > 0:
                roles.append(InputRole.POOL_OUTPUT)
                tensors.append(x.detach())
            elif i in stable:
                roles.append(InputRole.IN_PLACE)
                tensors.append(x.detach())
            else:
                roles.append(InputRole.COPIED)
                tensors.append(_static_buffer(x))
        pointers = [t.data_ptr() if isinstance(t, torch.Tensor) else 0 for t in tensors]
        return StaticInputs(roles, tensors, pointers)

    def __post_init__(self) -> None:
        # NOTE: per-call work loops over these lists only (a model passes every
        # parameter on every call: tens to hundreds of IN_PLACE inputs)
        self._copied = [i for i, r in enumerate(self.roles) if r is InputRole.COPIED]
        self._in_place = [i for i, r in enumerate(self.roles) if r is InputRole.IN_PLACE]
        self._in_place_pointers = [self.pointers[i] for i in self._in_place]
        self._pool = [i for i, r in enumerate(self.roles) if r is InputRole.POOL_OUTPUT]
        self._pool_pointers = [self.pointers[i] for i in self._pool]

    def moved_parameter(self, inputs: Sequence[Any]) -> int | None:
        """The position of an ``IN_PLACE`` input that is not at its recorded address."""
        now = [inputs[i].data_ptr() for i in self._in_place]
        if now == self._in_place_pointers:
            return None
        return next(i for i, p, q in zip(self._in_place, now, self._in_place_pointers)
                    if p != q)

    def moved_pool_output(self, inputs: Sequence[Any]) -> bool:
        """Whether a ``POOL_OUTPUT`` input is not at its recorded address (its producer
        ran plain): copying it in could overwrite results still in use, so the call
        runs plain."""
        return [inputs[i].data_ptr() for i in self._pool] != self._pool_pointers

    def load(self, inputs: Sequence[Any]) -> None:
        """Copy this call's ``COPIED`` inputs into their static buffers (before a replay)."""
        for i in self._copied:
            self.tensors[i].copy_(inputs[i])


__all__ = ["InputRole", "StaticInputs", "is_dense", "keyed_positions", "signature_of"]
