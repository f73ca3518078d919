"""Autotuning: pick among candidate kernels by timing them on the device.

Active under ``mode="max-autotune"`` and ``"max-autotune-no-cudagraphs"``:
:func:`ember.inductor.compile.compile_program` compiles a program inside
``autotuning(True)``, and every code generator that has a choice to make (a matmul's
implementation, a Triton kernel's block sizes) asks :func:`select` with its
:class:`Candidate` s and the choice its heuristic would make. Outside that block
``select`` answers the heuristic's choice without timing anything.

=================  ========================================================
module             what
=================  ========================================================
``select.py``      ``Candidate``, ``autotuning``, ``autotune_enabled``,
                   ``select``, the device being tuned for, the report
``cache.py``       the on-disk cache of decisions (JSON, one file an entry)
``timing.py``      timing one candidate: CUDA events or ``perf_counter``
``progress.py``    the progress bar on a terminal's stderr
=================  ========================================================
"""

from ember.inductor.autotune.cache import AutotuneCacheWarning, cache_dir, clear_cache
from ember.inductor.autotune.select import (
    AutotuneWarning,
    Candidate,
    TuningReport,
    autotune_enabled,
    autotuning,
    select,
    tuning_device,
    tuning_report,
    tuning_target,
)

__all__ = [
    "AutotuneCacheWarning",
    "AutotuneWarning",
    "Candidate",
    "TuningReport",
    "autotune_enabled",
    "autotuning",
    "cache_dir",
    "clear_cache",
    "select",
    "tuning_device",
    "tuning_report",
    "tuning_target",
]
