"""The compiled function of the tracing capture mode: a cache of captured programs,
each behind its guards, with a recompile limit and an eager fallback."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import linecache
import types
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from ember.frontend._torch import fake_mode_active
from ember.frontend.autocast import compile_without_autocast, run_graph
from ember.frontend.capture_modes import CompileRequest
from ember.frontend.declined_sizes import (
    SymbolicProgramDeclined,
    compile_for_policy,
    static_from_now_on,
)
from ember.frontend.dynamic import DynamicPolicy
from ember.frontend.guards import GuardFailure, GuardSet, Matcher
from ember.frontend.inference_outputs import as_inference
from ember.frontend.module_state import ModuleLayout, callable_name
from ember.frontend.pytree import flatten
from ember.frontend.shape_guards import install_stage_guards
from ember.frontend.stats import CompileStats, report_counts
from ember.frontend.trace import ArgumentInputs, OutputLayout, trace_capture
from ember.frontend.trace_guards import TraceCall
from ember.runtime.config import config
from ember.runtime.ir import SourceLocation
from ember.runtime.ir.gc_pause import collector_paused
from ember.runtime.logs import log, log_enabled
from ember.runtime.phases import timed
from ember.runtime.pipeline import compile_program

__all__ = ["CacheEntry", "RecompileLimitWarning", "TracedFunction"]


class RecompileLimitWarning(UserWarning):
    """A compiled function reached its recompile limit and now runs eagerly."""


@dataclass
class CacheEntry:
    """One compiled variant: its guards' check function (``match(TraceCall, None)``),
    the compiled program, and how to feed it and rebuild its result."""

    guards: GuardSet
    match: Matcher
    run_program: Callable[[list[Any]], list[Any]]
    arguments: ArgumentInputs
    output: OutputLayout
    # the grad mode to run under when not the caller's (guarded): on for an enable_grad
    # block under the caller's no_grad (trace_grad.py)
    grad: bool | None = None
    # the outputs made in a `with torch.inference_mode()` block (inference_outputs.py)
    inference: tuple[int, ...] = ()

    def __call__(self, leaves: list[Any], state: list[torch.Tensor]) -> Any:
        inputs: list[Any] = list(state)
        inputs.extend(self.arguments.gather(leaves))
        # NOTE: with autocast off: the graph holds its casts (ember/frontend/autocast.py)
        if self.grad is None:
            outputs = run_graph(self.run_program, inputs)
        else:
            with torch.set_grad_enabled(self.grad):
                outputs = run_graph(self.run_program, inputs)
        if self.inference:
            outputs = as_inference(list(outputs), self.inference)
        return self.output.rebuild(outputs)


class TracedFunction:
    """``ember.frontend.compile`` in tracing mode (see :func:`ember.frontend.compile`).

    At each call the arguments are checked against the cached entries' guards, newest
    last; the first entry whose guards pass runs. When none does, the function is traced
    again and compiled (a recompile; ``EMBER_LOGS=recompiles`` names the failed guard,
    the value seen and the ``def`` line whose arguments it guards), until
    ``config.recompile_limit`` entries exist (``EMBER_RECOMPILE_LIMIT``, default 8,
    counting the first compile, like torch's ``recompile_limit``); after that every
    call that misses the cache runs eagerly (counted in ``stats.eager_fallback_calls``
    and ``stats.recompile_limit_fallbacks``), and ONE :class:`RecompileLimitWarning`
    names the failing guard.

    The module's parameter/buffer layout is read at the first call; when its tree
    changes (a submodule swapped, a parameter added: ``ModuleLayout.changed``, checked at
    every call, also for modules passed as arguments) the entries made with the old
    layout are dropped and the call recompiles (logged under ``recompiles``). Before,
    they kept running the old submodules' code and parameters. So are they when the
    module's ``forward`` is replaced (on the instance or the class) or a forward
    (pre-)hook is added to or removed from it (not from its submodules).
    """

    def __init__(self, request: CompileRequest) -> None:
        self.request = request
        self.stats = CompileStats()
        self._entries: list[CacheEntry] = []
        self._layout: ModuleLayout | None = None
        self._forward: tuple[Any, ...] = ()
        self._warned = False
        self._policy = DynamicPolicy(request.dynamic)
        self._bound: weakref.WeakKeyDictionary[Any, TracedFunction] = (
            weakref.WeakKeyDictionary()
        )
        if not isinstance(request.fn, torch.nn.Module):
            functools.update_wrapper(self, request.fn, updated=())

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        """A decorated method (``@compile def forward(self, x)``): one compiled function
        per instance, with the instance's parameters and buffers as graph inputs when it
        is an ``nn.Module``."""
        if obj is None:
            return self
        bound = self._bound.get(obj)
        if bound is None:
            method = types.MethodType(self.request.fn, obj)
            module = obj if isinstance(obj, torch.nn.Module) else None
            bound = TracedFunction(dataclasses.replace(self.request, fn=method, module=module))
            self._bound[obj] = bound
        return bound

    def reset(self) -> None:
        """Drop every compiled entry and zero the stats."""
        self.stats = CompileStats()
        self._entries = []
        self._layout = None
        self._warned = False
        self._policy = DynamicPolicy(self.request.dynamic)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if fake_mode_active():  # called from code being captured: become part of it
            return self.request.fn(*args, **kwargs)
        leaves, spec = flatten((args, kwargs))
        module = self.request.module
        if module is not None and self._layout is not None and (
                self._layout.changed() or not _same_forward(module, self._forward)):
            self._drop_entries(lambda entry: True, "the compiled module (or its forward)")
            self._layout = None
        if module is not None and self._layout is None:
            self._layout = ModuleLayout(module)
            self._forward = _forward_of(module)  # forward replaced, hooks: traced again
        self._drop_entries(lambda entry: any(
            layout.changed() for layout in entry.arguments.layouts.values()),
            "a module argument")
        state = self._layout.read() if self._layout is not None else []
        call = TraceCall(leaves, state, spec)
        for entry in self._entries:
            if entry.match(call, None) is not None:
                self.stats.cache_hits += 1
                return entry(leaves, state)
        if len(self._entries) >= max(config.recompile_limit, 1):
            if not self._warned:
                self._warn_limit(self._last_failure(call))
            elif log_enabled("recompiles"):
                failure = self._last_failure(call)
                log("recompiles", f"{self._name()} runs eagerly (recompile limit "
                    f"{config.recompile_limit}): guard failed: "
                    f"{failure.located() if failure is not None else 'none'}")
            self.stats.eager_fallback_calls += 1
            self.stats.recompile_limit_fallbacks += 1
            return self.request.fn(*args, **kwargs)
        if self._entries:
            self._policy.note_misses((e.guards.failures(call, None)
                                      for e in reversed(self._entries)), self._name())
        if self._entries and log_enabled("recompiles"):
            failure = self._last_failure(call)
            shown = failure.located() if failure is not None else "no guard failed"
            log("recompiles", f"recompiling {self._name()} (entry {len(self._entries) + 1} "
                f"of at most {config.recompile_limit}): guard failed: {shown}")
        entry = self._compile(args, kwargs)
        return entry(leaves, state)

    # ---- internals --------------------------------------------------------------------

    def _drop_entries(self, stale: Callable[[CacheEntry], bool], what: str) -> None:
        """Drop the entries traced with a module tree that changed since (the next
        call that needs one recompiles, counted in ``stats.recompiles``)."""
        if not any(map(stale, self._entries)):  # the usual call: nothing changed
            return
        kept = [entry for entry in self._entries if not stale(entry)]
        log("recompiles", f"{self._name()}: the submodules, parameters, buffers or "
            f"methods of {what} changed since it was traced; recompiling")  # or forward replaced
        if not kept:  # this call compiles again; with entries left, _compile counts it
            self.stats.recompiles += 1
        self._entries = kept

    def _compile(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CacheEntry:
        # (the caller's saved-tensor hooks stay out of the recording: a checkpoint
        # counted its tensors; imported here, a warm start never compiles)
        from ember.runtime.saved_hooks import hooks_kept_out

        with collector_paused(), hooks_kept_out():  # (and a cold compile's collections)
            return self._capture_and_compile(args, kwargs)

    def _capture_and_compile(self, args: tuple[Any, ...], kwargs: dict[str, Any]
                             ) -> CacheEntry:
        req = self.request
        captured = timed("capture")(trace_capture)(req.fn, req.module, args, kwargs,
                                                   self._layout, self._policy)
        for layout in (self._layout, *captured.arguments.layouts.values()):
            if layout is not None:
                layout.settle()
        captured.guards.set_origin(definition_site(req.fn))
        program = captured.program
        log("graphs", lambda: f"captured {self._name()}:\n{_printed(program)}")
        log("guards", lambda: f"guards of {self._name()} "
                              f"(entry {len(self._entries)}):\n{captured.guards.describe()}")
        grad = captured.grad if captured.grad != torch.is_grad_enabled() else None
        try:
            with torch.set_grad_enabled(captured.grad):  # what the stages see (aot: training)
                compiled = compile_without_autocast(lambda: compile_for_policy(
                    compile_program, program, req.backend, dict(req.options), req.mode,
                    self._policy))
        except SymbolicProgramDeclined as e:  # (declined_sizes): static from now on
            static_from_now_on(self._policy, e, self._name())
            return self._capture_and_compile(args, kwargs)
        final = getattr(compiled, "program", program)
        if captured.symbolic_inputs and "forward" in final.graphs:
            install_stage_guards(program.forward, final.graphs["forward"],
                                 captured.symbolic_inputs, captured.guards.add)
        title = f"{self._name()} (entry {len(self._entries)})"
        entry = CacheEntry(captured.guards, captured.guards.matcher(title=title), compiled,
                           captured.arguments, captured.output, grad, captured.inference)
        self.stats.compiles += 1
        self.stats.graphs += 1
        if self._entries:
            self.stats.recompiles += 1
        self.stats.kernels, self.stats.fallbacks = report_counts(final)
        self._entries.append(entry)
        return entry

    def _last_failure(self, call: TraceCall) -> GuardFailure | None:
        if not self._entries:
            return None
        return self._entries[-1].guards.first_failure(call, None)

    def _warn_limit(self, failure: GuardFailure | None) -> None:
        """The one warning (and log line) that the recompile limit is reached."""
        self._warned = True
        message = (
            f"ember.frontend.compile: {self._name()} reached the recompile limit "
            f"({config.recompile_limit} compiled variants); calls that match none of "
            f"them run eagerly (stats.recompile_limit_fallbacks). Last guard failure: "
            f"{failure.located() if failure is not None else 'none'}. Raise "
            "EMBER_RECOMPILE_LIMIT to compile more variants."
        )
        log("recompiles", message)
        warnings.warn(message, RecompileLimitWarning, stacklevel=3)

    def _name(self) -> str:
        return callable_name(self.request.fn)


def definition_site(fn: Any) -> SourceLocation | None:
    """The ``def`` line of ``fn`` (a function, bound method, or module: its
    ``forward``), where the values a trace guards enter the user's code."""
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    target = getattr(target, "__func__", target)
    code = getattr(inspect.unwrap(target), "__code__", None)
    if not isinstance(code, types.CodeType):
        return None
    line = code.co_firstlineno
    return SourceLocation(code.co_filename, line, code.co_name,
                          linecache.getline(code.co_filename, line).strip())


def _printed(program: Any) -> str:
    from ember.runtime.ir.printer import print_program

    return print_program(program)


def _forward_of(module: torch.nn.Module) -> tuple[Any, ...]:
    """What a call of ``module`` runs besides its tree: its instance ``forward`` (None
    when unset), its class's ``forward``, the keys of its forward (pre-)hook tables."""
    return (module.__dict__.get("forward"), getattr(type(module), "forward", None),
            tuple(module._forward_pre_hooks), tuple(module._forward_hooks))


def _same_forward(module: torch.nn.Module, seen: tuple[Any, ...]) -> bool:
    now = _forward_of(module)
    return now[0] is seen[0] and now[1] is seen[1] and now[2:] == seen[2:]
