"""The launcher the compiled-artifact loader uses for ``lang == "cpp"`` kernels.

:func:`load_kernel` compiles (or finds in the cache) the kernel's C++ source, loads the
shared library with ctypes and returns ``kernel(*tensors, *sizes)``, which passes each
tensor's data pointer (storage offset applied) to the ``extern "C"`` entry point, then
the values of the kernel's size symbols as ``int64_t`` (a kernel over symbolic sizes):
through ctypes, or, for a kernel of :data:`.cpp_packed_call.MIN_ARGS` arguments or more,
packed into one buffer for a trampoline (:mod:`.cpp_packed_call`), which saves ctypes'
conversion of each argument (a 209-tensor call: ~43 us before this, ~28 us now).
"""

from __future__ import annotations

import ctypes
import operator
from collections.abc import Callable
from typing import Any, NoReturn

import torch
from ember.runtime.compiled.cpp_build import compile_cpp
from ember.runtime.compiled.cpp_packed_call import PackedCall, packed_call
from ember.runtime.ir.contracts import CppLaunchMeta, KernelEntry


class CppKernel:
    """A loaded C++ kernel: call with the tensors of its buffers, in order, then the
    values of its size symbols (ints), if any.

    A call is per-call host time on every step of a compiled program (an AdamW step over
    48 parameters passes 628 tensors to 3 kernels), so it makes two C-level passes over
    the tensors (``map`` of an unbound getter, no Python frame per tensor): one that
    they are all on the CPU, one that reads their data pointers straight into the ctypes
    call. A value that is not a CPU tensor falls to :meth:`_refuse`, which says why. A
    kernel of many arguments is called packed (:mod:`.cpp_packed_call`: one ``struct``
    pack, no ctypes conversion per argument) when ``packed`` is given.
    """

    __slots__ = ("_fn", "_n_args", "_n_sizes", "_packed", "name")

    def __init__(self, name: str, fn: Any, n_args: int, n_sizes: int = 0,
                 packed: PackedCall | None = None) -> None:
        self.name = name
        self._fn = fn
        self._n_args = n_args
        self._n_sizes = n_sizes
        self._packed = packed

    def __call__(self, *values: Any) -> None:
        n_args = self._n_args
        if len(values) != n_args + self._n_sizes:
            sizes = f" and {self._n_sizes} sizes" if self._n_sizes else ""
            raise TypeError(f"kernel {self.name} takes {n_args} tensors{sizes}, "
                            f"got {len(values)} arguments")
        tensors = values[:n_args] if self._n_sizes else values
        # NOTE: a pointer to another device's memory (or a meta tensor's null pointer)
        # must never reach the C++ code; the wrapper checks its inputs, this catches the
        # rest (a hand-written wrapper, a direct call) at the cost of one attribute read
        # a tensor. A value without ``is_cpu`` raises AttributeError; one with it that
        # is no tensor raises TypeError from the unbound ``data_ptr`` (before the call).
        try:
            if all(map(_is_cpu, tensors)):
                packed = self._packed
                if packed is not None:
                    packed.run(packed.address,
                               packed.pack(*map(_data_ptr, tensors), *values[n_args:]))
                elif self._n_sizes:
                    self._fn(*map(_data_ptr, tensors), *values[n_args:])  # int64_t sizes
                else:
                    self._fn(*map(_data_ptr, tensors))
                return
        except (AttributeError, TypeError):
            pass
        self._refuse(tensors)

    def _refuse(self, tensors: tuple[Any, ...]) -> NoReturn:
        raise TypeError(f"kernel {self.name} runs on the CPU: its arguments must be CPU "
                        f"tensors, got {_describe(tensors)}")

    def __repr__(self) -> str:
        return f"<C++ kernel {self.name}>"


# Unbound, looked up once: ``_data_ptr(t)`` is ``t.data_ptr()`` without the attribute
# lookup and bound-method object per tensor.
_data_ptr: Callable[[torch.Tensor], int] = torch.Tensor.data_ptr
_is_cpu: Callable[[Any], bool] = operator.attrgetter("is_cpu")


def _describe(values: tuple[Any, ...]) -> str:
    """``[cpu float32 tensor, meta float32 tensor, int]`` for an error message."""
    return "[" + ", ".join(
        f"{v.device} {str(v.dtype).removeprefix('torch.')} tensor"
        if isinstance(v, torch.Tensor) else type(v).__name__ for v in values) + "]"


def load_kernel(entry: KernelEntry | dict[str, Any],
                files: dict[str, bytes]) -> Callable[..., None]:
    """Build the callable of one kernel entry of an artifact.

    Args:
        entry: the kernel's :class:`~ember.runtime.ir.contracts.KernelEntry` (or its JSON
            object, decoded strictly) with :class:`~ember.runtime.ir.contracts.CppLaunchMeta`.
        files: the artifact's files.

    Raises:
        ValueError: the entry is malformed (a ``MetadataError``) or its source is missing.
        ember.runtime.compiled.cpp_build.CppCompileError: the source does not compile.
    """
    if not isinstance(entry, KernelEntry):
        entry = KernelEntry.from_json(entry, "C++ kernel entry")
    if not isinstance(entry.meta, CppLaunchMeta):
        raise TypeError(f"C++ kernel entry {entry.name!r} is a {entry.lang!r} kernel")
    if entry.source not in files:
        raise ValueError(f"C++ kernel entry {entry.name!r}: source "
                         f"{entry.source!r} is not among the artifact's files")
    n_args = len(entry.meta.arg_dtypes)
    lib = ctypes.CDLL(str(compile_cpp(files[entry.source].decode())))
    fn = getattr(lib, entry.entry)  # an identifier (checked by KernelEntry)
    fn.restype = None
    n_sizes = len(entry.meta.size_args)
    fn.argtypes = [ctypes.c_void_p] * n_args + [ctypes.c_int64] * n_sizes
    return CppKernel(entry.name, fn, n_args, n_sizes, packed_call(fn, n_args, n_sizes))
