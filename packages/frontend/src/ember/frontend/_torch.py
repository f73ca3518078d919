"""The private torch APIs the frontend uses, in one place (docs/architecture.md): pytree.

Other helpers may add lines here; keep one import per name and say what it is for.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor  # fake tensors (strict frontend)
from torch.nn.modules import module as _module_globals  # global nn.Module hooks (strict)
from torch.utils._python_dispatch import TorchDispatchMode  # grad-mode regions (strict)
from torch.utils._pytree import (  # nested containers <-> flat leaves
    SUPPORTED_NODES,
    GetAttrKey,
    KeyPath,
    MappingKey,
    SequenceKey,
    TreeSpec,
    register_pytree_node,
    tree_flatten,
    tree_flatten_with_path,
    tree_unflatten,
)

__all__ = [
    "compiled_original_name",
    "SUPPORTED_NODES",
    "module_call_impl",
    "FakeTensor",
    "GetAttrKey",
    "KeyPath",
    "MappingKey",
    "SequenceKey",
    "TorchDispatchMode",
    "TreeSpec",
    "any_autocast_enabled",
    "assert_async",
    "autocast_disabled",
    "autocast_settings",
    "custom_function_class",
    "data_dependent_output_types",
    "size_functions",
    "dict_version_reader",
    "disable_dynamo_wrapped",
    "dynamo_disable_wrapper_code",
    "dynamo_disabled_callee",
    "dynamo_disabled_original",
    "dynamo_graph_break",
    "fake_mode_active",
    "global_module_hooks_registered",
    "has_unbacked_symbols",
    "check_symbolic",
    "is_fake",
    "is_view",
    "view_base",
    "marked_constant",
    "numpy_layer",
    "pinning_source",
    "python_dispatcher",
    "python_dispatcher_off",
    "upsample_nearest_bindings",
    "causal_mask_detector",
    "register_pytree_node",
    "tensor_metadata_checker",
    "tree_flatten",
    "tree_flatten_with_path",
    "tree_unflatten",
]


def custom_function_class(node: Any) -> type | None:
    """The ``torch.autograd.Function`` subclass whose backward the autograd graph node
    ``node`` runs (its private ``_forward_cls``), or None for a built-in op's node and
    for the Function ``torch.library`` makes for a custom op's registered autograd."""
    if not isinstance(node, torch.autograd.function.BackwardCFunction):
        return None
    cls = getattr(node, "_forward_cls", None)
    if not isinstance(cls, type) or cls.__module__ == _LIBRARY_AUTOGRAD:
        return None
    return cls


# NOTE: torch.library.register_autograd wraps a custom op in a Function made here; the
# trace records the op itself (one node), which the aot stage differentiates through
# the op's registered formula: no user backward is lost
_LIBRARY_AUTOGRAD = "torch._library.autograd"


# the folder of torch's higher-order ops, as it appears in their code's file names
_HIGHER_ORDER_FOLDER = os.path.join("torch", "_higher_order_ops", "")


def associative_scan_function() -> Any:
    """torch's ``associative_scan`` (``torch._higher_order_ops.associative_scan``), None
    where this torch has none (the strict capture's rule: ``bytecode/scan_rules.py``)."""
    try:
        from torch._higher_order_ops.associative_scan import associative_scan
    except ImportError:
        return None
    return associative_scan


def higher_order_op_name(fn: Any) -> str | None:
    """The name of the higher-order op ``fn`` calls (``torch.cond``, ``while_loop``,
    ``scan``, ...: a function of ``torch._higher_order_ops`` or an operator of
    ``torch.ops.higher_order``), None for anything else."""
    if isinstance(fn, torch._ops.HigherOrderOperator):
        return f"torch.ops.higher_order.{fn.__name__}"
    if fn is getattr(torch, "cond", None):
        return "torch.cond"
    module = getattr(fn, "__module__", None) or ""
    code = getattr(inspect.unwrap(fn), "__code__", None) if callable(fn) else None
    if module.startswith("torch._higher_order_ops") or (
            code is not None and _HIGHER_ORDER_FOLDER in code.co_filename):
        return f"{module}.{getattr(fn, '__qualname__', getattr(fn, '__name__', '?'))}"
    return None


