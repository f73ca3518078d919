"""A character cursor over IR text, for the parser: matches tokens in place and makes
errors that name the line and column."""

from __future__ import annotations

import json
import re

from ember.runtime.ir.errors import IRFormatError

_STRING_RE = re.compile(r'"(?:[^"\\\n]|\\.)*"')


class Scanner:
    """A position in ``text``. Methods that match advance past what they match; spaces
    and tabs are skipped explicitly, newlines end statements."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self._counted_pos, self._counted_lines = 0, 1

    # ---- errors -----------------------------------------------------------------------

    def error(self, message: str, pos: int | None = None) -> IRFormatError:
        """An IRFormatError for ``message`` at ``pos`` (default: here), naming the line,
        the column and quoting the line."""
        at = self.pos if pos is None else pos
        line_no = self.text.count("\n", 0, at) + 1
        start = self.text.rfind("\n", 0, at) + 1
        end = self.text.find("\n", at)
        line = self.text[start:end if end >= 0 else len(self.text)]
        return IRFormatError(f"line {line_no}, column {at - start + 1}: {message}\n"
                             f"    {line}")

    def line_number(self) -> int:
        """The 1-based line of the current position (counted on from the last call, so
        that asking at every node of a long text stays linear)."""
        if self.pos < self._counted_pos:
            self._counted_pos, self._counted_lines = 0, 1
        self._counted_lines += self.text.count("\n", self._counted_pos, self.pos)
        self._counted_pos = self.pos
        return self._counted_lines

    # ---- looking ----------------------------------------------------------------------

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def peek(self, s: str) -> bool:
        return self.text.startswith(s, self.pos)

    def next_char(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def skip_spaces(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1

    def skip_space_and_newlines(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t\r\n":
            self.pos += 1

    # ---- consuming --------------------------------------------------------------------

    def accept(self, s: str) -> bool:
        """Consume ``s`` if the text continues with it."""
        if self.peek(s):
            self.pos += len(s)
            return True
        return False

    def expect(self, s: str, context: str = "") -> None:
        if not self.accept(s):
            found = self.text[self.pos:self.pos + 12].split("\n")[0] or "end of line"
            where = f" {context}" if context else ""
            raise self.error(f"expected {s!r}{where}, found {found!r}")

    def match(self, pattern: re.Pattern[str]) -> str | None:
        """Consume and return the longest match of ``pattern`` here, or None."""
        m = pattern.match(self.text, self.pos)
        if m is None or m.end() == self.pos:
            return None
        self.pos = m.end()
        return m.group(0)

    def keyword(self, word: str) -> bool:
        """Consume ``word`` if it is here as a whole word."""
        end = self.pos + len(word)
        if self.text.startswith(word, self.pos) and not (
            end < len(self.text) and (self.text[end].isalnum() or self.text[end] in "_.")
        ):
            self.pos = end
            return True
        return False

    def string(self) -> str:
        """A JSON string literal."""
        start = self.pos
        token = self.match(_STRING_RE)
        if token is None:
            raise self.error("expected a string literal \"...\"")
        try:
            value = json.loads(token)
        except json.JSONDecodeError as e:
            raise self.error(f"bad string literal: {e.msg}", start) from None
        assert isinstance(value, str)
        return value

    def name(self, bare: re.Pattern[str], what: str) -> str:
        """A name: bare (matching ``bare``) or a string literal."""
        if self.peek('"'):
            return self.string()
        token = self.match(bare)
        if token is None:
            raise self.error(f"expected {what}")
        return token

    def rest_of_line(self) -> str:
        end = self.text.find("\n", self.pos)
        end = len(self.text) if end < 0 else end
        text = self.text[self.pos:end]
        self.pos = end
        return text

    def end_of_line(self, allow_comment: bool = True) -> None:
        """Consume trailing spaces, an optional ``# comment`` and the newline."""
        self.skip_spaces()
        if allow_comment and self.peek("#"):
            self.rest_of_line()
        if self.at_end():
            return
        if self.accept("\r\n") or self.accept("\n"):
            return
        raise self.error(f"unexpected {self.text[self.pos:self.pos + 20].split(chr(10))[0]!r}"
                         " (expected the end of the line)")
