"""What an ``ember::triton_kernel`` node says about the user's Triton launch it stands for.

A launch ``kernel[grid](*args, **kwargs)`` captured by the frontend becomes one node::

    %k = ember::triton_kernel.default("mymodule:add_kernel", [%x, %out], [64, 8], "{...}")

with four arguments: the kernel's key (``module:name``, the module attribute holding the
launched object: a ``@triton.jit`` function, or the ``triton.autotune`` /
``triton.heuristics`` object wrapping one), the tensor arguments, the integer values
(``SymInt``: sizes may be symbolic) and a :class:`UserKernelCall` as JSON text. The
call says, for each argument of the launch, where its value comes from
(:class:`LaunchArg`), the grid for each autotuning configuration
(:class:`GridChoice`), which tensor arguments the kernel writes, and the SHA-256 of the
kernel's source, which the program carries in its files (``user_kernels/...``).

The launch never runs code read from a file: the kernel object is found in this process
(:func:`resolve_kernel`: the module must be imported) and its source must hash to the
recorded one; otherwise an ``IRFormatError`` names the kernel.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import sys
import textwrap
import threading
from dataclasses import dataclass, field
from typing import Any

from ember.runtime.ir.errors import IRFormatError

__all__ = ["Constant", "GridChoice", "KernelSource", "LaunchArg", "UserKernelCall",
           "base_function", "kernel_source", "resolve_kernel", "source_file_name"]

Constant = int | float | bool | str | None
"""A Python value a launch passes as is (a ``tl.constexpr``, a flag, ``num_warps``)."""

_CONSTANT_TYPES = (int, float, bool, str, type(None))


@dataclass(frozen=True)
class LaunchArg:
    """One argument of the launch: ``kind`` is ``"tensor"`` (``index`` into the node's
    tensors), ``"int"`` (``index`` into its integer values), ``"const"`` (``value``) or
    ``"tl_dtype"`` (a ``triton.language`` dtype constexpr, ``value`` its name: ``"fp16"``).
    ``name`` is the keyword it was passed by, None for a positional argument."""

    kind: str
    index: int = 0
    value: Constant = None
    name: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        if self.kind in ("const", "tl_dtype"):
            out["value"] = self.value
        else:
            out["index"] = self.index
        if self.name is not None:
            out["name"] = self.name
        return out

    @staticmethod
    def from_json(data: Any) -> LaunchArg:
        kind = _field(data, "kind", str)
        if kind not in ("tensor", "int", "const", "tl_dtype"):
            raise IRFormatError(f"user kernel argument: unknown kind {kind!r}")
        name = data.get("name")
        if name is not None and not isinstance(name, str):
            raise IRFormatError("user kernel argument: name is not a string")
        if kind == "tl_dtype":
            value = data.get("value")
            if not isinstance(value, str) or not value.isidentifier():
                raise IRFormatError(f"user kernel argument: dtype {value!r} is not a name")
            return LaunchArg(kind, value=value, name=name)
        if kind == "const":
            value = data.get("value")
            if not isinstance(value, _CONSTANT_TYPES):
                raise IRFormatError(f"user kernel argument: constant {value!r} is not a "
                                    "number, string or null")
            return LaunchArg(kind, value=value, name=name)
        return LaunchArg(kind, index=_field(data, "index", int), name=name)


@dataclass(frozen=True)
class GridChoice:
    """The grid of the launch when the configuration's keyword values are ``when``
    (the autotuner picks one of its configs at run time; ``{}``: always). ``dims`` are
    indexes into the node's integer values."""

    dims: tuple[int, ...]
    when: dict[str, Constant] = field(default_factory=dict)

    def matches(self, meta: dict[str, Any]) -> bool:
        """Whether the launch's meta-parameters ``meta`` (what Triton hands a grid
        function) hold this choice's configuration."""
        return all(k in meta and meta[k] == v for k, v in self.when.items())


