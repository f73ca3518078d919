"""How much reading a ``.ember`` file or IR text may cost: the documented limits.

A crafted file must fail with :class:`IRFormatError` before it costs much memory or
time: a zip member that inflates a thousandfold, thousands of members, JSON nested a
million deep, a number of a thousand digits. :func:`~ember.runtime.ir.load` and
:func:`~ember.runtime.ir.parse_program` check every limit below *before* allocating
what it guards (sizes and ratios come from the zip's directory, members are read in
bounded chunks). Callers with bigger programs pass their own :class:`LoadLimits`::

    from ember.runtime.ir import load
    from ember.runtime.ir.limits import LoadLimits
    program = load("big.ember", limits=LoadLimits(max_program_bytes=1 << 30))

==========================  =================  =============================================
limit                       default            why this default
==========================  =================  =============================================
``max_members``             4096               a compiled artifact has a wrapper and one or
                                               two kernel sources per graph
``max_program_bytes``       256 MiB            ``program.json`` of graphs with ~500k nodes
``max_file_bytes``          256 MiB            all of ``files/`` together (kernel sources)
``max_tensor_bytes``        256 GiB            ``tensors.safetensors``: 7B parameters are
                                               28 GB in float32, 70B are 140 GB in bf16
``max_ratio``               200                inflated / compressed size of one member
                                               (deflated JSON and sources reach ~30);
                                               ``tensors.safetensors`` is stored, ratio 1
``max_json_depth``          128                nesting of JSON and of IR-text brackets
                                               (programs need < 20)
==========================  =================  =============================================

The ratio limit is checked on members larger than :data:`RATIO_FREE_BYTES` only: a
small member cannot inflate to much whatever its ratio. Integers must also fit in
:data:`MAX_NUMBER_DIGITS` digits and floats be finite (non-finite ones have their own
encoding).
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_MEMBERS = 4096
MAX_PROGRAM_BYTES = 256 << 20
MAX_FILE_BYTES = 256 << 20
MAX_TENSOR_BYTES = 256 << 30
MAX_RATIO = 200.0
MAX_JSON_DEPTH = 128

RATIO_FREE_BYTES = 1 << 20
"""Members up to this many inflated bytes are not held to ``max_ratio``."""

MAX_NUMBER_DIGITS = 40
"""A number in a file has at most this many digits in a row (int64 and uint64 need 20,
a float's repr 17; the IR keeps Python ints, so arguments may be wider than 64 bits)."""


@dataclass(frozen=True)
class LoadLimits:
    """The limits a load or parse enforces (see the module docstring for each field).

    ``dataclasses.replace(LoadLimits(), max_tensor_bytes=...)`` raises one of them.
    """

    max_members: int = MAX_MEMBERS
    max_program_bytes: int = MAX_PROGRAM_BYTES
    max_file_bytes: int = MAX_FILE_BYTES
    max_tensor_bytes: int = MAX_TENSOR_BYTES
    max_ratio: float = MAX_RATIO
    max_json_depth: int = MAX_JSON_DEPTH


DEFAULT_LIMITS = LoadLimits()
