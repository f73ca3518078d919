"""``triton_op`` / ``wrap_triton``: a Triton kernel launcher as a custom operator.

::

    @ember.frontend.triton_op("mylib::scaled_relu", mutates_args=())
    def scaled_relu(x: torch.Tensor, scale: float) -> torch.Tensor:
        out = torch.empty_like(x)
        wrap_triton(relu_kernel)[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), scale,
                                                                 BLOCK=256)
        return out

    scaled_relu.register_autograd(backward, setup_context=setup_context)

The result is a ``torch.library`` custom operator (``torch.library.custom_op``, with
its ``register_autograd`` and ``register_fake``), so it runs the same from eager code and
from compiled code, where Ember records it as one opaque call
(``mylib::scaled_relu.default``) that every backend runs as an extern call.

What ``triton_op`` adds to ``custom_op``: a fake kernel, derived from the function
itself. Under fake tensors (capture, the aot stage) the function runs as written except
that launches through :func:`wrap_triton` do nothing, so its outputs have the shapes,
dtypes and strides it allocates; ``register_fake`` is only needed when the function
computes shapes from data. A bare ``kernel[grid](...)`` in the function is skipped there
too while fake tensors are active (capture, the aot stage); launch through
``wrap_triton`` to have it skipped for meta tensors as well.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

import torch

__all__ = ["WrappedTritonKernel", "triton_op", "wrap_triton"]



class _FakeKernels(threading.local):
    """How many ``triton_op`` fake kernels this thread is running (a plain attribute:
    strict capture reads it when ``wrap_triton`` is used in compiled code directly)."""

    depth = 0


_fake_kernels = _FakeKernels()


class WrappedTritonKernel:
    """A Triton kernel whose launches do nothing while a :func:`triton_op`'s fake kernel
    runs; otherwise ``wrapped[grid](...)`` is ``kernel[grid](...)``."""

    def __init__(self, kernel: Any) -> None:
        if not callable(getattr(kernel, "__getitem__", None)) or not hasattr(kernel, "run"):
            raise TypeError(f"wrap_triton takes a @triton.jit kernel (or a triton.autotune "
                            f"/ triton.heuristics object), not a {type(kernel).__name__}")
        self.kernel = kernel

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        def launch(*args: Any, **kwargs: Any) -> Any:
            if _fake_kernels.depth:
                return None  # the fake kernel: the outputs are allocated, nothing runs
            return self.kernel[grid](*args, **kwargs)

        return launch

    def run(self, *args: Any, grid: Any, warmup: bool = False, **kwargs: Any) -> Any:
        """``kernel.run(...)``; nothing while a fake kernel runs."""
        if _fake_kernels.depth:
            return None
        return self.kernel.run(*args, grid=grid, warmup=warmup, **kwargs)


def wrap_triton(kernel: Any) -> WrappedTritonKernel:
    """Wrap ``kernel`` for launching inside a :func:`triton_op` (its fake kernel skips
    the launch).

    Raises:
        TypeError: ``kernel`` is not a Triton kernel.
    """
    return WrappedTritonKernel(kernel)


def _skipped_launch(kernel: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """A launch on fake tensors inside a derived fake kernel: nothing runs (the outputs
    were allocated by the function)."""


def triton_op(name: str, fn: Callable[..., Any] | None = None, *,
              mutates_args: str | Iterable[str] = ()) -> Any:
    """Register ``fn`` (a function that launches Triton kernels through
    :func:`wrap_triton`) as the custom operator ``name`` (``"namespace::op"``).

    Usable as ``@triton_op(name, mutates_args=...)`` or ``triton_op(name, fn, ...)``.
    Returns torch's ``CustomOpDef``: call it like ``fn``; ``register_autograd`` adds a
    backward, ``register_fake`` replaces the derived fake kernel.

    Raises:
        ValueError: ``name`` is not ``namespace::op`` (from ``torch.library``), or the
            function's annotations do not give a schema.
    """

    def register(func: Callable[..., Any]) -> Any:
        op = torch.library.custom_op(name, mutates_args=mutates_args)(func)

        def fake(*args: Any, **kwargs: Any) -> Any:
            # NOTE: imported here: the bytecode package is heavy and imports the frontend
            from ember.frontend.bytecode.triton_launch import launches_handled

            _fake_kernels.depth += 1
            try:
                with launches_handled(_skipped_launch):  # a bare kernel[grid](...)
                    return func(*args, **kwargs)
            finally:
                _fake_kernels.depth -= 1

        op.register_fake(fake)
        return op

    return register if fn is None else register(fn)

