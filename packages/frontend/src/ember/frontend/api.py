"""``ember.frontend.compile``: the user API, mirroring ``torch.compile``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, overload

import torch
from ember.frontend import capture_modes
from ember.frontend.capture_modes import (
    DEFAULT_CAPTURE_MODE,
    CompiledCallable,
    CompileRequest,
    resolve_capture_mode,
)
from ember.frontend.module_state import module_of
from ember.frontend.stats import CompileStats
from ember.runtime.pipeline import BACKENDS, list_backends
from ember.runtime.stages import available_stages, load_stage

__all__ = ["CompiledModule", "compile"]

_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


class CompiledModule(torch.nn.Module):
    """A compiled ``nn.Module``: calling it runs the compiled function; its parameters,
    buffers, ``train()``/``eval()`` are those of the original module (``_orig_mod``, as
    torch.compile names it), and attributes not found here are looked up there."""

    def __init__(self, module: torch.nn.Module, compiled: CompiledCallable) -> None:
        super().__init__()
        self._orig_mod = module
        self._compiled = compiled

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._compiled(*args, **kwargs)

    @property
    def stats(self) -> CompileStats:
        """The compiled function's :class:`CompileStats`."""
        return self._compiled.stats

    def reset(self) -> None:
        """Drop every compiled variant; the next call captures again."""
        self._compiled.reset()

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["_orig_mod"], name)


@overload
def compile(
    fn_or_module: None = None, *, backend: str = ..., mode: str | None = ...,
    fullgraph: bool = ..., dynamic: bool | None = ..., options: dict[str, Any] | None = ...,
) -> Callable[[Callable[..., Any]], Any]: ...


@overload
def compile(
    fn_or_module: Callable[..., Any], *, backend: str = ..., mode: str | None = ...,
    fullgraph: bool = ..., dynamic: bool | None = ..., options: dict[str, Any] | None = ...,
) -> Any: ...


def compile(
    fn_or_module: Callable[..., Any] | None = None,
    *,
    backend: str = "inductor",
    mode: str | None = None,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    options: dict[str, Any] | None = None,
) -> Any:
    """Compile a function or ``nn.Module`` with Ember, like ``torch.compile``.

    Usable directly (``compile(model)``), as a decorator (``@compile``) and as a
    decorator factory (``@compile(backend="eager")``).

    Args:
        fn_or_module: the function, bound method or module. For a module, its
            parameters and buffers are graph inputs read live at each call.
        backend: ``"eager"`` (reference interpreter), ``"aot_eager"`` or
            ``"inductor"`` (default).
        mode: None, ``"default"``, ``"reduce-overhead"``, ``"max-autotune"``; passed
            to the stages.
        fullgraph: accepted; tracing capture always produces one full graph.
        dynamic: None or False; True (symbolic shapes) is not implemented yet.
        options: backend options; ``options["capture"]`` picks the capture mode
            (``"strict"``, the default, or ``"trace"``; see :mod:`ember.frontend.capture_modes`).

    Returns:
        A callable with ``.stats`` (:class:`CompileStats`) and ``.reset()``; a
        :class:`CompiledModule` for a module.

    Raises:
        ValueError: unknown backend, mode or capture mode.
        NotImplementedError: ``dynamic=True``.
        ember.runtime.stages.StageNotInstalledError: the backend needs a stage whose
            package is not installed (the message names it).
    """
    if fn_or_module is None:
        def decorate(fn: Callable[..., Any]) -> Any:
            return compile(fn, backend=backend, mode=mode, fullgraph=fullgraph,
                           dynamic=dynamic, options=options)
        return decorate
    _check_backend(backend)
    if mode not in _MODES:
        raise ValueError(f"unknown mode {mode!r}; modes: "
                         f"{', '.join(str(m) for m in _MODES if m is not None)}")
    if dynamic:
        raise NotImplementedError(
            "ember.frontend.compile(dynamic=True): symbolic shapes are not supported yet; "
            "use dynamic=None or False (each new shape is a recompile)"
        )
    backend_options = dict(options or {})
    capture = backend_options.pop("capture", capture_modes.DEFAULT_CAPTURE_MODE)
    factory = resolve_capture_mode(capture)
    module = module_of(fn_or_module)
    request = CompileRequest(fn_or_module, module, backend, mode, fullgraph, dynamic,
                             backend_options)
    compiled = factory(request)
    if isinstance(fn_or_module, torch.nn.Module):
        return CompiledModule(fn_or_module, compiled)
    return compiled


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"unknown Ember backend {backend!r}; backends: "
                         f"{', '.join(list_backends())}")
    for stage in BACKENDS[backend]:
        if stage not in available_stages():
            load_stage(stage)  # raises StageNotInstalledError naming the package
