"""What a backend reports in ``Program.metadata``: ``metadata["kernels"]`` (generated
kernels, all graphs) and ``metadata["fallbacks"]`` (``{"aten::op.overload": n}``: ops that
run as eager extern calls; ``{"graph runs eagerly": 1}`` for a graph a stage declined).
Written by the inductor and by ``ember.runtime.pipeline.run_eagerly``; read by the
frontend's ``CompileStats`` and ``python -m ember.inductor``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ember.runtime.ir.contracts.fields import (
    JSON,
    program_where,
    read_int,
    read_int_map,
    read_mapping,
)
from ember.runtime.ir.graph import Program

KERNELS_KEY = "kernels"
FALLBACKS_KEY = "fallbacks"
MEMORY_KEY = "memory"


@dataclass(frozen=True)
class CompileReport:
    """``metadata["kernels"]`` and ``metadata["fallbacks"]``; None where the program has
    no such key (the ``eager`` and ``aot_eager`` backends report neither).
    ``metadata["memory"]``: graph name -> ``{"peak_bytes": n, "ideal_bytes": n}``, the
    inductor's static memory plan of each wrapper (at the size hints)."""

    kernels: int | None = None
    fallbacks: Mapping[str, int] | None = None
    memory: Mapping[str, Mapping[str, int]] | None = None

    def to_json(self) -> dict[str, JSON]:
        """The metadata keys this report sets (inverse of :meth:`from_json`)."""
        out: dict[str, JSON] = {}
        if self.fallbacks is not None:
            out[FALLBACKS_KEY] = dict(self.fallbacks)
        if self.kernels is not None:
            out[KERNELS_KEY] = self.kernels
        if self.memory is not None:
            out[MEMORY_KEY] = {g: dict(v) for g, v in self.memory.items()}
        return out

    @staticmethod
    def from_json(value: JSON, where: str = "metadata") -> CompileReport:
        """The report in a metadata object (other keys of ``value`` are ignored: they
        belong to other contracts).

        Raises:
            MetadataError: naming the key whose value is not a count / a table of counts.
        """
        d = read_mapping(value, where)
        kernels = d.get(KERNELS_KEY)
        fallbacks = d.get(FALLBACKS_KEY)
        return CompileReport(
            None if kernels is None else read_int(kernels, f"{where}[{KERNELS_KEY!r}]", 0),
            None if fallbacks is None
            else read_int_map(fallbacks, f"{where}[{FALLBACKS_KEY!r}]", 0),
            _memory(d.get(MEMORY_KEY), f"{where}[{MEMORY_KEY!r}]"))

    @staticmethod
    def from_program(program: Program) -> CompileReport:
        """``program``'s report.

        Raises:
            MetadataError: ``kernels`` is not a count or ``fallbacks`` not a table of
                counts (named, with the program's file when read from one).
        """
        kernels = program.metadata.get(KERNELS_KEY)
        fallbacks = program.metadata.get(FALLBACKS_KEY)
        return CompileReport(
            None if kernels is None
            else read_int(kernels, program_where(program, KERNELS_KEY), 0),
            None if fallbacks is None
            else read_int_map(fallbacks, program_where(program, FALLBACKS_KEY), 0),
            _memory(program.metadata.get(MEMORY_KEY), program_where(program, MEMORY_KEY)))

    def write_to(self, program: Program) -> None:
        """Set this report's keys in ``program.metadata``."""
        program.metadata.update(self.to_json())


def _memory(value: JSON, where: str) -> dict[str, dict[str, int]] | None:
    if value is None:
        return None
    return {g: read_int_map(v, f"{where}[{g!r}]", 0)
            for g, v in read_mapping(value, where).items()}
