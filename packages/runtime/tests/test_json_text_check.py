"""``check_json_text``: the nesting and number limits, checked on the bytes before JSON
is parsed, only outside string literals (escapes included)."""

from __future__ import annotations

import itertools
import json
import random
import re

import pytest
from ember.runtime.ir import IRFormatError
from ember.runtime.ir.json_codec import check_json_text, parse_json
from ember.runtime.ir.limits import MAX_NUMBER_DIGITS, LoadLimits

LIMITS = LoadLimits(max_json_depth=4)


def _reference(text: str, limits: LoadLimits) -> str | None:
    """What is wrong with ``text``, found the plain way: regular expressions over the
    text with its string literals blanked."""
    outside = re.sub(r'"[^"\\]*(?:\\.[^"\\]*)*"', '""', text)
    long_number = re.search(f"[0-9]{{{MAX_NUMBER_DIGITS + 1},}}", outside)
    if long_number is not None:
        return "digits"
    steps = [1 if c in "[{" else -1 for c in re.sub(r"[^\[\]{}]+", "", outside)]
    if max(itertools.accumulate(steps), default=0) > limits.max_json_depth:
        return "nested"
    return None


def _problem(text: str | bytes, limits: LoadLimits = LIMITS) -> str | None:
    try:
        check_json_text(text, "doc", limits)
    except IRFormatError as e:
        return "digits" if "digits" in str(e) else "nested"
    return None


@pytest.mark.parametrize("text, problem", [
    ('[[[["x"]]]]', None),
    ('[[[[["x"]]]]]', "nested"),
    ('{"a": {"b": {"c": {"d": 1}}}}', None),
    ('{"a": {"b": {"c": {"d": {}}}}}', "nested"),
    ('["[[[[[[[[[[", "{{{{{{{{"]', None),  # brackets in strings do not nest
    ('["]]]]]]", [[[[1]]]]]', "nested"),  # nor unnest
    ('["\\"[[[[[[[["]', None),  # an escaped quote does not end the string
    ('["\\\\", [[[[1]]]]]', "nested"),  # an escaped backslash does not escape the quote
    ('["\\\\\\"[[[[[["]', None),
    ('["\\u0022[[[[[["]', None),
    ('["é[[[[[[", "日本"]', None),
    ('["]", "[", "", "{", "a]"]', None),
    ('["[", "", "]", "x", [[[[1]]]]]', "nested"),
    ('{"a[": [{"b": "]]"}], "": {"": [[[["{"]]]]}}', "nested"),
    ('[[["é"], [[[1]]]]]', "nested"),
    ('["' + "1" * 60 + '"]', None),  # digits in a string are text
    ("[" + "1" * 60 + "]", "digits"),
    ("[" + "1" * MAX_NUMBER_DIGITS + "]", None),
    ('["a\\"", ' + "2" * 50 + "]", "digits"),
])
def test_nesting_and_numbers_outside_strings(text: str, problem: str | None) -> None:
    assert _reference(text, LIMITS) == problem
    assert _problem(text) == problem
    assert _problem(text.encode("utf-8")) == problem


def test_an_unterminated_string_is_a_syntax_error() -> None:
    # the brackets are inside the string, as the JSON reader sees them: it stops there
    assert _problem('"[[[[[[') is None
    with pytest.raises(IRFormatError, match="doc is not valid JSON: Unterminated string"):
        parse_json('"[[[[[[', "doc", LIMITS)


def test_errors_name_the_document_and_the_limit() -> None:
    with pytest.raises(IRFormatError, match=r"doc: JSON nested deeper than 4 levels "
                                            r"\(LoadLimits.max_json_depth\)"):
        check_json_text("[" * 5 + "]" * 5, "doc", LIMITS)
    with pytest.raises(IRFormatError, match="doc: a number of 45 digits is out of range"):
        check_json_text('{"a\\\\": ' + "7" * 45 + "}", "doc", LIMITS)
    with pytest.raises(IRFormatError, match="program.json: JSON nested deeper"):
        parse_json(b"[" * 200 + b"]" * 200, "program.json")


def _random_value(rng: random.Random, depth: int) -> object:
    kind = rng.randrange(6 if depth < 7 else 3)
    if kind == 0:
        return rng.randrange(-10**50, 10**50) if rng.random() < 0.1 else rng.randrange(99)
    if kind == 1:
        return _random_text(rng)
    if kind == 2:
        return rng.choice([None, True, 1.5])
    if kind in (3, 4):
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {_random_text(rng): _random_value(rng, depth + 1) for _ in range(rng.randrange(4))}


def _random_text(rng: random.Random) -> str:
    return "".join(rng.choice('ab[]{}"\\1é\n') for _ in range(rng.randrange(8)))


@pytest.mark.parametrize("seed", range(300))
def test_agrees_with_the_regular_expressions(seed: int) -> None:
    rng = random.Random(seed)
    text = json.dumps(_random_value(rng, 0), ensure_ascii=rng.random() < 0.5)
    limits = LoadLimits(max_json_depth=rng.randrange(1, 8))
    assert _problem(text, limits) == _reference(text, limits), text
    # spliced: mostly no JSON any more; what passes the check is read within the limits
    # (the two checks may differ past the reader's first syntax error, never before)
    cut = rng.randrange(len(text) + 1)
    spliced = text[:cut] + text[cut:][::-1]
    if _problem(spliced, limits) is None:
        try:
            json.loads(spliced)
        except json.JSONDecodeError:
            return
        assert _reference(spliced, limits) is None, spliced
