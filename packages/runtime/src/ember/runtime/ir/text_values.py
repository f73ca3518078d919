"""Reading the values of the IR's text form: arguments, metadata, names, numbers (the
part of the parser below statements)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import TypeVar

import torch
from ember.runtime.ir import torch_names
from ember.runtime.ir.errors import IRFormatError
from ember.runtime.ir.graph import (
    Argument,
    Meta,
    ScalarMeta,
    SymExpr,
    SymInt,
    TensorMeta,
    ValueRef,
)
from ember.runtime.ir.json_codec import SCALAR_META_TYPES
from ember.runtime.ir.text_scanner import Scanner
from ember.runtime.ir.text_syntax import (
    IDENT_RE,
    INT_RE,
    NODE_NAME_RE,
    SYM_ARG_CHARS,
    SYM_OFFSET_RE,
    SYM_SIZE_RE,
)

T = TypeVar("T")

_WORD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_NUMBER_RE = re.compile(r"-?[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?")
_DEVICE_RE = re.compile(r"[a-z_]+(?::[0-9]+)?")
_INDEX_RE = re.compile(r"-?[0-9]+")
_NAMED_FLOATS = {"inf": math.inf, "nan": math.nan}
_TORCH_CONSTANTS: dict[str, Argument] = {
    **{f"torch.{k}": v for k, v in torch_names.DTYPES.items()},
    **{f"torch.{k}": v for k, v in torch_names.MEMORY_FORMATS.items()},
    **{f"torch.{k}": v for k, v in torch_names.LAYOUTS.items()},
}
_WORD_CONSTANTS: dict[str, Argument] = {"None": None, "True": True, "False": False}


class ValueReader:
    """Reads values at the position of a :class:`Scanner`."""

    def __init__(self, scanner: Scanner) -> None:
        self.s = scanner

    # ---- lists ------------------------------------------------------------------------

    def items_until(self, close: str, item: Callable[[], T], newlines: bool = False) -> list[T]:
        """``item, item, ...`` up to ``close`` (consumed); a trailing comma is allowed."""
        s = self.s
        skip = s.skip_space_and_newlines if newlines else s.skip_spaces
        items: list[T] = []
        skip()
        while not s.accept(close):
            items.append(item())
            skip()
            if not s.accept(","):
                s.expect(close)
                break
            skip()
        return items

    # ---- names and numbers ------------------------------------------------------------

    def percent_name(self) -> str:
        """``%name`` or ``%"name"``: a node name."""
        self.s.expect("%")
        return self.s.name(NODE_NAME_RE, "a value name after '%'")

    def integer(self) -> int:
        token = self.s.match(INT_RE)
        if token is None:
            raise self.s.error("expected an integer")
        return int(token)

    def floating(self) -> float:
        start = self.s.pos
        value = self.argument()
        if not isinstance(value, float):
            raise self.s.error("expected a float (like 1.0, 1e-05, inf or nan)", start)
        return value

    def dtype(self) -> torch.dtype:
        start = self.s.pos
        word = self.s.match(_WORD_RE)
        if word is None:
            raise self.s.error("expected a dtype (f32, bf16, i64, ...)")
        return self.lookup(torch_names.dtype_from_text, word, start)

    def device(self) -> torch.device:
        start = self.s.pos
        token = self.s.match(_DEVICE_RE)
        if token is None:
            raise self.s.error("expected a device (cpu, cuda:0, ...)")
        return self.lookup(torch_names.device_from_name, token, start)

    def lookup(self, table: Callable[[str, str], T], name: str, start: int) -> T:
        """``table(name)`` (an allow-list lookup of torch_names), its error re-raised
        with the line and column of ``start``."""
        try:
            return table(name, "@")
        except IRFormatError as e:
            raise self.s.error(str(e).removeprefix("@: "), start) from None

    # ---- metadata ---------------------------------------------------------------------

    def optional_meta(self) -> Meta:
        """``: META`` if present, else None."""
        self.s.skip_spaces()
        if not self.s.accept(":"):
            return None
        self.s.skip_spaces()
        return self.meta()

    def meta(self) -> Meta:
        s = self.s
        if s.accept("("):
            return tuple(self.items_until(")", self._single_meta))
        return self._single_meta()

    def _single_meta(self) -> TensorMeta | ScalarMeta | None:
        s = self.s
        start = s.pos
        word = s.match(_WORD_RE)
        if word is None:
            raise s.error("expected metadata (f32[...]{...} cpu, int, float, bool or None)")
        if word == "None":
            return None
        if not s.peek("["):
            if word not in SCALAR_META_TYPES:
                raise s.error(f"unknown scalar type {word!r} (tensor metadata needs "
                              "[sizes])", start)
            if word == "int" and s.accept("("):  # int(u0): the symbol it binds
                symbol = s.match(_WORD_RE)
                if symbol is None:
                    raise s.error("expected a symbol name in int(...)")
                s.expect(")", "after the symbol int(...) binds")
                return ScalarMeta(word, symbol)
            return ScalarMeta(word)
        dtype = self.lookup(torch_names.dtype_from_text, word, start)
        s.expect("[")
        sizes = self.items_until("]", lambda: self._symint(SYM_SIZE_RE))
        s.expect("{", "before the strides")
        strides = self.items_until("}", lambda: self._symint(SYM_SIZE_RE))
        s.skip_spaces()
        device = self.device()
        s.skip_spaces()
        offset: SymInt = 0
        if s.accept("offset="):
            offset = self._symint(SYM_OFFSET_RE)
            s.skip_spaces()
        requires_grad = s.keyword("requires_grad")
        return TensorMeta(dtype, tuple(sizes), tuple(strides), device, offset, requires_grad)

    def _symint(self, bare: re.Pattern[str]) -> SymInt:
        s = self.s
        if s.peek('"'):
            return s.string()
        token = s.match(bare)
        if token is None:
            raise s.error("expected a size: an integer or a symbolic expression")
        return int(token) if INT_RE.fullmatch(token) else token

    def _sym_argument(self) -> str:
        """The expression inside ``sym(...)``: a string, or bare text up to the
        parenthesis that closes ``sym(``."""
        s = self.s
        if s.peek('"'):
            return s.string()
        start, depth = s.pos, 0
        while s.pos < len(s.text) and s.text[s.pos] in SYM_ARG_CHARS:
            c = s.text[s.pos]
            if c == ")":
                if depth == 0:
                    break
                depth -= 1
            elif c == "(":
                depth += 1
            s.pos += 1
        if s.pos == start:
            raise s.error("expected a symbolic expression inside sym(...)")
        return s.text[start:s.pos]

    # ---- arguments --------------------------------------------------------------------

    def call_arguments(self) -> tuple[tuple[Argument, ...], dict[str, Argument]]:
        """``(arg, ..., key=arg, ...)``: positional then keyword arguments."""
        s = self.s
        s.expect("(")
        args: list[Argument] = []
        kwargs: dict[str, Argument] = {}

        def item() -> None:
            start = s.pos
            key = self._keyword_name()
            if key is None:
                if kwargs:
                    raise s.error("a positional argument after a keyword argument", start)
                args.append(self.argument())
                return
            if key in kwargs:
                raise s.error(f"keyword argument {key!r} given twice", start)
            kwargs[key] = self.argument()

        self.items_until(")", item)
        return tuple(args), kwargs

    def _keyword_name(self) -> str | None:
        """``name=`` or ``"name"=`` if here (consumed), else None (nothing consumed)."""
        s = self.s
        start = s.pos
        key = s.string() if s.peek('"') else s.match(IDENT_RE)
        if key is not None:
            s.skip_spaces()
            if s.accept("="):
                s.skip_spaces()
                return key
        s.pos = start
        return None

    def argument(self) -> Argument:
        """One argument (see :mod:`ember.runtime.ir.printer` for the syntax)."""
        s = self.s
        start = s.pos
        c = s.next_char()
        if c == "%":
            name = self.percent_name()
            if s.accept("."):
                token = s.match(_INDEX_RE)
                if token is None:
                    raise s.error("expected a result index after '.'")
                return ValueRef(name, int(token))
            return ValueRef(name)
        if c == '"':
            return s.string()
        if c == "[":
            s.accept("[")
            return tuple(self.items_until("]", self.argument))
        if s.accept("-inf"):
            return -math.inf
        number = s.match(_NUMBER_RE)
        if number is not None:
            is_float = any(ch in number for ch in ".eE")
            return float(number) if is_float else int(number)
        word = s.match(_WORD_RE)
        if word is None:
            raise s.error("expected an argument")
        if word in _WORD_CONSTANTS:
            return _WORD_CONSTANTS[word]
        if word in _NAMED_FLOATS:
            return _NAMED_FLOATS[word]
        if word in _TORCH_CONSTANTS:
            return _TORCH_CONSTANTS[word]
        if word == "complex" and s.accept("("):
            real = self.floating()
            s.expect(",")
            s.skip_spaces()
            imag = self.floating()
            s.expect(")")
            return complex(real, imag)
        if word == "sym" and s.accept("("):
            expr = self._sym_argument()
            s.expect(")", "closing sym(...)")
            return SymExpr(expr)
        if word == "device" and s.accept("("):
            device = self.lookup(torch_names.device_from_name, s.string(), start)
            s.expect(")")
            return device
        raise s.error(f"unknown argument {word!r}", start)
