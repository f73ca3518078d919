"""The three compilers the harness puts side by side: ``eager``, ``torch``
(``torch.compile``, the reference to beat) and ``ember`` (``ember.frontend.compile``).

Everything that touches torch.compile's private counters lives here (tools may; packages
never do).
"""

from __future__ import annotations

import ast

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

COMPILERS = ("eager", "torch", "ember", "dynamo_ember")
"""``dynamo_ember``: ``torch.compile(fn, backend="ember")`` (Dynamo captures, Ember's aot and
inductor compile; the runtime's ``torch_dynamo_backends`` entry point)."""
EMBER_BACKENDS = ("eager", "aot_eager", "inductor")


@dataclass(frozen=True)
class GraphStats:
    """What a compiler reports about a compiled callable (``None``: not reported)."""

    graphs: int | None = None
    graph_breaks: int | None = None
    kernels: int | None = None
    fallbacks: int | None = None


def label(compiler: str, ember_backend: str, dynamic: bool = False) -> str:
    """The name of a compiler in tables: ``torch``, ``ember[inductor]``, and with
    ``dynamic`` (compiled with ``dynamic=True``) ``torch[dynamic]``,
    ``ember[inductor,dynamic]``."""
    tags = ([ember_backend] if compiler == "ember" else []) + (["dynamic"] if dynamic else [])
    return f"{compiler}[{','.join(tags)}]" if tags else compiler


def reset(compiler: str) -> None:
    """Forget earlier compilations, so models do not share caches or recompile limits."""
    if compiler in ("torch", "dynamo_ember"):
        import torch._dynamo
        import torch._dynamo.utils

        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        try:
            import torch._inductor.metrics

            torch._inductor.metrics.reset()
        except ImportError:  # pragma: no cover - inductor always ships with torch
            pass


def reset_counters(compiler: str) -> None:
    """Zero the counters :func:`graph_stats` reads, keeping what was compiled: a second
    compile by ``compiler`` of the same model (another ``mode``) gets figures of its own
    while the first compiled callable stays compiled (:func:`reset` would drop it)."""
    if compiler in ("torch", "dynamo_ember"):
        import torch._dynamo.utils
        import torch._inductor.metrics

        torch._dynamo.utils.counters.clear()
        torch._inductor.metrics.reset()


def parse_ember_options(items: list[str]) -> dict[str, Any]:
    """``["precompile_triton=true", "max_fusion_size=64", "capture=strict"]`` ->
    ``{"precompile_triton": True, "max_fusion_size": 64, "capture": "strict"}``: values are
    Python literals, ``true``/``false``/``none`` in any case, or else strings.

    Raises:
        ValueError: an item that is not ``KEY=VALUE``.
    """
    options: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--ember-option {item!r}: expected KEY=VALUE")
        words = {"true": True, "false": False, "none": None}
        if text.strip().lower() in words:
            options[key] = words[text.strip().lower()]
            continue
        try:
            options[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            options[key] = text
    return options


def compile_fn(compiler: str, fn: Callable[..., Any], ember_backend: str = "inductor",
               mode: str | None = None, ember_options: dict[str, Any] | None = None,
               dynamic: bool | None = None) -> Callable[..., Any]:
    """``fn`` compiled by ``compiler`` (lazily: compilers compile on the first call).
    ``mode`` (``None``, ``"reduce-overhead"``, ``"max-autotune"``, ...) and ``dynamic``
    (``None``: automatic, each compiler's default; ``True``: every input dimension
    symbolic from the first compile; ``False``: never) go to both torch.compile and
    Ember, which mirror each other; ``ember_options`` is Ember's ``options=`` (e.g.
    ``{"capture": "strict"}``). Eager ignores ``mode`` and ``dynamic``.

    Raises:
        ValueError: unknown compiler.
        ImportError / AttributeError: Ember's frontend is not installed or has no ``compile``.
    """
    if compiler == "eager":
        return fn
    if compiler == "torch":
        return torch.compile(fn, mode=mode, dynamic=dynamic)
    if compiler == "dynamo_ember":
        options = {"backend": ember_backend, **(ember_options or {})}
        return torch.compile(fn, backend="ember", mode=mode, dynamic=dynamic, options=options)
    if compiler == "ember":
        import ember.frontend

        compiled: Callable[..., Any] = ember.frontend.compile(
            fn, backend=ember_backend, mode=mode, dynamic=dynamic, options=ember_options or None
        )
        return compiled
    raise ValueError(f"unknown compiler {compiler!r}; expected one of {COMPILERS}")


def graph_stats(compiler: str, compiled: Callable[..., Any]) -> GraphStats:
    """Graphs, graph breaks, kernels and fallbacks as ``compiler`` reports them.

    Ember's compiled callable exposes ``.stats`` (``compiles, graphs, graph_breaks,
    kernels, fallbacks``); torch.compile's figures come from its global counters, so call
    :func:`reset` before compiling each model.
    """
    if compiler == "ember":
        stats = getattr(compiled, "stats", None)
        return GraphStats(
            graphs=_int_or_none(getattr(stats, "graphs", None)),
            graph_breaks=_int_or_none(getattr(stats, "graph_breaks", None)),
            kernels=_int_or_none(getattr(stats, "kernels", None)),
            fallbacks=_int_or_none(getattr(stats, "fallbacks", None)),
        )
    if compiler == "dynamo_ember":
        from torch._dynamo.utils import counters

        return GraphStats(graphs=int(counters["stats"].get("unique_graphs", 0)),
                          graph_breaks=int(sum(counters["graph_break"].values())))
    if compiler == "torch":
        from torch._dynamo.utils import counters

        kernels = None
        try:
            import torch._inductor.metrics

            kernels = int(torch._inductor.metrics.generated_kernel_count)
        except (ImportError, AttributeError):
            pass
        return GraphStats(
            graphs=int(counters["stats"].get("unique_graphs", 0)),
            graph_breaks=int(sum(counters["graph_break"].values())),
            kernels=kernels,
        )
    return GraphStats()


def compile_count(compiler: str, compiled: Callable[..., Any]) -> int | None:
    """How many graphs ``compiler`` has compiled so far: Ember's ``stats.compiles`` (of
    this callable); torch.compile's ``unique_graphs`` counter (process-wide: read it
    before and after a call and take the difference); ``None`` for eager."""
    if compiler == "ember":
        return _int_or_none(getattr(getattr(compiled, "stats", None), "compiles", None))
    if compiler in ("torch", "dynamo_ember"):
        from torch._dynamo.utils import counters

        return int(counters["stats"].get("unique_graphs", 0))
    return None


def _int_or_none(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple, set, dict)):
        return len(value)
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
