"""Custom operators (``torch.library`` ops outside ``aten``/``prims``): the checks that
turn a missing or wrong registration into an error naming the operator.

================================  ==========================================================
check                             when
================================  ==========================================================
:func:`missing_fake_kernel`       recording on fake tensors (capture, the aot stage's
                                  re-trace): the operator has no fake kernel
                                  (:class:`MissingFakeKernelError`, telling to call
                                  ``torch.library.register_fake("ns::op")``)
:func:`check_fake_kernel`         the first run of a program (interpreter or compiled
                                  wrapper): a result whose dtype, sizes or strides differ
                                  from what the fake kernel said (:class:`FakeKernelMismatch`)
unknown operator                  loading a program whose operator this process has not
                                  registered: ``IRFormatError`` from
                                  :func:`~ember.runtime.ir.resolve_op`
================================  ==========================================================
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from ember.runtime.ir.fresh_writes import PURE_NAMESPACES
from ember.runtime.ir.graph import Node, TensorMeta
from ember.runtime.tracing_errors import RecordingError


def is_custom_operator(target: str) -> bool:
    """Whether ``target`` (``ns::op.overload``) is an operator a user registered: outside
    the ``aten``/``prims`` namespaces and Ember's own ``ember`` (whose fake kernels are
    Ember's, e.g. ``ember::triton_kernel``)."""
    namespace = target.partition("::")[0]
    return namespace not in PURE_NAMESPACES and namespace != "ember"


class MissingFakeKernelError(RecordingError):
    """A custom operator ran on fake tensors without a fake (meta) kernel: Ember cannot
    know its result's shape without running it. The message names the operator and the
    registration to add."""


class FakeKernelMismatch(RuntimeError):
    """A custom operator's real result differs from what its fake kernel said (dtype,
    sizes or strides): compiled code built on the fake kernel's answer would be wrong.
    The message names the operator, the result and what differs."""


def missing_fake_kernel(target: str, error: BaseException) -> MissingFakeKernelError | None:
    """The error to raise instead of ``error`` (raised running custom operator
    ``target`` on fake tensors) when it means the operator has no fake kernel, or None."""
    if not is_custom_operator(target):
        return None
    text = str(error)
    # NOTE: imported here: ember.runtime._torch imports torch's symbolic-shape
    # machinery (sympy), which running a compiled program never needs
    from ember.runtime._torch import UnsupportedOperatorException

    # torch's words: a Python custom_op ("There was no fake impl registered for ..."), an
    # op with no kernel for the Meta dispatch key ("... from the 'Meta' backend")
    if not (isinstance(error, UnsupportedOperatorException)
            or (isinstance(error, (RuntimeError, NotImplementedError))
                and ("no fake impl" in text or "'Meta' backend" in text))):
        return None
    name = target.rsplit(".", 1)[0]
    said = text.splitlines()[0] if text else type(error).__name__
    return MissingFakeKernelError(
        f"custom operator {target} has no fake kernel, so its result's shape is unknown "
        f"without running it: register one with torch.library.register_fake({name!r}) "
        "(a function of the same arguments returning empty tensors of the result's dtype, "
        f"sizes and strides; for a C++ operator, a Meta kernel also works) [torch: {said}]")


def describe_mismatch(expected: tuple[torch.dtype, Sequence[int], Sequence[int]],
                      actual: torch.Tensor) -> str | None:
    """What differs between a fake kernel's ``(dtype, sizes, strides)`` and the real
    result ``actual`` (strides only over dims of more than one element), or None."""
    dtype, sizes, strides = expected
    if actual.dtype != dtype:
        return f"dtype {actual.dtype}, but its fake kernel said {dtype}"
    if tuple(actual.shape) != tuple(sizes):
        return f"sizes {list(actual.shape)}, but its fake kernel said {list(sizes)}"
    real = [s for s, n in zip(actual.stride(), actual.shape) if n > 1]
    fake = [s for s, n in zip(strides, sizes) if n > 1]
    if real != fake:
        return f"strides {list(actual.stride())}, but its fake kernel said {list(strides)}"
    return None


def check_fake_kernel(target: str, index: int | None,
                      expected: tuple[torch.dtype, Sequence[object], Sequence[object]] | None,
                      actual: object) -> None:
    """Raise :class:`FakeKernelMismatch` if custom operator ``target``'s result
    ``index`` (None: its only result) is not what its fake kernel said (``expected``;
    None: not a tensor, nothing to check). Sizes must be ints (a symbolic size is not
    checked here).

    Raises:
        FakeKernelMismatch: naming the operator, the result and what differs.
    """
    if expected is None or not isinstance(actual, torch.Tensor):
        return
    dtype, sizes, strides = expected
    int_sizes = [s for s in sizes if isinstance(s, int)]
    int_strides = [s for s in strides if isinstance(s, int)]
    if len(int_sizes) != len(sizes) or len(int_strides) != len(strides):
        return  # a symbolic size: what the program's size checks are for
    problem = describe_mismatch((dtype, int_sizes, int_strides), actual)
    if problem is not None:
        which = "its result" if index is None else f"its result {index}"
        name = target.rsplit(".", 1)[0]
        raise FakeKernelMismatch(
            f"custom operator {target}: {which} has {problem}. Fix the function registered "
            f"with torch.library.register_fake({name!r}) so that it returns what the "
            "operator returns")


def check_results(node: Node, result: object) -> None:
    """Check custom operator call ``node``'s real ``result`` against its metadata (what
    the fake kernel said when the program was recorded).

    Raises:
        FakeKernelMismatch: naming the operator, the result and what differs.
    """
    metas = node.meta if isinstance(node.meta, tuple) else (node.meta,)
    values = result if isinstance(node.meta, tuple) else (result,)
    if not isinstance(values, (tuple, list)) or len(values) != len(metas):
        return
    for i, (meta, value) in enumerate(zip(metas, values)):
        if isinstance(meta, TensorMeta):
            index = i if isinstance(node.meta, tuple) else None
            check_fake_kernel(node.target, index, (meta.dtype, meta.sizes, meta.strides),
                              value)


__all__ = ["FakeKernelMismatch", "MissingFakeKernelError", "check_fake_kernel",
           "check_results", "describe_mismatch", "is_custom_operator", "missing_fake_kernel"]