def any_autocast_enabled() -> bool:
    """Whether autocast is on for any device type (one C call, read at every graph run:
    graphs hold autocast's casts explicitly and run with it off)."""
    return bool(torch._C._is_any_autocast_enabled())


def autocast_disabled() -> Any:
    """A context manager turning autocast off for every device type inside it and
    restoring each one's state after (``torch._C._DisableAutocast``)."""
    return torch._C._DisableAutocast()


def autocast_settings(cm: Any) -> tuple[str, torch.dtype, bool, bool]:
    """``(device type, dtype, enabled, cache_enabled)`` of a ``torch.autocast`` object,
    as its ``__enter__`` applies them (its private ``_enabled``/``_cache_enabled``:
    the constructor may have turned ``enabled`` off, with a warning)."""
    return (str(cm.device), cm.fast_dtype, bool(cm._enabled), bool(cm._cache_enabled))


def size_functions() -> dict[str, Any]:
    """torch's sympy functions that appear in size expressions (``//`` and ``%`` of
    sizes), by name: the capture cache writes and reads ``SizeExpr`` s with them."""
    from torch.utils._sympy import functions

    return {name: getattr(functions, name) for name in ("FloorDiv", "PythonMod", "Mod")
            if hasattr(functions, name)}


def dynamo_graph_break() -> Any:
    """``torch._dynamo.graph_break`` (torch.optim's step wrapper calls it), or None."""
    dynamo = getattr(torch, "_dynamo", None)
    return getattr(dynamo, "graph_break", None)


def dynamo_is_compiling() -> Any:
    """``torch._dynamo.is_compiling`` (older libraries ask it, not torch.compiler's), or
    None."""
    dynamo = getattr(torch, "_dynamo", None)
    return getattr(dynamo, "is_compiling", None)


def marked_constant(fn: Any) -> bool:
    """``fn`` is marked by ``torch._dynamo.assume_constant_result`` (its private
    ``_dynamo_marked_constant``; transformers sets it on its install probes): its result
    is a capture-time constant."""
    return getattr(fn, "_dynamo_marked_constant", False) is True


def dynamo_disabled_original(fn: Any) -> Any | None:
    """The function a ``torch.compiler.disable`` / ``torch._dynamo.disable`` wrapper
    runs (its private ``_torchdynamo_orig_callable``), or None when ``fn`` is none."""
    target = getattr(fn, "__func__", fn)
    if getattr(target, "_torchdynamo_disable", False) is not True:
        return None
    return getattr(target, "_torchdynamo_orig_callable", None) or getattr(
        target, "__wrapped__", None)


def compiled_original_name(fn: Any) -> str:
    """The attribute holding what the compiled wrapper ``fn`` compiles (see
    :func:`torch_compiled_original`)."""
    return "__ember_original__" if _ember_compiled(fn) else "_torchdynamo_orig_callable"


def _ember_compiled(fn: Any) -> bool:
    """Whether ``fn`` is an ``ember.frontend.compile`` wrapper (its class has the
    ``__ember_original__`` property)."""
    return isinstance(getattr(type(fn), "__ember_original__", None), property)


def torch_compiled_original(fn: Any) -> Any | None:
    """The function a ``torch.compile`` wrapper compiles (its private
    ``_torchdynamo_orig_callable``), or an ``ember.frontend.compile`` one
    (``__ember_original__``), or None when ``fn`` is none (a ``torch.compiler.disable``
    wrapper is not one). A capture calling one captures the function itself."""
    if getattr(fn, "_torchdynamo_disable", False) is True:
        return None
    original = getattr(fn, compiled_original_name(fn), None)
    return original if callable(original) else None


def _dynamo_disable_probe() -> None:
    """Decorated by :func:`_dynamo_disable_wrapper_code`: its wrapper's code object is
    the one every ``torch.compiler.disable`` wrapper of a function runs."""


