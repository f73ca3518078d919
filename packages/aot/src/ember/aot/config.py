"""The aot stage's settings, in one place.

They come from the ``options`` the pipeline passes to :meth:`AotStage.run` (the user's
``options=`` of ``compile``), under these names:

=================================  ==========================================  =========
option                             meaning                                     default
=================================  ==========================================  =========
``aot.save_everything``            save every forward value the backward       ``False``
                                   reads (no recomputation), for comparison
``aot.save_conv_inputs``           save a value that a backward convolution    ``True``
                                   or matmul reads when a forward one wrote
                                   it (else the min cut may recompute it: a
                                   second write and read)
``aot.recompute_reduction_limit``  reductions over more input elements than    ``4096``
                                   this are saved, never recomputed (an int
                                   >= 0; 0: every reduction is saved)
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
    "aot.save_conv_inputs": (bool,),
    "aot.recompute_reduction_limit": (int,),
    "aot.decompose": (bool,),
    "aot.training": (bool, type(None)),
}
"""The options above, with the types their values may have (checked by
``ember.frontend.compile``)."""

_NAMES = tuple(key.removeprefix("aot.") for key in AOT_OPTIONS)


@dataclass(frozen=True)
class AotConfig:
    """Settings of one aot run."""

    save_everything: bool = False
    save_conv_inputs: bool = True
    recompute_reduction_limit: int = 4096
    decompose: bool = True
    training: bool | None = None
    #: the later stages' rewrites of the decomposed forward before the backward is
    #: derived (``options[ember.runtime.stages.PRE_GRAD_PASSES]``, set by the pipeline)
    pre_grad_passes: tuple[PreGradPass, ...] = ()

    def __post_init__(self) -> None:
        """Check each setting, as :func:`ember.runtime.pipeline.check_options` checks the
        options' types (``compile`` also calls :meth:`AotStage.check_options
        <ember.aot.stage.AotStage.check_options>`, so a bad value fails there), plus what
        a type cannot say: a count is never negative.

        Raises:
            ValueError: naming the option, its value and what it accepts.
        """
        for name in _NAMES:
            value = getattr(self, name)
            types = AOT_OPTIONS[f"aot.{name}"]
            if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
                names = " or ".join("None" if t is type(None) else t.__name__ for t in types)
                raise ValueError(f"option 'aot.{name}'={value!r}: expected {names}")
        if self.recompute_reduction_limit < 0:
            raise ValueError(
                f"option 'aot.recompute_reduction_limit'={self.recompute_reduction_limit!r}: "
                "expected an int >= 0 (reductions over more input elements than this are "
                "saved for the backward; 0 saves every one)")

    @staticmethod
    def from_options(options: Mapping[str, Any]) -> AotConfig:
        """Read the ``aot.*`` entries of ``options``.

        Raises:
            ValueError: for an unknown ``aot.*`` option, or a value it does not accept
                (:meth:`__post_init__`).
        """
        known = set(_NAMES)
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
