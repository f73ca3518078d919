"""Allow-listed names of torch dtypes, devices, memory formats and layouts.

The JSON codec and the text parser decode these values only through the tables here:
a name missing from a table is an error, never a ``getattr`` on an arbitrary string.
"""

from __future__ import annotations

import re

import torch
from ember.runtime.ir.errors import IRFormatError

# Canonical names (as torch spells them, ``torch.float32`` -> "float32"). A name this
# torch build does not have is left out.
_DTYPE_CANDIDATES: tuple[str, ...] = (
    "float32", "float64", "float16", "bfloat16",
    "complex32", "complex64", "complex128",
    "uint8", "uint16", "uint32", "uint64",
    "int8", "int16", "int32", "int64", "bool",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
    "float8_e8m0fnu", "float4_e2m1fn_x2",
    "qint8", "quint8", "qint32", "quint4x2", "quint2x4",
)

DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name)
    for name in _DTYPE_CANDIDATES
    if isinstance(getattr(torch, name, None), torch.dtype)
}
"""Canonical dtype name -> dtype."""

DTYPE_NAMES: dict[torch.dtype, str] = {dtype: name for name, dtype in DTYPES.items()}
"""dtype -> canonical name."""

# Short names for the printer (``f32[4, 8]``); other dtypes print their canonical name.
_SHORT_NAMES: dict[str, str] = {
    "float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16",
    "complex32": "c32", "complex64": "c64", "complex128": "c128",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "bool": "bool",
}

_TEXT_DTYPES: dict[str, torch.dtype] = {
    **DTYPES,
    **{short: DTYPES[name] for name, short in _SHORT_NAMES.items() if name in DTYPES},
}

MEMORY_FORMATS: dict[str, torch.memory_format] = {
    "contiguous_format": torch.contiguous_format,
    "channels_last": torch.channels_last,
    "channels_last_3d": torch.channels_last_3d,
    "preserve_format": torch.preserve_format,
}
MEMORY_FORMAT_NAMES: dict[torch.memory_format, str] = {
    v: k for k, v in MEMORY_FORMATS.items()
}

LAYOUTS: dict[str, torch.layout] = {
    name: getattr(torch, name)
    for name in ("strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr",
                 "sparse_bsc", "_mkldnn", "jagged")
    if isinstance(getattr(torch, name, None), torch.layout)
}
LAYOUT_NAMES: dict[torch.layout, str] = {v: k for k, v in LAYOUTS.items()}

DEVICE_TYPES: frozenset[str] = frozenset(
    {"cpu", "cuda", "meta", "mps", "xpu", "hip", "hpu", "mtia", "privateuseone"}
)

_DEVICE_RE = re.compile(r"([a-z_]+)(?::(\d+))?")


def dtype_from_name(name: str, where: str) -> torch.dtype:
    """The dtype with canonical name ``name``.

    Raises:
        IRFormatError: naming ``where`` if ``name`` is not an allow-listed dtype.
    """
    dtype = DTYPES.get(name)
    if dtype is None:
        raise IRFormatError(f"{where}: unknown dtype {name!r}")
    return dtype


def dtype_name(dtype: torch.dtype) -> str:
    """The canonical name of ``dtype`` (``torch.float32`` -> "float32").

    Raises:
        IRFormatError: for a dtype outside the allow-list.
    """
    name = DTYPE_NAMES.get(dtype)
    if name is None:
        raise IRFormatError(f"dtype {dtype} has no Ember name")
    return name


def dtype_short_name(dtype: torch.dtype) -> str:
    """The name the text form uses: ``f32``, ``bf16``, ``i64``, ``bool``, ..."""
    name = dtype_name(dtype)
    return _SHORT_NAMES.get(name, name)


def dtype_from_text(name: str, where: str) -> torch.dtype:
    """The dtype named ``name`` in the text form (short or canonical name)."""
    dtype = _TEXT_DTYPES.get(name)
    if dtype is None:
        raise IRFormatError(f"{where}: unknown dtype {name!r}")
    return dtype


def device_from_name(name: str, where: str) -> torch.device:
    """``"cuda:0"`` -> ``torch.device("cuda", 0)``, for allow-listed device types only.

    Raises:
        IRFormatError: naming ``where`` for a malformed name or an unknown device type.
    """
    m = _DEVICE_RE.fullmatch(name)
    if m is None or m.group(1) not in DEVICE_TYPES:
        raise IRFormatError(f"{where}: unknown device {name!r}")
    kind, index = m.group(1), m.group(2)
    try:
        return torch.device(kind) if index is None else torch.device(kind, int(index))
    except RuntimeError as e:
        raise IRFormatError(f"{where}: unknown device {name!r}: {e}") from e


def memory_format_from_name(name: str, where: str) -> torch.memory_format:
    """The memory format named ``name`` (``"channels_last"``)."""
    fmt = MEMORY_FORMATS.get(name)
    if fmt is None:
        raise IRFormatError(f"{where}: unknown memory format {name!r}")
    return fmt


def layout_from_name(name: str, where: str) -> torch.layout:
    """The layout named ``name`` (``"strided"``)."""
    layout = LAYOUTS.get(name)
    if layout is None:
        raise IRFormatError(f"{where}: unknown layout {name!r}")
    return layout
