"""Lexical rules shared by the printer and the parser of the IR's text form: when a name
or a symbolic size may be written bare, and how it is quoted otherwise (as a JSON
string)."""

from __future__ import annotations

import json
import re

# %name: a node name written bare after '%'.
NODE_NAME_RE = re.compile(r"[A-Za-z0-9_]+")
# Qualified names: graphs, tensors, get_attr targets, spec targets, symbols.
QUALNAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.]*")
# Dialect names ("core-functional").
DIALECT_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
# Keyword argument names.
IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Operator names: ns::name.overload.
OP_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*::[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)?")
# A symbolic size written bare inside [...] or {...}; after 'offset=' without parens,
# since the offset may be followed by the ')' closing a tuple of metas.
SYM_SIZE_RE = re.compile(r"[A-Za-z0-9_*+\-/().%]+")
SYM_OFFSET_RE = re.compile(r"[A-Za-z0-9_*+\-/.%]+")
INT_RE = re.compile(r"-?[0-9]+")
# A guard written bare after 'guard' (up to a '#' comment): the characters of relations.
GUARD_RE = re.compile(r"[A-Za-z0-9_*+\-/%()<>=!,]+(?: +[A-Za-z0-9_*+\-/%()<>=!,]+)*")
# A symbolic argument written bare inside sym(...): a size without a closing parenthesis
# of its own unless it opened it (checked by the reader).
SYM_ARG_CHARS = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_*+-/%()."
)
# A source file written bare: no whitespace, no quote, ends in :LINE.
BARE_FILE_RE = re.compile(r"[^\s\"#][^\s\"]*")
FUNCTION_RE = re.compile(r"[A-Za-z_<][A-Za-z0-9_<>.]*")

OPCODE_KEYWORDS = ("placeholder", "constant", "get_attr", "output")


def quote(s: str) -> str:
    """``s`` as a JSON string literal (the text form's only string syntax)."""
    return printable_json(s)


def printable_json(value: object) -> str:
    """``value`` as one line of JSON: readable non-ASCII letters stay as they are, while
    characters that do not print (line separators, non-breaking spaces, lone
    surrogates) are escaped so that what one reads is what is there."""
    text = json.dumps(value, ensure_ascii=False)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _escape(c: str) -> str:
    code = ord(c)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def name_text(s: str, bare: re.Pattern[str]) -> str:
    """``s`` bare when it matches ``bare``, else quoted."""
    return s if bare.fullmatch(s) else quote(s)


def symint_text(s: int | str, bare: re.Pattern[str] = SYM_SIZE_RE) -> str:
    """A size, stride or offset: an int, a bare symbolic expression (``s0*2``), or a
    quoted one when it holds characters a bare one cannot (``"Max(1, s0)"``)."""
    if isinstance(s, int):
        return str(s)
    if bare.fullmatch(s) and not INT_RE.fullmatch(s):
        return s
    return quote(s)
