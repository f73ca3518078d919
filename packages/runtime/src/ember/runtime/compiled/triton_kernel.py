"""Triton kernels of a compiled artifact: their description, loading and launching.

The inductor stage emits each Triton kernel as a :class:`TritonKernelSpec`: the source of
a small Python module holding one ``@triton.jit`` function, the Triton types of its runtime
arguments and the values of its ``tl.constexpr`` parameters (block sizes). The spec is
plain JSON, so it travels in the ``compiled`` dialect's zip with no pickle.

:func:`load_triton_kernel` turns a spec into a :class:`TritonKernel`, which the generated
wrapper launches with ``kernel.launch(grid, *args)``. The source goes through the on-disk
cache (:mod:`ember.runtime.compiled.triton_cache`) and is imported by path; Triton JIT
compiles it on the first launch and keeps the binary in its own cache. A CUDA kernel
whose binary may come from Ember's store (:mod:`.triton_stored`) is loaded with only its
parameters' names (:mod:`.triton_header`) and imported at the first launch that needs
Triton's JIT: importing a ``@triton.jit`` module costs more than the launch it serves. A binary that
needs global scratch memory (device-side TMA descriptors) finds Triton's allocator in
whichever thread launches it (:mod:`.triton_scratch`). A kernel the inductor built before
its first launch (``precompile_triton``) is launched from the binary that build kept
(:mod:`.triton_warmed`), not rebuilt.

On a CPU tensor the kernel runs in Triton's interpreter (``TRITON_INTERPRET``), which is
how CI exercises generated Triton code without a GPU.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from ember.runtime.compiled import triton_cache, triton_stored, triton_warmed
from ember.runtime.compiled.triton_binary import (
    BinaryLaunch,
    DirectParts,
    binary_launch,
    direct_parts,
)
from ember.runtime.compiled.triton_header import KernelHeader, kernel_header
from ember.runtime.compiled.triton_platform_key import cache_platform_key
from ember.runtime.compiled.triton_scratch import ensure_scratch_allocator
from ember.runtime.compiled.triton_static import StaticLaunch, static_launch
from ember.runtime.ir.gc_pause import collector_paused
from ember.runtime.logs import log


class TritonUnavailableError(RuntimeError):
    """A compiled artifact has Triton kernels but Triton is not installed."""


@dataclass(frozen=True)
class TritonKernelSpec:
    """One generated Triton kernel.

    Attributes:
        name: the name of the ``@triton.jit`` function in ``source``.
        source: a Python module: imports and the jitted function.
        signature: runtime (non-constexpr) parameter name → Triton type (``*fp32``,
            ``i32``, ``i64``, ``fp32``), in the order the wrapper passes them.
        constexprs: ``tl.constexpr`` parameter name → value (block sizes, flags).
        num_warps: warps per program on a GPU.
        num_stages: software-pipelining stages on a GPU.
    """

    name: str
    source: str
    signature: dict[str, str]
    constexprs: dict[str, int | bool] = field(default_factory=dict)
    num_warps: int = 4
    num_stages: int = 1

    def to_json(self) -> dict[str, Any]:
        """A JSON-serializable dict (inverse of :meth:`from_json`)."""
        return {
            "name": self.name,
            "source": self.source,
            "signature": dict(self.signature),
            "constexprs": dict(self.constexprs),
            "num_warps": self.num_warps,
            "num_stages": self.num_stages,
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> TritonKernelSpec:
        """Rebuild a spec from :meth:`to_json`'s dict.

        Raises:
            ValueError: naming the missing or mistyped field.
        """
        try:
            spec = TritonKernelSpec(
                name=str(data["name"]),
                source=str(data["source"]),
                signature={str(k): str(v) for k, v in dict(data["signature"]).items()},
                constexprs={str(k): v for k, v in dict(data.get("constexprs", {})).items()},
                num_warps=int(data.get("num_warps", 4)),
                num_stages=int(data.get("num_stages", 1)),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"malformed Triton kernel spec: {type(e).__name__}: {e}") from e
        for k, v in spec.constexprs.items():
            if not isinstance(v, (int, bool)):
                raise ValueError(f"Triton kernel {spec.name}: constexpr {k} is {v!r}, not an int")
        return spec


def _import_triton() -> Any:
    try:
        import triton
    except ImportError as e:
        raise TritonUnavailableError(
            "this compiled program has Triton kernels but Triton is not installed: "
            "pip install triton"
        ) from e
    cache_platform_key()
    return triton


@contextlib.contextmanager
def _interpreter_mode(enabled: bool) -> Iterator[None]:
    """Make ``@triton.jit`` build interpreted (or compiled) functions while active.

    Triton decides at decoration time, from ``triton.knobs.runtime.interpret`` (which
    reads ``TRITON_INTERPRET``); we set it around the import of a kernel module only.
    """
    triton = _import_triton()
    knobs = getattr(triton, "knobs", None)
    if knobs is not None and hasattr(knobs.runtime, "scope"):
        with knobs.runtime.scope():
            knobs.runtime.interpret = enabled
            yield
        return
    saved = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1" if enabled else "0"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved


_modules_lock = threading.Lock()
_loaded: dict[tuple[Path, bool], Any] = {}


def _import_kernel_module(path: Path, interpret: bool) -> Any:
    """Import the kernel module at ``path`` once per (path, mode)."""
    with _modules_lock:
        key = (path, interpret)
        if key in _loaded:
            return _loaded[key]
        mode = "interp" if interpret else "jit"
        module_name = f"ember_triton_{path.parent.name[:24]}_{mode}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import the Triton kernel file {path}")
        module = importlib.util.module_from_spec(spec)
        with _interpreter_mode(interpret):
            spec.loader.exec_module(module)
        _loaded[key] = module
        return module


def jit_function_from_source(spec: TritonKernelSpec, *, interpret: bool, device: str) -> Any:
    """The ``@triton.jit`` function of ``spec``, imported from the on-disk cache.

    Args:
        spec: the kernel.
        interpret: build Triton interpreter functions (CPU) instead of GPU JIT ones.
        device: the device tag for the cache key (:func:`triton_cache.device_tag`).

    Raises:
        TritonUnavailableError: when Triton is not installed.
        AttributeError: when the source has no function named ``spec.name``.
    """
    _import_triton()
    path = triton_cache.kernel_source_path(spec.source, device)
    module = _import_kernel_module(path, interpret)
    fn = getattr(module, spec.name, None)
    if fn is None:
        raise AttributeError(f"the Triton kernel source has no function {spec.name!r}")
    return fn


class TritonKernel:
    """A loaded Triton kernel: ``launch(grid, *args)`` runs it.

    Build with :func:`load_triton_kernel`.
    """

    def __init__(self, spec: TritonKernelSpec, fn: Any, interpret: bool,
                 device: torch.device | None = None,
                 header: KernelHeader | None = None) -> None:
        """``fn``: the kernel's ``@triton.jit`` function, or None to import it at the
        first launch that needs Triton's JIT, which ``header`` (the kernel's parameters,
        :func:`.triton_header.kernel_header`) then stands in for until then."""
        if fn is None and header is None:
            raise ValueError(f"Triton kernel {spec.name}: neither its function nor header")
        self.spec = spec
        self.interpret = interpret
        self._fn = fn
        self._header: Any = fn if header is None else header
        # the CUDA device whose binaries built before launch (triton_warmed) this
        # kernel may take; None: none (interpreted, or a caller that does not say)
        self._device = device if device is not None and device.type == "cuda" else None
        self._warm_key: triton_warmed.WarmKey | None = None
        self._options: dict[str, Any] = dict(spec.constexprs)
        if not interpret:
            self._options["num_warps"] = spec.num_warps
            self._options["num_stages"] = spec.num_stages
        # Launchers of compiled binaries (see _bind), by argument specialization; None
        # once binding failed (every launch then goes through JIT).
        self._bound: dict[tuple[Any, ...], BinaryLaunch] | None = None if interpret else {}
        # the direct launches among them, by the same keys (.triton_fast_launch)
        self.fast: dict[tuple[Any, ...], DirectParts] = {}
        self._trailing: tuple[Any, ...] = ()
        # whether this kernel's binaries go to (and come from) triton_stored: a CUDA
        # kernel whose arguments are all tensors
        self._stored = self._device is not None and warmable(spec)
        self._key = specialization_key(spec.signature)
        self._arity = len(spec.signature)

    @property
    def name(self) -> str:
        return self.spec.name

    def launch(self, grid: Sequence[int], *args: Any) -> None:
        """Run the kernel over ``grid`` programs with the runtime arguments ``args``
        (tensors and scalars, in ``spec.signature`` order).

        Raises:
            TypeError: when the number of arguments does not match the signature.
        """
        if len(args) != self._arity:
            raise TypeError(
                f"Triton kernel {self.name} takes {len(self.spec.signature)} arguments "
                f"({', '.join(self.spec.signature)}), got {len(args)}"
            )
        self.launch3(grid3(grid), args)

    def launch3(self, grid: tuple[int, ...], args: tuple[Any, ...]) -> None:
        """:meth:`launch` for a caller that passes the arguments as a tuple of the
        signature's length and the grid in three dimensions (the compiled wrapper's
        launcher, :class:`~ember.runtime.compiled.triton_launcher.TritonLaunch`): no
        argument count check, no padding, one frame less per launch."""
        key = None
        if self._bound is not None:
            try:
                key = self._key(args)
            except AttributeError:  # not the signature's kinds of argument: the generic key
                key = tuple(map(argument_specialization, args))
            run = self._bound.get(key)
            if run is None and self._device is not None:
                run = self._bind_prebuilt(key, grid)
            if run is not None:
                run(grid, args)
                return
        if not self.interpret:  # Triton says what the binary needs only once it is built
            ensure_scratch_allocator()
        self._jit()[tuple(grid)](*args, **self._options)
        if key is not None:
            self._bind(key, args, grid)

    def _bind(self, key: tuple[Any, ...], args: tuple[Any, ...], grid: Sequence[int]) -> None:
        """Keep the binary Triton's JIT just built for the argument specialization ``key``.

        ``JITFunction[grid](...)`` re-derives the specialization and looks the binary up
        on every call (tens of microseconds, most of a small kernel's launch cost). The
        binary depends only on what ``key`` holds (each tensor's dtype and 16-byte
        alignment, each integer's value class: Triton's own specialization), never on the
        grid, so later launches with the same key call it directly over their own grid
        (a kernel over symbolic sizes runs over a new grid at each new size, with the
        binary of its specialization: ``s0 = 16`` and ``s0 = 17`` differ in divisibility
        by 16, so they never share one). Kernels whose constexpr parameters do not follow
        the runtime ones, or a Triton without ``warmup`` / ``CompiledKernel[grid]``, keep
        the JIT path (logged under ``cache``)."""
        assert self._bound is not None
        try:
            trailing = self._trailing_constexprs()
            compiled = self._jit().warmup(*args, grid=grid3(grid), **self._options)
            compiled[grid3(grid)]  # noqa: B018 - fails here on a Triton without it
        except Exception as e:  # noqa: BLE001 - any failure: keep launching through JIT
            self._bound = None
            self.fast.clear()
            log("cache", f"Triton kernel {self.name}: launching through JIT each call "
                         f"({type(e).__name__}: {e})")
            return
        self._trailing = trailing
        self._keep(key, binary_launch(compiled, self._trailing, self._static(compiled)))
        if self._stored:
            assert self._device is not None
            triton_stored.store(self.spec, self._device, key, compiled)

    def _jit(self) -> Any:
        """The kernel's ``@triton.jit`` function, imported at its first use when the
        kernel was loaded without it (:func:`load_triton_kernel`)."""
        if self._fn is None:
            tag = triton_cache.device_tag(self._device, self.interpret)
            self._fn = jit_function_from_source(self.spec, interpret=self.interpret,
                                                device=tag)
            if tuple(self._fn.arg_names) != tuple(self._header.arg_names):
                raise RuntimeError(
                    f"Triton kernel {self.name}: its parameters read from the source "
                    f"({', '.join(self._header.arg_names)}) are not the function's "
                    f"({', '.join(self._fn.arg_names)})")
        return self._fn

    def _trailing_constexprs(self) -> tuple[Any, ...]:
        """The values of the parameters after the runtime ones, which a compiled
        binary's runner takes after them (Triton passes every bound argument).

        Raises:
            TypeError: one of them is not a constexpr of the spec.
        """
        trailing = list(self._header.arg_names)[self._arity:]
        if any(n not in self.spec.constexprs for n in trailing):
            raise TypeError(f"parameters {trailing} are not all constexprs")
        return tuple(self.spec.constexprs[n] for n in trailing)

    def warm_key(self) -> triton_warmed.WarmKey | None:
        """This kernel's key in :mod:`.triton_warmed` (None when not on a CUDA device);
        computed once (it hashes the source)."""
        if self._device is None:
            return None
        if self._warm_key is None:
            self._warm_key = triton_warmed.warm_key(
                self.spec, triton_warmed.device_index(self._device))
        return self._warm_key

    def _bind_prebuilt(self, key: tuple[Any, ...], grid: Sequence[int]) -> BinaryLaunch | None:
        """The launcher of a binary built before this launch for the argument
        specialization ``key``: by this process's warm-up (:mod:`.triton_warmed`), else
        by an earlier process (:mod:`.triton_stored`); kept in ``_bound`` like a binary
        :meth:`_bind` found. None otherwise: the launch then goes through Triton's JIT
        (another specialization, no such binary, or one that does not load here, logged
        under ``cache``). Python's collector is paused meanwhile (as during a program's
        decode: ``ember.runtime.ir.gc_pause``): a warm start binds every kernel of the
        program at its first call, hundreds of small objects each, all kept."""
        with collector_paused():
            return self._prebuilt_launch(key, grid)

    def _prebuilt_launch(self, key: tuple[Any, ...], grid: Sequence[int]) -> BinaryLaunch | None:
        """:meth:`_bind_prebuilt` with the collector as it is."""
        assert self._bound is not None and self._device is not None
        compiled = None
        if triton_warmed.has_entries():
            warm = self.warm_key()
            compiled = None if warm is None else triton_warmed.take(warm, key)
        if compiled is None and self._stored:
            compiled = triton_stored.load(self.spec, self._header, self._device, key)
        if compiled is None:
            return None
        try:
            if hasattr(compiled, "result"):  # Triton's asynchronous compile mode
                compiled = compiled.result()
            trailing = self._trailing_constexprs()
            static = self._static(compiled)
            if static is None:  # Triton's launcher: loads the binary, fails on a Triton
                compiled[grid3(grid)]  # without it
        except Exception as e:  # noqa: BLE001 - any failure: the JIT path decides
            log("cache", f"Triton kernel {self.name}: the binary built before launch is "
                         f"not used ({type(e).__name__}: {e})")
            return None
        self._trailing = trailing
        run = binary_launch(compiled, trailing, static)
        self._keep(key, run)
        return run

    def _static(self, compiled: Any) -> StaticLaunch | None:
        """``compiled``'s launch through torch's C++ launcher, where it takes it
        (:func:`.triton_static.static_launch`)."""
        if self._device is None or self._device.index is None:
            return None
        return static_launch(compiled, tuple(self.spec.signature), self._device.index)

    def _keep(self, key: tuple[Any, ...], run: BinaryLaunch) -> None:
        """Keep ``run``, the binary's launch for specialization ``key`` (and its direct
        pieces, where it has them, for the one-frame launch)."""
        assert self._bound is not None
        self._bound[key] = run
        parts = direct_parts(run)
        if parts is not None:
            self.fast[key] = parts

    def __repr__(self) -> str:
        mode = "interpreted" if self.interpret else "jit"
        return f"<TritonKernel {self.name} ({mode})>"


def grid3(grid: Sequence[int]) -> tuple[int, int, int]:
    """``grid`` padded to the three dimensions a compiled kernel's runner reads."""
    x, y, z = tuple(grid) + (1,) * (3 - len(grid))
    return (x, y, z)


