"""Counters of a compiled function, read by users and the benchmark harness."""

from __future__ import annotations

from dataclasses import dataclass

from ember.runtime.ir import Program
from ember.runtime.ir.contracts import CompileReport


@dataclass
class CompileStats:
    """What a compiled function has done so far.

    ``compiles``: captures compiled (the first one included); ``recompiles``: those
    caused by a guard failure; ``cache_hits``: calls served by an existing entry;
    ``graphs``: graphs captured (one per compile in tracing mode); ``graph_breaks``:
    always 0 in tracing mode; ``eager_fallback_calls``: calls (or, in strict mode, the
    rest of a call after a graph break) run eagerly, for any reason: the recompile
    limit, code strict capture cannot interpret, a state it cannot rebuild;
    ``recompile_limit_fallbacks``: those of them caused by the recompile limit (never
    silent: one ``RecompileLimitWarning`` per compiled function, and the failing guard
    with its source line under ``EMBER_LOGS=recompiles``); ``kernels`` /
    ``fallbacks``: from the last compiled program's ``metadata["kernels"]`` /
    ``metadata["fallbacks"]`` (a count; None when the backend does not report them;
    see :func:`report_counts`); ``capture_cache_hits``: first calls answered by the
    capture cache (:mod:`ember.frontend.capture_cache`: loaded, not captured; each also
    counts in ``cache_hits`` and ``graphs``, not in ``compiles``).
    """

    compiles: int = 0
    recompiles: int = 0
    cache_hits: int = 0
    graphs: int = 0
    graph_breaks: int = 0
    eager_fallback_calls: int = 0
    recompile_limit_fallbacks: int = 0
    kernels: int | None = None
    fallbacks: int | None = None
    capture_cache_hits: int = 0


def report_counts(program: Program) -> tuple[int | None, int | None]:
    """``(kernels, fallbacks)`` of a compiled program: its number of generated kernels
    and of distinct ops that run eagerly, from its
    :class:`~ember.runtime.ir.contracts.CompileReport`; None where the backend reports
    neither (``eager``, ``aot_eager``).

    Raises:
        ember.runtime.ir.contracts.MetadataError: the program's ``kernels`` or
            ``fallbacks`` metadata is not a count / a table of counts.
    """
    report = CompileReport.from_program(program)
    return report.kernels, None if report.fallbacks is None else len(report.fallbacks)


def add_report_counts(stats: CompileStats, program: Program | None) -> None:
    """Add ``program``'s :func:`report_counts` (a compiled graph of a strict capture:
    one of several) to ``stats``; nothing for None or a count the backend does not
    report."""
    if program is None:
        return
    for key, count in zip(("kernels", "fallbacks"), report_counts(program)):
        if count is not None:
            setattr(stats, key, (getattr(stats, key) or 0) + count)
