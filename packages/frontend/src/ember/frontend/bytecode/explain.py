"""``explain(fn)(*args)``: what strict capture makes of one call of ``fn``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ember.frontend.bytecode.breaks import BreakInfo


@dataclass
class ExplainOutput:
    """The result of :func:`explain`: ``graph_count``, ``break_count``, each break's
    reason and source line (``breaks``), ``ops_per_graph`` and the ``guards`` text."""

    graph_count: int
    break_count: int
    breaks: list[BreakInfo] = field(default_factory=list)
    ops_per_graph: list[int] = field(default_factory=list)
    guards: str = ""

    def __str__(self) -> str:
        lines = [f"Graph count: {self.graph_count}", f"Graph break count: {self.break_count}",
                 f"Ops per graph: {self.ops_per_graph}"]
        for i, b in enumerate(self.breaks, 1):
            lines.append(f"Break {i}: {b.describe()}")
        lines.append("Guards:")
        lines.append(self.guards)
        return "\n".join(lines)


def explain(fn: Callable[..., Any], backend: str = "eager") -> Callable[..., ExplainOutput]:
    """``explain(fn)(*args, **kwargs)`` compiles ``fn`` in strict mode, runs it once on
    the arguments and reports graphs, breaks (reason, file, line, source text), ops per
    graph and guards."""
    from ember.frontend.bytecode.strict import StrictFunction
    from ember.frontend.capture_modes import CompileRequest

    def run(*args: Any, **kwargs: Any) -> ExplainOutput:
        module = fn if hasattr(fn, "parameters") else None
        compiled = StrictFunction(CompileRequest(fn, module, backend))  # type: ignore[arg-type]
        compiled(*args, **kwargs)
        graphs = compiled.graphs
        return ExplainOutput(
            graph_count=len(graphs),
            break_count=compiled.stats.graph_breaks,
            breaks=list(compiled.breaks),
            ops_per_graph=[len(g.forward.calls()) for g in graphs],
            guards=compiled.guard_text(),
        )

    return run
