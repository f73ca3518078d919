"""A/B variants of the aot stage's settings for the measuring tools
(``tools/ab_cpu.py``, ``tools/gpu/ab_matmul_choice.py``): the partitioner run with other
``AotConfig`` values, whatever the options the bench compiles with."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any
from unittest import mock

from ember.aot import pipeline as aot_pipeline
from ember.aot.partition import mincut


@contextlib.contextmanager
def aot_config(**changes: Any) -> Iterator[None]:
    """Compiles inside partition their joint graphs with ``changes`` to their config
    (``aot_config(save_conv_inputs=False)``)."""
    real = mincut.partition

    def partition(graph, n_forward_outputs, n_tangents, config):  # type: ignore[no-untyped-def]
        return real(graph, n_forward_outputs, n_tangents,
                    dataclasses.replace(config, **changes))

    with mock.patch.object(aot_pipeline, "partition", partition):
        yield
