"""JSON encodings of node arguments, and the typed checks that every decoder of
``program.json`` uses (graph-level pieces are in :mod:`ember.runtime.ir.json_graph`).

Arguments are a closed, typed set of encodings:

=========================  ===========================================
Python value               JSON
=========================  ===========================================
None, bool, int, str       null, true/false, 1, "s"
finite float               a JSON number with a fraction or exponent: 1.0, 1e-05
inf, -inf, nan             {"float": "inf"}, {"float": "-inf"}, {"float": "nan"}
complex                    {"complex": [re, im]} (each a float encoding)
ValueRef                   {"ref": "x"} or {"ref": "x", "index": 0}
torch.dtype                {"dtype": "float32"}
torch.device               {"device": "cuda:0"}
torch.memory_format        {"memory_format": "channels_last"}
torch.layout               {"layout": "strided"}
SymExpr                    {"sym": "4*s0"} (schema 1.2 on)
tuple                      {"tuple": [...]}
=========================  ===========================================

Decoders check every type and raise :class:`IRFormatError` naming the JSON path of the
bad value (``graphs.forward.nodes[3].args[1]``). Names decode through the allow-lists of
:mod:`ember.runtime.ir.torch_names`. Documents are read with :func:`parse_json`, which
holds them to the limits of :mod:`ember.runtime.ir.limits` (nesting depth, integer
range, finite numbers).
"""

from __future__ import annotations

import array
import itertools
import json
import math
import re
from collections.abc import Callable
from typing import TypeVar

import torch
from ember.runtime.ir import torch_names
from ember.runtime.ir.errors import IRFormatError
from ember.runtime.ir.graph import (
    Argument,
    SymExpr,
    ValueRef,
)
from ember.runtime.ir.limits import DEFAULT_LIMITS, MAX_NUMBER_DIGITS, LoadLimits

JSON = object  # a value json.loads can return; narrowed with the checks below

# The types a ScalarMeta may name.
SCALAR_META_TYPES: frozenset[str] = frozenset({"int", "float", "bool", "complex"})

_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}

T = TypeVar("T")


# ---- reading documents ------------------------------------------------------------------


def parse_json(data: bytes | str, where: str, limits: LoadLimits = DEFAULT_LIMITS) -> JSON:
    """The JSON value of ``data`` (UTF-8 bytes or text), within ``limits``.

    The nesting depth and the length of numbers are checked on the text before it is
    parsed (:func:`check_json_text`, in C loops: a load of a large program barely
    notices).

    Raises:
        IRFormatError: naming ``where`` and the problem: not UTF-8, not JSON, nested
            deeper than ``limits.max_json_depth``, a number of more than
            :data:`~ember.runtime.ir.limits.MAX_NUMBER_DIGITS` digits, a non-finite
            number (``1e999``, ``NaN``), or a value too large to hold.
    """
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as e:
        raise IRFormatError(f"{where} is not valid JSON: not UTF-8 text: {e}") from None
    check_json_text(data, where, limits)
    try:
        value: JSON = json.loads(text, parse_constant=_refuse_constant,
                                 parse_float=_finite_float)
    except json.JSONDecodeError as e:
        raise IRFormatError(f"{where} is not valid JSON: {e}") from None
    except (RecursionError, ValueError, OverflowError, MemoryError) as e:
        raise IRFormatError(f"{where}: unreadable JSON value: {type(e).__name__}: {e}"
                            ) from None
    return value


_LONG_NUMBER_RE = re.compile(f"[0-9]{{{MAX_NUMBER_DIGITS + 1},}}".encode("ascii"))
_LONG_RUN = b"0" * (MAX_NUMBER_DIGITS + 1)
_DIGITS_AS_ZEROS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
"""A ``bytes.translate`` table: every digit to ``0``, every other byte to a space."""
_NOT_STRUCTURE = bytes(range(256)).translate(None, b'"[]{}')
"""The bytes ``bytes.translate`` deletes to keep only quotes and brackets."""
_BRACKET_STEPS = bytes.maketrans(b"[]{}", b"\x01\xff\x01\xff")
"""A ``bytes.translate`` table: an opening bracket to 1, a closing one to -1 (as a
signed byte)."""


