"""Strict readers of the JSON values in ``Program.metadata`` (see the package docstring).

Every reader takes the value and ``where``, the path of the value
(``program 'a.ember': metadata['compiled']['graphs']['forward']``), and raises
:class:`MetadataError` naming that path, what was expected and what was found. Arrays
are JSON lists (never tuples: metadata must survive a JSON round trip unchanged).
Dtype and device names decode through the allow-lists of
:mod:`ember.runtime.ir.torch_names`, never through ``getattr(torch, name)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from ember.runtime.ir import torch_names
from ember.runtime.ir.errors import IRFormatError
from ember.runtime.ir.graph import Program, SymInt
from ember.runtime.ir.symbolic import free_symbols

JSON = object
"""A value ``json.loads`` can return; narrowed by the readers below."""


class MetadataError(IRFormatError, ValueError):
    """``Program.metadata`` breaks a stage contract: a key a stage writes is missing,
    unknown, or holds a value of the wrong type. The message names the key's path and,
    for a program read from a file, the file."""


def program_where(program: Program, key: str) -> str:
    """The path of top-level metadata ``key`` of ``program``, for error messages:
    ``program 'a.ember': metadata['aot']`` (the file is named when the program was
    read from one and not vouched for), else ``program: metadata['aot']``."""
    origin = f" {program.untrusted_origin!r}" if program.untrusted_origin else ""
    return f"program{origin}: metadata[{key!r}]"


def read_from(program: Program) -> str:
    """`` (read from 'a.ember')`` for a program read from a file, else ``""``."""
    return f" (read from {program.untrusted_origin!r})" if program.untrusted_origin else ""


def at(where: str, key: str | int) -> str:
    """The path of item ``key`` of the value at ``where``."""
    return f"{where}[{key!r}]"


def describe(value: JSON) -> str:
    """``str 'abc'``, ``NoneType None``: a short description of a JSON value."""
    text = repr(value)
    return f"{type(value).__name__} {text[:60] + '...' if len(text) > 60 else text}"


def read_object(value: JSON, where: str, required: Sequence[str],
                optional: Sequence[str] = ()) -> dict[str, JSON]:
    """``value`` as a JSON object with every key of ``required`` and no key outside
    ``required`` and ``optional``.

    Raises:
        MetadataError: not an object, a missing key or an unknown key (named).
    """
    value = read_mapping(value, where)
    missing = [k for k in required if k not in value]
    if missing:
        raise MetadataError(f"{where}: missing key(s) {', '.join(map(repr, missing))}")
    known = set(required) | set(optional)
    unknown = sorted(k for k in value if k not in known)
    if unknown:
        raise MetadataError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; "
                            f"known: {', '.join(map(repr, [*required, *optional]))}")
    return value


def read_str(value: JSON, where: str) -> str:
    """``value`` as a string."""
    if not isinstance(value, str):
        raise MetadataError(f"{where}: expected a string, got {describe(value)}")
    return value


def read_int(value: JSON, where: str, minimum: int | None = None) -> int:
    """``value`` as an integer (not a bool), at least ``minimum`` if given."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise MetadataError(f"{where}: expected an integer, got {describe(value)}")
    if minimum is not None and value < minimum:
        raise MetadataError(f"{where}: expected an integer >= {minimum}, got {value}")
    return value


def read_bool(value: JSON, where: str) -> bool:
    """``value`` as true or false."""
    if not isinstance(value, bool):
        raise MetadataError(f"{where}: expected true or false, got {describe(value)}")
    return value


def read_list(value: JSON, where: str) -> list[JSON]:
    """``value`` as a JSON array."""
    if not isinstance(value, list):
        raise MetadataError(f"{where}: expected a JSON array, got {describe(value)}")
    return value


def read_ints(value: JSON, where: str, length: int | None = None,
              minimum: int | None = None) -> tuple[int, ...]:
    """``value`` as an array of integers (of ``length`` items if given)."""
    items = read_list(value, where)
    if length is not None and len(items) != length:
        raise MetadataError(f"{where}: expected {length} integers, got {describe(value)}")
    return tuple(read_int(v, at(where, i), minimum) for i, v in enumerate(items))


def read_symint(value: JSON, where: str) -> SymInt:
    """``value`` as a size: an integer, or the text of a size expression over symbols
    (``"s0*4"``, :mod:`ember.runtime.ir.symbolic`)."""
    if isinstance(value, str):
        try:
            free_symbols(value)
        except IRFormatError as e:
            raise MetadataError(f"{where}: {e}") from None
        return value
    if not isinstance(value, int) or isinstance(value, bool):
        raise MetadataError(f"{where}: expected an integer or a size expression, got "
                            f"{describe(value)}")
    return value


def read_symints(value: JSON, where: str) -> tuple[SymInt, ...]:
    """``value`` as an array of sizes (:func:`read_symint`)."""
    return tuple(read_symint(v, at(where, i)) for i, v in enumerate(read_list(value, where)))


def read_strs(value: JSON, where: str) -> tuple[str, ...]:
    """``value`` as an array of strings."""
    return tuple(read_str(v, at(where, i)) for i, v in enumerate(read_list(value, where)))


def read_mapping(value: JSON, where: str) -> dict[str, JSON]:
    """``value`` as a JSON object with any keys (a table keyed by name)."""
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise MetadataError(f"{where}: expected a JSON object, got {describe(value)}")
    return value


def read_str_map(value: JSON, where: str) -> dict[str, str]:
    """``value`` as an object of strings."""
    return {k: read_str(v, at(where, k)) for k, v in read_mapping(value, where).items()}


def read_int_map(value: JSON, where: str, minimum: int | None = None) -> dict[str, int]:
    """``value`` as an object of integers."""
    return {k: read_int(v, at(where, k), minimum)
            for k, v in read_mapping(value, where).items()}


def read_dtype(value: JSON, where: str) -> torch.dtype:
    """The dtype named ``value`` (a canonical name: ``"float32"``), from the runtime's
    allow-list (:data:`ember.runtime.ir.torch_names.DTYPES`)."""
    try:
        return torch_names.dtype_from_name(read_str(value, where), where)
    except MetadataError:
        raise
    except IRFormatError as e:
        raise MetadataError(f"{e}; known: {', '.join(torch_names.DTYPES)}") from None


def read_dtypes(value: JSON, where: str) -> tuple[torch.dtype, ...]:
    """``value`` as an array of dtype names."""
    return tuple(read_dtype(v, at(where, i)) for i, v in enumerate(read_list(value, where)))


def read_device(value: JSON, where: str) -> torch.device:
    """The device named ``value`` (``"cpu"``, ``"cuda:0"``), for the device types of
    :data:`ember.runtime.ir.torch_names.DEVICE_TYPES` only."""
    try:
        return torch_names.device_from_name(read_str(value, where), where)
    except MetadataError:
        raise
    except IRFormatError as e:
        raise MetadataError(str(e)) from None


def dtype_names(dtypes: Sequence[torch.dtype]) -> list[str]:
    """The canonical names of ``dtypes``, for ``to_json``."""
    return [torch_names.dtype_name(d) for d in dtypes]
