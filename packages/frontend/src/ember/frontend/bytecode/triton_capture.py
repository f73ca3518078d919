"""Capturing a user Triton kernel launch as one ``ember::triton_kernel`` node.

``kernel[grid](*args, **kwargs)`` (also ``kernel.run(..., grid=g, warmup=False)``, and
through ``triton.autotune`` / ``triton.heuristics``) reached by strict capture
(:func:`capture_launch`) or by trace capture (``ember.frontend.trace_triton``) becomes::

    %k = ember::triton_kernel.default("mod:kernel", [%x, %out], [ints...], "{spec}")
    %copy_ = aten::copy_.default(%out, %k.0)

How each part is decided (:func:`record_launch`, shared by both captures through a
:class:`LaunchSite`):

- **kernel**: the module attribute holding the launched object (``module:name``); its
  identity is guarded in strict capture (trace capture guards no globals). A kernel no
  module attribute holds (made inside a function) is not captured (a graph break, or a
  ``CaptureError`` in trace capture): the run time finds kernels by name, never from
  source in a file.
- **arguments**: tensors go to the node's tensor list (detached: a launch records no
  autograd, as in eager), Python ints and sizes (``SymInt``) to its integer list,
  floats, bools, strings, None, ``tl.constexpr`` values and ``tl`` dtypes
  (``tl.float16``, by name) into the spec as constants.
- **grid**: a tuple is evaluated now; a grid function is called (strict capture
  interprets it, so what it reads is guarded; trace capture runs it) with the launch's
  meta-parameters, once per ``triton.autotune`` config (its keyword values added, then
  the ``triton.heuristics`` values computed from them): the node carries one grid per
  config, and the run time picks the one of the config Triton's autotuner chose.
- **writes**: the tensor arguments whose parameters the kernel may write
  (:mod:`.triton_writes`; all of them when the analysis is unsure). The node returns a
  written copy of each, copied back into the caller's tensor with ``aten::copy_``.
- **source**: the kernel's source and that of the jit functions it calls go into the
  program's files (``user_kernels/<name>_<sha>.py``); the spec holds its SHA-256.
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Callable
from typing import Any, Protocol

import torch
from ember.frontend.bytecode.frame import location_of
from ember.frontend.bytecode.interpreter import is_fake_tensor
from ember.frontend.bytecode.triton_writes import written_parameters
from ember.runtime.user_kernel_spec import (
    Constant,
    GridChoice,
    LaunchArg,
    UserKernelCall,
    kernel_source,
    source_file_name,
)
from ember.runtime.user_kernels import triton_kernel

__all__ = ["LaunchSite", "LaunchUnsupported", "capture_launch", "kernel_key", "record_launch",
           "run_parts"]


class LaunchUnsupported(Exception):
    """A launch this module cannot capture: the message is the graph-break reason."""


def kernel_key(kernel: Any) -> str:
    """``module:name`` of a module attribute holding ``kernel``: in the module defining
    its jit function, else the first imported module (by name) that holds it.

    Raises:
        LaunchUnsupported: no module attribute holds it.
    """
    from ember.runtime.user_kernel_spec import base_function

    home = base_function(kernel).__module__
    for module_name in [home, *sorted(n for n in list(sys.modules) if n != home)]:
        module = sys.modules.get(module_name)
        names = getattr(module, "__dict__", None)
        if not isinstance(names, dict):
            continue
        for name, value in list(names.items()):
            if value is kernel:
                return f"{module_name}:{name}"
    raise LaunchUnsupported(
        "no module attribute holds the Triton kernel object (made inside a function?): "
        "a compiled launch finds its kernel by name")


def _launch_parts(fn: Any, kernel: Any, args: list[Any],
                  kwargs: dict[str, Any]) -> tuple[Any, list[Any], dict[str, Any]]:
    """(grid, arguments, keywords) of calling ``fn`` (a launcher of ``kernel``)."""
    while isinstance(fn, functools.partial):
        args = [*fn.args, *args]
        kwargs = {**fn.keywords, **kwargs}
        fn = fn.func
    kwargs = dict(kwargs)
    if isinstance(fn, types.FunctionType) and "grid" in fn.__code__.co_freevars:
        # the launcher kernel[grid] returns: a function closing over the grid
        cell = fn.__closure__[fn.__code__.co_freevars.index("grid")]  # type: ignore[index]
        return cell.cell_contents, list(args), kwargs
    if getattr(fn, "__self__", None) is kernel and getattr(fn, "__name__", "") == "run":
        grid, kwargs = run_parts(kwargs)
        return grid, list(args), kwargs
    raise LaunchUnsupported(f"{getattr(fn, '__name__', type(fn).__name__)} of the kernel "
                            "(only kernel[grid](...) and kernel.run(..., grid=...) launch)")


def run_parts(kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """(grid, the other keywords) of the keywords of a ``kernel.run`` call.

    Raises:
        LaunchUnsupported: no ``grid=``, or not ``warmup=False`` (a compile without a
            launch).
    """
    kwargs = dict(kwargs)
    if kwargs.pop("warmup", True):
        raise LaunchUnsupported("warmup of the kernel (it compiles without launching; "
                                "only kernel[grid](...) and kernel.run(..., grid=..., "
                                "warmup=False) launch)")
    if "grid" not in kwargs:
        raise LaunchUnsupported("kernel.run without grid=")
    return kwargs.pop("grid"), kwargs


class _Encoder:
    """The node's tensor and integer lists, and each argument's :class:`LaunchArg`."""

    def __init__(self, outside_tensors: bool) -> None:
        self.tensors: list[torch.Tensor] = []
        self.ints: list[int | torch.SymInt] = []
        self.outside_tensors = outside_tensors
        self.outside: set[int] = set()  # indexes of tensors from outside the capture

    def same_tensors(self) -> tuple[tuple[int, ...], ...]:
        """Groups of indexes of ``tensors`` that are one tensor object."""
        groups: dict[int, list[int]] = {}
        for i, t in enumerate(self.tensors):
            groups.setdefault(id(t), []).append(i)
        return tuple(tuple(g) for g in groups.values() if len(g) > 1)

    def int_index(self, value: int | torch.SymInt) -> int:
        self.ints.append(value)
        return len(self.ints) - 1

    def arg(self, value: Any, name: str | None, what: str) -> LaunchArg:
        if isinstance(value, torch.Tensor):
            if not is_fake_tensor(value):
                if not self.outside_tensors:
                    raise LaunchUnsupported(f"{what} is a tensor captured from outside "
                                            "the compiled function")
                self.outside.add(len(self.tensors))
            self.tensors.append(value)
            return LaunchArg("tensor", len(self.tensors) - 1, name=name)
        return _constant_or_int(self, value, name, what)


def _constant_or_int(enc: _Encoder, value: Any, name: str | None, what: str) -> LaunchArg:
    language = sys.modules.get("triton.language")
    if language is not None and isinstance(value, language.constexpr):
        value = value.value
    if language is not None and isinstance(value, language.dtype):
        return LaunchArg("tl_dtype", value=str(value.name), name=name)  # tl.float16
    if isinstance(value, torch.SymInt) or (isinstance(value, int)
                                           and not isinstance(value, bool)):
        return LaunchArg("int", enc.int_index(value), name=name)
    if isinstance(value, (bool, float, str, type(None))):
        return LaunchArg("const", value=value, name=name)
    raise LaunchUnsupported(f"{what} is a {type(value).__name__} (captured launches take "
                            "tensors, ints, floats, bools, strings, None and tl dtypes)")


def _wrappers(kernel: Any) -> list[Any]:
    """``kernel`` and the objects it wraps, outermost first, down to the jit function."""
    chain = [kernel]
    while not isinstance(getattr(chain[-1], "fn", None), types.FunctionType):
        inner = getattr(chain[-1], "fn", None)
        if inner is None or len(chain) > 16:
            break
        chain.append(inner)
    return chain


def _configs(chain: list[Any]) -> list[dict[str, Any]]:
    """The keyword values of each ``triton.autotune`` config (``[{}]`` without one)."""
    for wrapper in chain:
        configs = getattr(wrapper, "configs", None)
        if type(wrapper).__name__ == "Autotuner" and configs:
            return [dict(c.kwargs) for c in configs]
    return [{}]


def _grid_dims(value: Any) -> tuple[Any, ...]:
    dims = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    if not 1 <= len(dims) <= 3:
        raise LaunchUnsupported(f"a grid of {len(dims)} dims")
    for d in dims:
        if not isinstance(d, (int, torch.SymInt)) or isinstance(d, bool):
            raise LaunchUnsupported(f"a grid dim is a {type(d).__name__}, not an int")
    return dims


class LaunchSite(Protocol):
    """Where a launch is captured: strict capture's interpreter (:class:`_StrictSite`)
    or trace capture's recorder (``ember.frontend.trace_triton``)."""

    outside_tensors: bool
    """Whether a real tensor (from a closure or a global) may be passed: trace capture
    reads it as a constant of the graph (strict capture never sees one: what it reads
    from outside becomes a graph input)."""

    def files(self) -> dict[str, bytes]:
        """The program's files (the kernel's source goes there)."""
        ...

    def call(self, fn: Any, meta: dict[str, Any]) -> Any:
        """``fn(meta)``: a grid function or a ``triton.heuristics`` rule."""
        ...

    def guard_kernel(self, kernel: Any) -> None:
        """Guard the identity of the launched object, where the capture can."""
        ...

    def record(self, fn: Callable[..., None], args: list[Any]) -> None:
        """Run ``fn(*args)`` on fake tensors, recording its ops at the launch's line."""
        ...


