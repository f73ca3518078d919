"""The private torch APIs the frontend uses, in one place (docs/architecture.md): pytree.

Other helpers may add lines here; keep one import per name and say what it is for.
"""

from __future__ import annotations

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
    "SUPPORTED_NODES",
    "FakeTensor",
    "GetAttrKey",
    "KeyPath",
    "MappingKey",
    "SequenceKey",
    "TorchDispatchMode",
    "TreeSpec",
    "data_dependent_output_types",
    "fake_mode_active",
    "global_module_hooks_registered",
    "has_unbacked_symbols",
    "is_fake",
    "is_view",
    "numpy_layer",
    "pinning_source",
    "register_pytree_node",
    "tree_flatten",
    "tree_flatten_with_path",
    "tree_unflatten",
]


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
    return any(
        bool(getattr(_module_globals, name, None))
        for name in ("_global_forward_hooks", "_global_forward_pre_hooks",
                     "_global_backward_hooks", "_global_backward_pre_hooks",
                     "_global_forward_hooks_always_called")
    )


def numpy_layer() -> Any:
    """torch's NumPy-compatible layer over tensors (``torch._numpy``): the strict
    frontend traces NumPy code with it (``bytecode/numpy_rules.py``). Imported on
    first use: it imports NumPy."""
    import torch._numpy

    return torch._numpy


def is_view(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a view of another tensor (shares its storage)."""
    return bool(tensor._is_view())


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