def check_json_text(text: str | bytes, where: str, limits: LoadLimits = DEFAULT_LIMITS
                    ) -> None:
    """Check the bracket nesting and the number lengths of JSON ``text`` (outside its
    string literals) before it is parsed.

    Works on the UTF-8 bytes, in the C loops of ``bytes`` methods (regular-expression
    passes over a training program's 1.2 MB of JSON cost 25 ms, these 3 ms): a quote,
    backslash, bracket or digit byte is never part of a multi-byte character. Escapes
    are blanked first (``\\\\`` and ``\\"``; a run of backslashes pairs from its left
    end, as JSON reads it), so that every remaining quote opens or closes a string
    literal, and the string literals are the odd pieces of a split at the quotes. That
    is how the JSON reader delimits strings up to the first syntax error, where it
    stops: it reads nothing that this check classified otherwise.

    Raises:
        IRFormatError: see :func:`parse_json`.
    """
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    if b"\\" in data:
        data = data.replace(b"\\\\", b"__").replace(b'\\"', b"__")
    if _LONG_RUN in data.translate(_DIGITS_AS_ZEROS):  # somewhere, maybe in a string
        outside_strings = b" ".join(data.split(b'"')[::2])
        long_number = _LONG_NUMBER_RE.search(outside_strings)
        if long_number is not None:
            digits = long_number.end() - long_number.start()
            raise IRFormatError(f"{where}: a number of {digits} digits is out of range "
                                f"(at most {MAX_NUMBER_DIGITS})")
    # NOTE: two quotes left adjacent by the deletion open and close one string, or close
    # one and open the next: dropping them changes neither the brackets outside strings
    # nor the parity of the quotes before any other byte, and leaves few pieces to split
    # (a program's strings seldom hold brackets)
    quotes_and_brackets = data.translate(None, _NOT_STRUCTURE).replace(b'""', b"")
    steps = b"".join(quotes_and_brackets.split(b'"')[::2]).translate(_BRACKET_STEPS)
    depth = max(itertools.accumulate(array.array("b", steps)), default=0)
    if depth > limits.max_json_depth:
        raise IRFormatError(f"{where}: JSON nested deeper than {limits.max_json_depth} "
                            "levels (LoadLimits.max_json_depth)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range (a finite float is a JSON "
                         'number; others are {"float": "inf"})')
    return value


def _refuse_constant(name: str) -> JSON:
    raise ValueError(f"{name} is not JSON (non-finite floats are written "
                     '{"float": "inf"})')


# ---- type checks ------------------------------------------------------------------------


def expect_dict(v: JSON, where: str) -> dict[str, JSON]:
    if not isinstance(v, dict) or not all(isinstance(k, str) for k in v):
        raise IRFormatError(f"{where}: expected a JSON object, got {_describe(v)}")
    return v


def expect_list(v: JSON, where: str) -> list[JSON]:
    if not isinstance(v, list):
        raise IRFormatError(f"{where}: expected a JSON array, got {_describe(v)}")
    return v


def expect_str(v: JSON, where: str) -> str:
    if not isinstance(v, str):
        raise IRFormatError(f"{where}: expected a string, got {_describe(v)}")
    return v