def argument_specialization(arg: Any) -> Any:
    """What Triton's JIT specializes a kernel on for one argument, as a hashable key: a
    tensor's dtype and whether its data pointer is 16-byte aligned; an integer's type
    (``i32``, ``i64`` or ``u64`` by its value, as Triton picks it), whether it is 1 and
    whether it is a multiple of 16 (a size argument of 16 and one of 17 get different
    binaries); anything else by type. Two launches whose arguments have equal keys run
    the same binary."""
    if isinstance(arg, torch.Tensor):
        return (arg.dtype, arg.data_ptr() % 16 == 0)
    if isinstance(arg, int) and not isinstance(arg, bool):
        width = "i32" if -(2**31) <= arg < 2**31 else "u64" if arg >= 2**63 else "i64"
        return ("int", width, arg == 1, arg % 16 == 0)
    return type(arg)


def specialization_key(signature: dict[str, str]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """A function computing ``tuple(map(argument_specialization, args))`` for launches
    of a kernel with this signature, with each argument's rule written inline (one call
    per launch instead of one per argument: a launch's largest Python cost after the
    launch itself)."""
    namespace: dict[str, Any] = {}
    exec(f"def key(a):\n    return {specialization_expression(signature, 'a')}\n",  # noqa: S102
         namespace)  # from type names and indices only
    fn: Callable[[Sequence[Any]], tuple[Any, ...]] = namespace["key"]
    return fn


def specialization_expression(signature: dict[str, str], args: str) -> str:
    """Python source of :func:`specialization_key`'s tuple over the sequence named
    ``args``. Pointer parameters (``*fp32``) read a tensor's dtype and alignment, integer
    ones (``i32``, ``i64``) the value's class; others the type."""
    parts = []
    for i, ty in enumerate(signature.values()):
        v = f"{args}[{i}]"
        if ty.startswith("*"):
            parts.append(f"({v}.dtype, {v}.data_ptr() % 16 == 0)")
        elif ty in ("i32", "i64"):
            parts.append(f"('int', 'i32' if -2147483648 <= {v} < 2147483648 else 'u64' if "
                         f"{v} >= 9223372036854775808 else 'i64', {v} == 1, {v} % 16 == 0)")
        else:
            parts.append(f"type({v})")
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


# Pointer element types of a kernel signature (``*fp32``) and the torch dtype a launch
# passes for each.
POINTER_DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
    "fp64": torch.float64, "i8": torch.int8, "i16": torch.int16, "i32": torch.int32,
    "i64": torch.int64, "u8": torch.uint8, "i1": torch.bool,
}


