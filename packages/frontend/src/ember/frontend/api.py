"""``ember.frontend.compile``: the user API, mirroring ``torch.compile``."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any, overload

import torch
from ember.frontend import capture_modes
from ember.frontend.capture_modes import (
    CompiledCallable,
    CompileRequest,
    resolve_capture_mode,
)
from ember.frontend.module_state import module_of
from ember.frontend.stats import CompileStats
from ember.runtime.pipeline import BACKENDS, check_mode, check_options, list_backends
from ember.runtime.stages import available_stages, load_stage

__all__ = ["CompiledModule", "compile"]

FRONTEND_OPTIONS: dict[str, tuple[type, ...]] = {
    "capture": (str,),
    "allow_breaks": (list, tuple),
}
"""The ``options=`` keys the frontend reads itself (every backend accepts them), with
the types their values may have; the backend's stages declare theirs
(``ember.runtime.stages.Stage.options``)."""


class CompiledModule(torch.nn.Module):
    """A compiled ``nn.Module``: calling it runs the compiled function; its parameters,
    buffers, ``train()``/``eval()`` are those of the original module (``_orig_mod``, as
    torch.compile names it), and attributes not found here are looked up there."""

    def __init__(self, module: torch.nn.Module, compiled: CompiledCallable,
                 settings: dict[str, Any] | None = None) -> None:
        super().__init__()
        self._orig_mod = module
        self._compiled = compiled
        # compile's keyword arguments: another module compiled with them (a copy, pickling)
        self._settings = settings

    @property
    def __ember_original__(self) -> torch.nn.Module:
        """What was compiled: a capture calling this compiled module captures it."""
        return self._orig_mod

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        """A compiled copy: the original module deep-copied and compiled again with the
        same settings (the compiled variants hold guards on this module's objects, and
        generated code, which a copy must not share)."""
        if self._settings is None:
            raise TypeError("this compiled module cannot be copied: compile a copy of "
                            "its module (_orig_mod) instead")
        return _compiled_again(copy.deepcopy(self._orig_mod, memo), self._settings)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (``pickle``, ``torch.save``) as its original module and ``compile``'s
        settings: loading compiles it again (the compiled variants are code and guards
        of this process), as torch.compile's wrapper does."""
        if self._settings is None:
            raise TypeError("this compiled module cannot be pickled: pickle its module "
                            "(_orig_mod) instead")
        return (_compiled_again, (self._orig_mod, self._settings))

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

    def __setattr__(self, name: str, value: Any) -> None:
        """Set the attribute on the original module (``c.act = nn.Tanh()``, ``c.scale =
        3.0``: what its forward reads), as torch.compile's wrapper does; this wrapper's
        own fields, and ``training`` on both."""
        original = self.__dict__.get("_modules", {}).get("_orig_mod")
        if original is None or name in _OWN_ATTRIBUTES:
            super().__setattr__(name, value)
            if name == "training" and original is not None:
                original.training = value
        else:
            setattr(original, name, value)

    def __delattr__(self, name: str) -> None:
        if name in _OWN_ATTRIBUTES:
            super().__delattr__(name)
        else:
            delattr(self._modules["_orig_mod"], name)


#: CompiledModule's own attributes (the others are the original module's)
_OWN_ATTRIBUTES = frozenset({"_orig_mod", "_compiled", "_settings", "training"})


def _compiled_again(module: torch.nn.Module, settings: dict[str, Any]) -> Any:
    """A pickled :class:`CompiledModule` loaded: ``module`` compiled with ``settings``."""
    return compile(module, **settings)


@overload
def compile(
    fn_or_module: None = None, *, backend: str = ..., mode: str | None = ...,
    fullgraph: bool = ..., dynamic: bool | None = ..., options: dict[str, Any] | None = ...,
    disable: bool = ...,
) -> Callable[[Callable[..., Any]], Any]: ...


@overload
def compile(
    fn_or_module: Callable[..., Any], *, backend: str = ..., mode: str | None = ...,
    fullgraph: bool = ..., dynamic: bool | None = ..., options: dict[str, Any] | None = ...,
    disable: bool = ...,
) -> Any: ...