def expect_int(v: JSON, where: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise IRFormatError(f"{where}: expected an integer, got {_describe(v)}")
    return v


def expect_bool(v: JSON, where: str) -> bool:
    if not isinstance(v, bool):
        raise IRFormatError(f"{where}: expected true or false, got {_describe(v)}")
    return v


def optional(v: JSON, where: str, check: Callable[[JSON, str], T]) -> T | None:
    """``None`` for JSON null, else ``check(v, where)``."""
    return None if v is None else check(v, where)


def expect_keys(d: dict[str, JSON], where: str, required: set[str], allowed: set[str]) -> None:
    """Check that ``d`` has every key of ``required`` and no key outside ``allowed``."""
    missing = required - d.keys()
    if missing:
        raise IRFormatError(f"{where}: missing key(s) {sorted(missing)}")
    extra = d.keys() - allowed
    if extra:
        raise IRFormatError(f"{where}: unexpected key(s) {sorted(extra)}")


def _describe(v: JSON) -> str:
    text = repr(v)
    return f"{type(v).__name__} {text[:60] + '...' if len(text) > 60 else text}"


# ---- arguments --------------------------------------------------------------------------


def encode_float(x: float) -> JSON:
    if math.isfinite(x):
        return x
    return {"float": "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}


def decode_float(v: JSON, where: str) -> float:
    if isinstance(v, float):
        return v
    if isinstance(v, dict) and v.keys() == {"float"}:
        value = _NON_FINITE.get(v["float"]) if isinstance(v["float"], str) else None
        if value is not None:
            return value
    raise IRFormatError(f"{where}: expected a float encoding, got {_describe(v)}")


def encode_argument(a: Argument) -> JSON:
    """The JSON encoding of an IR argument (see the module docstring).

    Raises:
        IRFormatError: for a value outside the closed set of argument types.
    """
    if a is None or isinstance(a, (bool, int, str)):
        return a
    if isinstance(a, float):
        return encode_float(a)
    if isinstance(a, ValueRef):
        return {"ref": a.node} if a.index is None else {"ref": a.node, "index": a.index}
    if isinstance(a, tuple):
        return {"tuple": [encode_argument(x) for x in a]}
    if isinstance(a, SymExpr):
        return {"sym": a.expr}
    if isinstance(a, complex):
        return {"complex": [encode_float(a.real), encode_float(a.imag)]}
    if isinstance(a, torch.dtype):
        return {"dtype": torch_names.dtype_name(a)}
    if isinstance(a, torch.device):
        return {"device": str(a)}
    if isinstance(a, torch.memory_format):
        name = torch_names.MEMORY_FORMAT_NAMES.get(a)
        if name is not None:
            return {"memory_format": name}
    elif isinstance(a, torch.layout):
        name = torch_names.LAYOUT_NAMES.get(a)
        if name is not None:
            return {"layout": name}
    raise IRFormatError(f"{type(a).__name__} {a!r} is not an Ember IR argument")


def plain_argument(v: JSON) -> Argument | None:
    """``v`` decoded when it is the common case, ``{"ref": name}``, checked without
    formatting a JSON path; None otherwise (a scalar included: the caller returns those
    as they are)."""
    if type(v) is dict and len(v) == 1:
        ref = v.get("ref")
        if type(ref) is str:
            return ValueRef(ref, None)
    return None


def decode_argument(v: JSON, where: str) -> Argument:
    """Decode one argument encoding; ``where`` names it in errors."""
    if v is None or isinstance(v, (bool, int, str, float)):
        return v
    ref = plain_argument(v)
    if ref is not None:
        return ref
    if isinstance(v, list):
        raise IRFormatError(f"{where}: bad argument encoding: a bare JSON array "
                            "(tuples are {\"tuple\": [...]})")
    if not isinstance(v, dict) or len(v) == 0:
        raise IRFormatError(f"{where}: bad argument encoding {_describe(v)}")
    v = expect_dict(v, where)
    if "ref" in v:
        expect_keys(v, where, {"ref"}, {"ref", "index"})
        index = optional(v.get("index"), f"{where}.index", expect_int)
        return ValueRef(expect_str(v["ref"], f"{where}.ref"), index)
    if len(v) != 1:
        raise IRFormatError(f"{where}: bad argument encoding with keys {sorted(v)}")
    ((kind, payload),) = v.items()
    if kind == "tuple":
        items = expect_list(payload, f"{where}.tuple")
        return tuple(decode_argument(x, f"{where}.tuple[{i}]") for i, x in enumerate(items))
    if kind == "float":
        return decode_float(v, where)
    if kind == "complex":
        parts = expect_list(payload, f"{where}.complex")
        if len(parts) != 2:
            raise IRFormatError(f"{where}.complex: expected [real, imag]")
        return complex(decode_float(parts[0], f"{where}.complex[0]"),
                       decode_float(parts[1], f"{where}.complex[1]"))
    if kind == "sym":
        return SymExpr(expect_str(payload, f"{where}.sym"))
    if kind == "dtype":
        return torch_names.dtype_from_name(expect_str(payload, where), where)
    if kind == "device":
        return torch_names.device_from_name(expect_str(payload, where), where)
    if kind == "memory_format":
        return torch_names.memory_format_from_name(expect_str(payload, where), where)
    if kind == "layout":
        return torch_names.layout_from_name(expect_str(payload, where), where)
    raise IRFormatError(f"{where}: bad argument encoding: unknown kind {kind!r}")