def warmable(spec: TritonKernelSpec) -> bool:
    """Whether :func:`.triton_aot.warm_kernel` can build ``spec`` ahead of its first launch: every
    argument is a pointer (Triton specializes integer arguments on their values, which
    only the launch knows) to a dtype of :data:`POINTER_DTYPES`."""
    return all(t.startswith("*") and t[1:] in POINTER_DTYPES for t in spec.signature.values())


def load_triton_kernel(spec: TritonKernelSpec, device: torch.device | str) -> TritonKernel:
    """Load ``spec`` to run on ``device``: compiled by Triton's JIT for a CUDA device,
    run by Triton's interpreter for a CPU device.

    Raises:
        TritonUnavailableError: when Triton is not installed.
    """
    dev = torch.device(device)
    interpret = dev.type != "cuda"
    if not interpret and warmable(spec):
        # a launch may come from a stored binary, which needs only the parameters'
        # names: the function is imported when a launch needs Triton's JIT
        _import_triton()
        header = kernel_header(spec.source, spec.name)
        if header is not None:
            return TritonKernel(spec, None, interpret, dev, header=header)
    tag = triton_cache.device_tag(dev, interpret)
    fn = jit_function_from_source(spec, interpret=interpret, device=tag)
    return TritonKernel(spec, fn, interpret, dev)