@dataclass(frozen=True)
class UserKernelCall:
    """What an ``ember::triton_kernel`` node launches (its ``spec`` argument).

    Attributes:
        kernel: ``module:name`` of the launched object.
        source_sha256: hex SHA-256 of :func:`kernel_source`'s text at capture.
        source_file: the program file holding that text.
        args: the launch's arguments, positional ones first, then keywords.
        grids: one grid per autotuning configuration (one entry without autotuning).
        writes: indexes into the node's tensors of the ones the kernel writes; the node
            returns a written copy of each, in this order.
        same: groups of indexes into the node's tensors that were one tensor at the
            launch (``kernel[grid](x, x)``): they share one written copy. Equal values
            elsewhere (two ``empty_like`` merged by CSE) stay apart.
    """

    kernel: str
    source_sha256: str
    source_file: str
    args: tuple[LaunchArg, ...]
    grids: tuple[GridChoice, ...]
    writes: tuple[int, ...]
    same: tuple[tuple[int, ...], ...] = ()

    def to_text(self) -> str:
        """Compact JSON (the node's ``spec`` argument); :meth:`from_text` reads it."""
        doc = {
            "kernel": self.kernel, "source_sha256": self.source_sha256,
            "source_file": self.source_file,
            "args": [a.to_json() for a in self.args],
            "grids": [{"dims": list(g.dims), "when": dict(g.when)} for g in self.grids],
            "writes": list(self.writes),
        }
        if self.same:
            doc["same"] = [list(group) for group in self.same]
        return json.dumps(doc, separators=(",", ":"), sort_keys=True)

    @staticmethod
    def from_text(text: str) -> UserKernelCall:
        """Parse :meth:`to_text`'s JSON.

        Raises:
            IRFormatError: naming the malformed field.
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise IRFormatError(f"ember::triton_kernel: its spec is not JSON ({e})") from e
        if not isinstance(data, dict):
            raise IRFormatError("ember::triton_kernel: its spec is not a JSON object")
        grids = []
        for g in _field(data, "grids", list):
            dims = tuple(_int(d, "grid dim") for d in _field(g, "dims", list))
            when = _field(g, "when", dict)
            if not all(isinstance(v, _CONSTANT_TYPES) for v in when.values()):
                raise IRFormatError("ember::triton_kernel: a grid's config value is not a "
                                    "constant")
            grids.append(GridChoice(dims, dict(when)))
        return UserKernelCall(
            kernel=_field(data, "kernel", str),
            source_sha256=_field(data, "source_sha256", str),
            source_file=_field(data, "source_file", str),
            args=tuple(LaunchArg.from_json(a) for a in _field(data, "args", list)),
            grids=tuple(grids),
            writes=tuple(_int(w, "written index") for w in _field(data, "writes", list)),
            same=tuple(tuple(_int(i, "tensor index") for i in _list(group))
                       for group in _list(data.get("same", []))),
        )


def _field(data: Any, key: str, kind: type) -> Any:
    if not isinstance(data, dict) or key not in data:
        raise IRFormatError(f"ember::triton_kernel: its spec has no {key!r}")
    value = data[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise IRFormatError(f"ember::triton_kernel: {key!r} is not a {kind.__name__}")
    return value


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise IRFormatError("ember::triton_kernel: 'same' is not a list of lists")
    return value


def _int(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise IRFormatError(f"ember::triton_kernel: a {what} is not an int")
    return value


# ---- the kernel's source ----------------------------------------------------------------


def base_function(kernel: Any) -> Any:
    """The user's Python function under a kernel and its wrappers (autotune ->
    heuristics -> jit -> function): the first ``.fn`` that is a plain function."""
    inner = kernel
    for _ in range(16):
        if inspect.isfunction(inner):
            return inner
        nested = getattr(inner, "fn", None)
        if nested is None:
            break
        inner = nested
    raise TypeError(f"{type(kernel).__name__} wraps no Python function (not a Triton kernel)")


def _is_jit_callable(value: Any) -> bool:
    """A ``@triton.jit`` function (compiled or interpreted), without importing Triton."""
    module = type(value).__module__ or ""
    return module.startswith("triton.") and inspect.isfunction(getattr(value, "fn", None))


def _function_source(fn: Any) -> str:
    """``fn``'s source from its ``def`` line (decorators dropped), dedented."""
    text = textwrap.dedent(inspect.getsource(fn))
    tree = ast.parse(text)
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef):
        raise TypeError(f"{fn.__qualname__} is not a function definition")
    lines = text.splitlines(keepends=True)
    return "".join(lines[node.lineno - 1:])