class _StrictSite:
    """A launch reached by strict capture's interpreter in ``frame``."""

    outside_tensors = False

    def __init__(self, handler: Any, interp: Any, frame: Any) -> None:
        self.handler, self.interp, self.frame = handler, interp, frame

    def files(self) -> dict[str, bytes]:
        files: dict[str, bytes] = self.interp.capture.recorder.files
        return files

    def call(self, fn: Any, meta: dict[str, Any]) -> Any:
        return self.handler.call_symbolic(self.interp, self.frame, fn, [meta], {})

    def guard_kernel(self, kernel: Any) -> None:
        cap = self.interp.capture
        source = cap.source_of(kernel)
        if source is not None:
            cap.guard("id", source, kernel)

    def record(self, fn: Callable[..., None], args: list[Any]) -> None:
        # NOTE: the grid function ran inlined: the nodes carry the launch's line again
        frame = self.frame
        self.interp.capture.recorder.set_source(
            location_of(frame, frame.instructions[frame.ip - 1].line))
        self.handler.record(self.interp, fn, args, {})


def capture_launch(handler: Any, interp: Any, frame: Any, fn: Any, kernel: Any,
                   args: list[Any], kwargs: dict[str, Any]) -> None:
    """Strict capture: record calling ``fn`` (a launcher of ``kernel``) as an
    ``ember::triton_kernel`` node and ``aten::copy_`` nodes into the tensors it writes
    (:func:`record_launch`).

    Raises:
        LaunchUnsupported: the launch cannot be captured (the caller breaks the graph
            with its message).
    """
    grid, args, kwargs = _launch_parts(fn, kernel, args, kwargs)
    record_launch(_StrictSite(handler, interp, frame), kernel, grid, args, kwargs)


