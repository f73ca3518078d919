"""The math functions generated Triton kernels call beyond ``triton.language``.

Generated kernels call CUDA's libdevice (``log1p``, ``tanh``, ``atan2``, ...) through a
module-level name ``libdevice`` bound by::

    from ember.runtime.compiled.triton_math import libdevice_for_this_import
    libdevice = libdevice_for_this_import()

On a GPU that is ``triton.language.extra.libdevice``. Triton's CPU interpreter cannot
call libdevice (``extern_elementwise`` is not supported there), so under the interpreter
the same names are numpy implementations working on the interpreter's tensors. The
choice is made when the kernel module is imported, which the loader does once per mode
(:func:`ember.runtime.compiled.triton_kernel.jit_function_from_source`).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import numpy as np


def _interpreting() -> bool:
    import triton

    knobs = getattr(triton, "knobs", None)
    if knobs is not None:
        return bool(knobs.runtime.interpret)
    import os

    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _wrap(data: np.ndarray, like: Any) -> Any:
    """An interpreter tensor holding ``data`` with the element type of ``like``."""
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    scalar = like.dtype
    data = np.asarray(data).astype(like.handle.data.dtype, copy=False)
    ty = tl.block_type(scalar, list(data.shape)) if data.shape else scalar
    return tl.tensor(TensorHandle(data, scalar), ty)


def _unary(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[Any], Any]:
    def op(x: Any) -> Any:
        with np.errstate(all="ignore"):
            return _wrap(fn(x.handle.data), x)

    return op


def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[Any, Any], Any]:
    def op(x: Any, y: Any) -> Any:
        with np.errstate(all="ignore"):
            return _wrap(fn(x.handle.data, y.handle.data), x)

    return op


def _erfc(x: np.ndarray) -> np.ndarray:
    import math

    result: np.ndarray = np.vectorize(math.erfc, otypes=[x.dtype])(x)
    return result


def _with_torch(name: str) -> Callable[[np.ndarray], np.ndarray]:
    """``torch.special.<name>`` on an array (eager's CPU kernel: erfinv, lgamma)."""
    def fn(x: np.ndarray) -> np.ndarray:
        import torch

        result: np.ndarray = getattr(torch.special, name)(torch.from_numpy(np.array(x))).numpy()
        return result

    return fn


def _namespace() -> types.SimpleNamespace:
    return types.SimpleNamespace(
        expm1=_unary(np.expm1),
        log10=_unary(np.log10),
        log1p=_unary(np.log1p),
        tan=_unary(np.tan),
        asin=_unary(np.arcsin),
        acos=_unary(np.arccos),
        atan=_unary(np.arctan),
        sinh=_unary(np.sinh),
        cosh=_unary(np.cosh),
        tanh=_unary(np.tanh),
        asinh=_unary(np.arcsinh),
        acosh=_unary(np.arccosh),
        atanh=_unary(np.arctanh),
        erfc=_unary(_erfc),
        erfinv=_unary(_with_torch("erfinv")),
        lgamma=_unary(_with_torch("gammaln")),
        nearbyint=_unary(np.rint),
        trunc=_unary(np.trunc),
        atan2=_binary(np.arctan2),
        hypot=_binary(np.hypot),
        fmod=_binary(np.fmod),
        pow=_binary(np.power),
    )


_INTERPRETER_LIBDEVICE: types.SimpleNamespace | None = None


def libdevice_for_this_import() -> Any:
    """The ``libdevice`` a kernel module being imported now should call (module doc)."""
    global _INTERPRETER_LIBDEVICE
    if not _interpreting():
        from triton.language.extra import libdevice

        return libdevice
    if _INTERPRETER_LIBDEVICE is None:
        _INTERPRETER_LIBDEVICE = _namespace()
    return _INTERPRETER_LIBDEVICE