def _called_jit_functions(fn: Any) -> list[tuple[str, Any]]:
    """The ``@triton.jit`` functions ``fn``'s body names (globals or module attributes
    such as ``helpers.combine``), with the name they are reached by."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    found: dict[str, Any] = {}
    scope = dict(fn.__globals__)
    if fn.__closure__:
        scope.update(zip(fn.__code__.co_freevars,
                         (c.cell_contents for c in fn.__closure__)))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            value = scope.get(node.id)
            name = node.id
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owner = scope.get(node.value.id)
            if owner is None or not inspect.ismodule(owner):
                continue
            value = getattr(owner, node.attr, None)
            name = f"{node.value.id}.{node.attr}"
        else:
            continue
        if value is not None and _is_jit_callable(value):
            found[name] = value
    return sorted(found.items())


@dataclass(frozen=True)
class KernelSource:
    """The text of a kernel and of every ``@triton.jit`` function it calls (each once,
    headed by ``# module.qualname``), and its SHA-256."""

    text: str
    sha256: str


_sources_lock = threading.Lock()
_sources: dict[int, tuple[Any, KernelSource]] = {}


def kernel_source(kernel: Any) -> KernelSource:
    """The :class:`KernelSource` of ``kernel`` (cached per kernel object).

    Raises:
        TypeError: ``kernel`` wraps no Python function.
        OSError: its source file cannot be read.
    """
    with _sources_lock:
        hit = _sources.get(id(kernel))
        if hit is not None and hit[0] is kernel:
            return hit[1]
    parts: list[str] = []
    seen: set[int] = set()
    todo = [base_function(kernel)]
    while todo:
        fn = todo.pop(0)
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        parts.append(f"# {fn.__module__}.{fn.__qualname__}\n{_function_source(fn)}")
        todo.extend(base_function(j) for _, j in _called_jit_functions(fn))
    text = "\n".join(parts)
    source = KernelSource(text, hashlib.sha256(text.encode()).hexdigest())
    with _sources_lock:
        _sources[id(kernel)] = (kernel, source)
    return source


def source_file_name(kernel_key: str, sha256: str) -> str:
    """The program file a kernel's source travels in: ``user_kernels/<name>_<sha>.py``."""
    name = kernel_key.rpartition(":")[2].replace(".", "_")
    return f"user_kernels/{name}_{sha256[:16]}.py"


def resolve_kernel(call: UserKernelCall) -> Any:
    """The kernel object ``call`` launches, found in this process.

    Raises:
        IRFormatError: its module is not imported, has no such attribute, or the
            kernel's source differs from the one the program was captured with.
    """
    module_name, _, name = call.kernel.partition(":")
    module = sys.modules.get(module_name)
    if module is None:
        raise IRFormatError(
            f"user Triton kernel {call.kernel}: module {module_name!r} is not imported in "
            "this process; import it before loading or running the program (Ember never "
            "runs kernel source read from a file)")
    kernel: Any = module
    for part in name.split("."):
        kernel = getattr(kernel, part, None)
        if kernel is None:
            raise IRFormatError(f"user Triton kernel {call.kernel}: module {module_name!r} "
                                f"has no attribute {name!r}")
    try:
        source = kernel_source(kernel)
    except (TypeError, OSError) as e:
        raise IRFormatError(f"user Triton kernel {call.kernel}: its source cannot be "
                            f"read ({e})") from e
    if source.sha256 != call.source_sha256:
        raise IRFormatError(
            f"user Triton kernel {call.kernel}: its source differs from the one the "
            f"program was captured with (sha256 {source.sha256[:16]} here, "
            f"{call.source_sha256[:16]} in {call.source_file}); compile it again")
    return kernel