def record_launch(site: LaunchSite, kernel: Any, grid: Any, args: list[Any],
                  kwargs: dict[str, Any]) -> None:
    """Record launching ``kernel`` over ``grid`` with ``args``/``kwargs`` (its
    arguments, without ``grid``/``warmup``) at ``site``: one ``ember::triton_kernel``
    node, then ``aten::copy_`` of each written result into the caller's tensor.

    Raises:
        LaunchUnsupported: the launch cannot be captured (its message says why).
    """
    key = kernel_key(kernel)
    site.guard_kernel(kernel)
    arg_names = list(getattr(kernel, "arg_names", None) or [])
    if len(args) > len(arg_names):
        raise LaunchUnsupported(f"{len(args)} arguments for the {len(arg_names)} "
                                "parameters of the kernel")
    enc = _Encoder(site.outside_tensors)
    launch_args = [enc.arg(v, None, f"argument {arg_names[i]}") for i, v in enumerate(args)]
    launch_args += [enc.arg(v, k, f"argument {k}") for k, v in kwargs.items()]
    meta: dict[str, Any] = dict(zip(arg_names, args))
    meta.update(kwargs)
    chain = _wrappers(kernel)
    grids: list[GridChoice] = []
    seen: set[str] = set()
    for config in _configs(chain):
        when: dict[str, Constant] = {k: v for k, v in config.items()
                                     if isinstance(v, (int, float, bool, str))}
        if repr(sorted(when.items())) in seen:
            continue
        seen.add(repr(sorted(when.items())))
        config_meta = {**meta, **config}
        for wrapper in chain:
            for name, rule in (getattr(wrapper, "values", None) or {}).items():
                if type(wrapper).__name__ == "Heuristics":
                    config_meta[name] = site.call(rule, dict(config_meta))
        value = site.call(grid, dict(config_meta)) if callable(grid) else grid
        dims = tuple(enc.int_index(d) for d in _grid_dims(value))
        grids.append(GridChoice(dims, when))
    written = written_parameters(kernel)
    writes = []
    for position, a in enumerate(launch_args):
        name = a.name if a.name is not None else arg_names[position]
        if a.kind == "tensor" and (written is None or name in written):
            if a.index in enc.outside:
                raise LaunchUnsupported(
                    f"the kernel may write argument {name}, a tensor from outside the "
                    "traced function (a constant of the graph); pass it as an argument")
            writes.append(a.index)
    text = kernel_source(kernel)
    path = source_file_name(key, text.sha256)
    site.files()[path] = text.text.encode()
    call = UserKernelCall(key, text.sha256, path, tuple(launch_args), tuple(grids),
                          tuple(writes), enc.same_tensors())
    site.record(_launch_and_copy_back,
                [key, enc.tensors, enc.ints, call.to_text(), tuple(writes)])


def _launch_and_copy_back(key: str, tensors: list[torch.Tensor],
                          ints: list[int | torch.SymInt], spec: str,
                          writes: tuple[int, ...]) -> None:
    """Runs on fake tensors while recording: the node, then the copies back."""
    # NOTE: detached, as the launch records no autograd in eager
    results = triton_kernel(key, [t.detach() if t.requires_grad else t for t in tensors],
                            ints, spec)
    for w, result in zip(writes, results):
        tensors[w].copy_(result)