def compile(
    fn_or_module: Callable[..., Any] | None = None,
    *,
    backend: str = "inductor",
    mode: str | None = None,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    options: dict[str, Any] | None = None,
    disable: bool = False,
) -> Any:
    """Compile a function or ``nn.Module`` with Ember, like ``torch.compile``.

    Usable directly (``compile(model)``), as a decorator (``@compile``) and as a
    decorator factory (``@compile(backend="eager")``).

    Args:
        fn_or_module: the function, bound method or module. For a module, its
            parameters and buffers are graph inputs read live at each call.
        backend: ``"eager"`` (reference interpreter), ``"aot_eager"`` or
            ``"inductor"`` (default).
        mode: None or ``"default"``; ``"max-autotune-no-cudagraphs"``: the inductor
            times candidate kernels on the device at compile time (block sizes of
            pointwise and reduction Triton kernels, matmul templates against the
            extern call) and keeps each decision in an on-disk cache
            (``docs/autotuning.md``); ``"max-autotune"`` adds CUDA graphs to that,
            ``"reduce-overhead"`` is CUDA graphs alone. The autotuning modes need the
            inductor: with ``backend="eager"`` or ``"aot_eager"`` they are a
            ``ValueError``, never ignored. A mode whose features are not
            implemented yet (``ember.runtime.pipeline.implemented_modes()``) raises
            ``NotImplementedError``, never silently the default.
        fullgraph: strict capture raises ``FullGraphError`` at a graph break instead
            of splitting the function (unless ``options["allow_breaks"]`` allows it);
            tracing capture always produces one full graph (or a ``CaptureError``).
        dynamic: symbolic shapes (``ember.frontend.dynamic``). None (default):
            automatic: the first call compiles static sizes; a call that misses only
            because sizes changed recompiles once with those dimensions symbolic, and
            they stay symbolic. True: every dimension of every tensor input (not
            parameters or buffers) symbolic from the start. False: never (each new
            size is a recompile). Sizes 0 and 1 always specialise;
            :func:`~ember.frontend.mark_dynamic` / ``mark_static`` mark dimensions.
        options: ``capture`` picks the capture mode (``"strict"``, the default, or
            ``"trace"``; see :mod:`ember.frontend.capture_modes`), ``allow_breaks``
            (strict, with ``fullgraph=True`` only, else a ``ValueError``) the break
            reasons allowed (non-empty strings, each a part of a reason); other keys go to
            the backend's stages, which declare the keys they read (e.g. inductor's
            ``strict``, ``eager_random``; aot's ``aot.*``).
        disable: True returns ``fn_or_module`` itself, uncompiled (as
            ``torch.compile(..., disable=True)``); the other arguments are still
            checked.

    Returns:
        A callable with ``.stats`` (:class:`CompileStats`) and ``.reset()``; a
        :class:`CompiledModule` for a module.

    Raises:
        ValueError: unknown backend, mode, capture mode or option key, a mode the
            backend would ignore, or an option or flag value of the wrong type (the
            message lists the valid ones).
        NotImplementedError: a torch.compile mode Ember does not implement yet.
        ember.runtime.stages.StageNotInstalledError: the backend needs a stage whose
            package is not installed (the message names it).
    """
    _check_backend(backend)
    check_mode(mode, backend)
    _check_flags(fullgraph, dynamic)
    if not isinstance(disable, bool):
        raise ValueError(f"disable={disable!r}: expected True or False")  # noqa: TRY004
    if options is not None and not isinstance(options, Mapping):
        raise ValueError(f"options={options!r}: expected a dict or None")
    capture = (options or {}).get("capture", capture_modes.DEFAULT_CAPTURE_MODE)
    if not isinstance(capture, str):
        # NOTE: a bad setting is a ValueError, whatever is wrong with it (one except)
        raise ValueError(f"option 'capture'={capture!r}: expected str")  # noqa: TRY004
    factory = resolve_capture_mode(capture)
    backend_options = _checked_options(backend, options, getattr(factory, "options", None))
    _check_allow_breaks(backend_options, capture, fullgraph)
    backend_options.pop("capture", None)
    if fn_or_module is None:  # a decorator factory: its settings are checked above
        def decorate(fn: Callable[..., Any]) -> Any:
            return compile(fn, backend=backend, mode=mode, fullgraph=fullgraph,
                           dynamic=dynamic, options=options, disable=disable)
        return decorate
    if disable:
        return fn_or_module
    module = module_of(fn_or_module)
    request = CompileRequest(fn_or_module, module, backend, mode, fullgraph, dynamic,
                             backend_options)
    compiled = factory(request)
    if isinstance(fn_or_module, torch.nn.Module):
        settings = {"backend": backend, "mode": mode, "fullgraph": fullgraph,
                    "dynamic": dynamic, "options": options}
        return CompiledModule(fn_or_module, compiled, settings)
    return compiled


def _check_backend(backend: str) -> None:
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"unknown Ember backend {backend!r}; backends: "
                         f"{', '.join(list_backends())}")
    for stage in BACKENDS[backend]:
        if stage not in available_stages():
            load_stage(stage)  # raises StageNotInstalledError naming the package


def _check_flags(fullgraph: bool, dynamic: bool | None) -> None:
    if not isinstance(fullgraph, bool):
        raise ValueError(f"fullgraph={fullgraph!r}: expected True or False")  # noqa: TRY004
    if dynamic is not None and not isinstance(dynamic, bool):
        raise ValueError(f"dynamic={dynamic!r}: expected None, True or False")


def _check_allow_breaks(options: Mapping[str, Any], capture: str, fullgraph: bool) -> None:
    """``allow_breaks``: a list of break reasons (non-empty strings, matched as parts of
    a break's reason), read by strict capture under ``fullgraph=True`` only.

    Raises:
        ValueError: a reason that is no non-empty string, or ``allow_breaks`` where
            nothing reads it (it would be ignored).
    """
    if "allow_breaks" not in options:
        return
    reasons = options["allow_breaks"]
    if not all(isinstance(r, str) and r for r in reasons):
        raise ValueError(f"option 'allow_breaks'={reasons!r}: expected a list or tuple of "
                         "break reasons, each a non-empty string (a part of the reason, "
                         "e.g. 'print')")
    if capture != "strict" or not fullgraph:
        where = (f"capture={capture!r} (it has no graph breaks)" if capture != "strict"
                 else "fullgraph=False (every graph break is allowed)")
        raise ValueError(f"option 'allow_breaks' is read by strict capture with "
                         f"fullgraph=True only; with {where} it would be ignored")


def _checked_options(
    backend: str,
    options: Mapping[str, Any] | None,
    capture_options: Mapping[str, tuple[type, ...]] | None,
) -> dict[str, Any]:
    """A copy of ``options``, each key checked against what the frontend, the capture
    mode (``capture_options``: its factory's ``options``) and the backend's stages
    (``Stage.options``) read.

    Raises:
        ValueError: ``options`` names a key nobody reads (listing the valid ones), or
            a value of the wrong type.
    """
    if options is None:
        return {}
    accepted = dict(FRONTEND_OPTIONS)
    accepted.update(capture_options or {})
    check_options(backend, options, accepted)
    return dict(options)