@functools.cache
def _dynamo_disable_wrapper_code_once() -> Any:
    disable: Any = torch.compiler.disable
    return getattr(disable(_dynamo_disable_probe), "__code__", None)


def dynamo_disable_wrapper_code() -> Any | None:
    """The code object every ``torch.compiler.disable`` / ``torch._dynamo.disable``
    wrapper of a function runs (torch's private ``_fn``), or None while
    ``torch._dynamo`` is not imported (no such wrapper exists; it is not imported here)."""
    if "torch._dynamo.eval_frame" not in sys.modules:
        return None
    return _dynamo_disable_wrapper_code_once()


def dynamo_disabled_callee(frame: Any) -> Any | None:
    """For a frame that has just started running the code of
    :func:`dynamo_disable_wrapper_code`, the callable the wrapper is about to run (its
    closure variable ``fn``, read before the frame copied it), or None."""
    return frame.f_locals.get("fn")


def _disable_dynamo_probe() -> None:
    """Decorated below: its wrapper's code object is the one every function decorated
    with torch's internal ``torch._disable_dynamo`` runs."""


_disable_dynamo = getattr(torch, "_disable_dynamo", None)
_DISABLE_DYNAMO_CODE = getattr(_disable_dynamo and _disable_dynamo(_disable_dynamo_probe),
                               "__code__", None)


def disable_dynamo_wrapped(fn: Any) -> Any | None:
    """The function that torch's internal ``torch._disable_dynamo`` decorator wrapped
    (``Optimizer.zero_grad``), or None when ``fn`` is not such a wrapper."""
    code = getattr(fn, "__code__", None)
    if code is None or code is not _DISABLE_DYNAMO_CODE:
        return None
    return getattr(fn, "__wrapped__", None)


def fake_mode_active() -> bool:
    """Whether a FakeTensorMode is active: some capture is running the code on fake
    tensors (a compiled function called from code being captured runs inline)."""
    return torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is not None


def is_fake(value: object) -> bool:
    """True for a FakeTensor (of any fake mode)."""
    return isinstance(value, FakeTensor)


def global_module_hooks_registered() -> bool:
    """Whether any global ``nn.Module`` hook (``register_module_forward_hook`` and
    friends) is registered; the strict frontend then runs module calls eagerly."""
    # NOTE: written out, not a loop over the names: this runs on every call of a
    # compiled module (root_hooks.needs_module_call)
    g = _module_globals
    return bool(getattr(g, "_global_forward_hooks", None)
                or getattr(g, "_global_forward_pre_hooks", None)
                or getattr(g, "_global_backward_hooks", None)
                or getattr(g, "_global_backward_pre_hooks", None)
                or getattr(g, "_global_forward_hooks_always_called", None))


def numpy_layer() -> Any:
    """torch's NumPy-compatible layer over tensors (``torch._numpy``): the strict
    frontend traces NumPy code with it (``bytecode/numpy_rules.py``). Imported on
    first use: it imports NumPy."""
    import torch._numpy

    return torch._numpy


