"""The aot stage's settings, in one place.

They come from the ``options`` the pipeline passes to :meth:`AotStage.run` (the user's
``options=`` of ``compile``), under these names:

=================================  ==========================================  =========
option                             meaning                                     default
=================================  ==========================================  =========
``aot.save_everything``            save every forward value the backward       ``False``
                                   reads (no recomputation), for comparison
``aot.recompute_reduction_limit``  reductions over more input elements than    ``4096``
                                   this are saved, never recomputed
``aot.decompose``                  decompose to the Core ATen opset            ``True``
``aot.training``                   ``True``/``False`` forces a joint graph or  ``None``
                                   an inference one; ``None``: joint when an
                                   input requires grad and grad mode is on
=================================  ==========================================  =========
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ember.runtime.stages import PRE_GRAD_PASSES, PreGradPass

AOT_OPTIONS: dict[str, tuple[type, ...]] = {
    "aot.save_everything": (bool,),
    "aot.recompute_reduction_limit": (int,),
    "aot.decompose": (bool,),
    "aot.training": (bool, type(None)),
}
"""The options above, with the types their values may have (checked by
``ember.frontend.compile``)."""


@dataclass(frozen=True)
class AotConfig:
    """Settings of one aot run."""

    save_everything: bool = False
    recompute_reduction_limit: int = 4096
    decompose: bool = True
    training: bool | None = None
    #: the later stages' rewrites of the decomposed forward before the backward is
    #: derived (``options[ember.runtime.stages.PRE_GRAD_PASSES]``, set by the pipeline)
    pre_grad_passes: tuple[PreGradPass, ...] = ()

    @staticmethod
    def from_options(options: Mapping[str, Any]) -> AotConfig:
        """Read the ``aot.*`` entries of ``options``.

        Raises:
            ValueError: for an unknown ``aot.*`` option.
        """
        known = {"save_everything", "recompute_reduction_limit", "decompose", "training"}
        values: dict[str, Any] = {}
        for key, value in options.items():
            if not key.startswith("aot."):
                continue
            name = key[4:]
            if name not in known:
                raise ValueError(f"unknown aot option {key!r}; known: "
                                 + ", ".join(f"aot.{k}" for k in sorted(known)))
            values[name] = value
        return AotConfig(**values, pre_grad_passes=tuple(options.get(PRE_GRAD_PASSES, ())))