def is_view(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a view of another tensor (shares its storage)."""
    return bool(tensor._is_view())


def view_base(tensor: torch.Tensor) -> torch.Tensor | None:
    """The tensor ``tensor`` is a view of (autograd's ``_base``), or None."""
    base = tensor._base
    return base if isinstance(base, torch.Tensor) else None


def fake_tensor_limitation_types() -> tuple[type[BaseException], ...]:
    """The exceptions torch raises where fake tensors cannot stand for real ones
    (data-dependent output shapes or values, ops without a fake implementation); the
    strict frontend never lets user ``except`` clauses see them."""
    from torch._subclasses import fake_tensor as ft
    from torch.fx.experimental import symbolic_shapes as ss

    names = ("DataDependentOutputException", "DynamicOutputShapeException",
             "UnsupportedOperatorException", "UnsupportedFakeTensorException",
             "UnsupportedMutationAliasingException", "MetadataMismatchError",
             "FakeTensorDeviceMismatchError", "GuardOnDataDependentSymNode",
             "PendingUnbackedSymbolNotFound")
    found = (getattr(ft, n, None) or getattr(ss, n, None) for n in names)
    return tuple(t for t in found if isinstance(t, type))


def data_dependent_output_types() -> tuple[type[BaseException], ...]:
    """The exceptions fake tensors without a shape environment raise for an op whose
    output size or value depends on the data (``nonzero``, ``unique``, ``.item()``);
    with symbolic shapes the same op gets an unbacked size instead."""
    from torch._subclasses import fake_tensor as ft

    found = (getattr(ft, n, None) for n in ("DynamicOutputShapeException",
                                           "DataDependentOutputException"))
    return tuple(t for t in found if isinstance(t, type))


def pinning_source(shape_env: Any, size: Any) -> object | None:
    """What the recorder noted (its source line) with the guard that made the symbolic
    ``size`` (a ``torch.SymInt`` of an input, as created) equal to a constant: the
    first guard on its symbol that is an equality. None when not known (the runtime's
    recorder notes a source for each guard in ``shape_env.guards.sources``)."""
    import sympy

    node = getattr(size, "node", None)
    symbol = getattr(node, "_expr", None)  # the symbol as created, before replacements
    if shape_env is None or not isinstance(symbol, sympy.Symbol):
        return None
    sources = getattr(shape_env.guards, "sources", None)
    if sources is None:
        return None
    for guard, source in zip(shape_env.guards, sources):
        if isinstance(guard.expr, sympy.Eq) and symbol in guard.expr.free_symbols:
            found: object = source
            return found
    return None


def has_unbacked_symbols(value: Any) -> bool:
    """Whether a ``torch.SymInt``/``SymFloat``/``SymBool`` depends on a data-dependent
    (unbacked) symbol: its value is not known from the input sizes."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    return bool(free_unbacked_symbols(value))


def assert_async(condition: torch.Tensor, message: str) -> None:
    """``torch._assert_async(condition, message)``: on fake tensors under the recorder an
    ``aten::_assert_async.msg`` node (a side effect no pass removes); run for real it
    fails with ``RuntimeError(message)`` when the one-element ``condition`` is zero."""
    torch._assert_async(condition, message)


def check_symbolic(condition: Any, message: str) -> None:
    """``torch._check(condition)`` on a symbolic bool: the shape environment records it as
    a runtime assertion (an unbacked one is checked when the graph runs) and later code
    may rely on it."""
    torch._check(condition, lambda: message)  # type: ignore[no-untyped-call]


@functools.cache
def dict_version_reader() -> Any:
    """torch's reader of a dict's version tag (``torch._C._dynamo.guards.dict_version``:
    CPython gives a dict a new tag on every write), or None where it is missing or does
    not work on this Python: a write to a dict, to an instance's ``__dict__`` through
    ``setattr``, or a ``del``, must each change the tag (the guards' fast path,
    :mod:`ember.frontend.guard_stamp`, is then off)."""
    try:
        from torch._C._dynamo.guards import dict_version
    except ImportError:
        return None

    class _Probe:
        pass

    try:
        d: dict[str, int] = {}
        seen = [dict_version(d)]
        d["a"] = 1
        seen.append(dict_version(d))
        probe = _Probe()
        probe.x = 1  # type: ignore[attr-defined]
        attrs = probe.__dict__
        seen.append(dict_version(attrs))
        probe.x = 2  # type: ignore[attr-defined]
        seen.append(dict_version(attrs))
        del probe.x  # type: ignore[attr-defined]
        seen.append(dict_version(attrs))
    except Exception:  # noqa: BLE001 - any failure means the reader is unusable
        return None
    ok = seen[0] != seen[1] and seen[2] != seen[3] and seen[3] != seen[4]
    return dict_version if ok else None


def tensor_metadata_checker(tensors: list[torch.Tensor]) -> Any:
    """A C++ check ``check(*tensors) -> bool`` that the tensors still have the Python
    type, dtype, device, dispatch keys, requires_grad, sizes and strides they have now
    (``torch._C._dynamo.guards.TensorGuards``; not the storage offset), or None where
    it is missing or fails a self-test (a changed size must fail it)."""
    if not _tensor_guards_work():
        return None
    return _tensor_guards(tensors).check


def _tensor_guards(tensors: list[torch.Tensor]) -> Any:
    from torch._C._dynamo.guards import TensorGuards

    sizes: Any = [list(t.shape) for t in tensors]  # every size and stride exact
    strides: Any = [list(t.stride()) for t in tensors]
    return TensorGuards(*tensors, dynamic_dims_sizes=sizes, dynamic_dims_strides=strides)


@functools.cache
def _tensor_guards_work() -> bool:
    try:
        probe = [torch.zeros(2, 3), torch.nn.Parameter(torch.zeros(4))]
        check = _tensor_guards(probe).check
        return bool(check(*probe) is True
                    and check(probe[0], torch.nn.Parameter(torch.zeros(5))) is False
                    and check(probe[0], torch.zeros(4)) is False)
    except Exception:  # noqa: BLE001 - any failure means the C++ check is unusable
        return False


_FAKE_TENSOR_LOG = logging.getLogger("torch._subclasses.fake_tensor")


@contextlib.contextmanager
def quiet_fake_tensor_errors() -> Iterator[None]:
    """Silence torch's fake-tensor logger while the capture runs a user's op on fake
    tensors: an op that fails (a shape mismatch) is logged there at ERROR level with a
    full traceback ("failed while attempting to run meta"), although the capture
    handles the error (the user gets the op's exception). Its ``disabled`` flag is put
    back after.

    NOTE: the flag, not ``setLevel``: each ``setLevel`` clears the level cache of every
    logger in the process (about 12 us with torch's 158 loggers, more with a model
    library's), twice per captured op: some 20-40 ms of a 12-layer BERT's capture."""
    disabled = _FAKE_TENSOR_LOG.disabled
    _FAKE_TENSOR_LOG.disabled = True
    try:
        yield
    finally:
        _FAKE_TENSOR_LOG.disabled = disabled


def module_call_impl() -> Any:
    """``nn.Module``'s own call implementation (hooks and ``forward``), which
    ``nn.Module.__call__`` forwards to: what a module class that does not define its own
    ``__call__`` runs."""
    return torch.nn.Module._call_impl


def python_dispatcher() -> Any:
    """torch's Python dispatcher (a context manager): while on, the Python kernels torch
    registers for ``CompositeImplicitAutograd`` ops (``upsample_*.vec``, which
    ``F.interpolate(x, scale_factor=2)`` calls) run instead of their C++ ones, which
    compute output sizes as concrete ints and would specialise every symbolic size."""
    from torch._dispatch.python import enable_python_dispatcher

    return enable_python_dispatcher()


def python_dispatcher_off() -> Any:
    """torch's Python dispatcher turned off inside (a context manager): an op then
    reaches the recorder as itself, not as the ops of torch's Python decomposition."""
    return torch._C._DisablePythonDispatcher()


def upsample_nearest_bindings() -> dict[int, Any]:
    """torch's C bindings of ``upsample_nearest{1,2,3}d`` (what ``F.interpolate`` calls
    in ``"nearest"`` mode), by the input's rank."""
    return {3: torch._C._nn.upsample_nearest1d, 4: torch._C._nn.upsample_nearest2d,
            5: torch._C._nn.upsample_nearest3d}


def causal_mask_detector() -> tuple[Any, str, Any]:
    """Where torch's transformer modules find the function that decides whether a mask
    is causal (``torch.nn.modules.transformer._detect_is_causal_mask``, a module
    global): the module, the name, the function."""
    from torch.nn.modules import transformer

    return transformer, "_detect_is_causal_mask", transformer._detect_is_causal_mask
