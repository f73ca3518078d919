"""The guards' fast path: a check function that skips the guards on a model's own state
while their stamp holds (:mod:`ember.frontend.guard_stamp`).

A cache entry with many guards whose source starts at a root read every call (``self``)
gets :func:`stamped_matcher`: its first passing call runs the full check, then finds, on
the objects it read, which guards are stamp-safe, and writes the check function again
with, per root::

    v0 = S.locals[name3]  # 'self'
    # stamp of 'self': 812 guards (equals 290, type 190, ...) skipped while it holds
    if stamp5.holds(v0):
        s0 = False
        v7, v12 = stamp5.keep        # the locals later checks and the inputs read
    else:
        s0 = True
        ...                          # the full check of those guards, as before
    ...                              # every other guard, every call
    if s0:                           # a distinct-tensors guard over stamped sources:
        if not (len({id(v7), id(v12), id(v90)}) == 3): return None   # in full, or
    elif not (stamp5.ids.isdisjoint((id(v90),))): return None  # the others alone
    if s0: stamp5.record(S, C, v0, (v1, v2, ...))   # all passed: take the stamp

``EMBER_LOGS=guards`` shows this function once written. The fast path is off (logged
once) where torch's dict version reader is missing or does not work on this Python.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ember.frontend._torch import dict_version_reader
from ember.frontend.guard_batch import MIN_BATCHED
from ember.frontend.guard_model import GUARD_KINDS, Guard, Source
from ember.frontend.guard_stamp import SECOND_SOURCES, NeedsFinder, Stamp, chain_of
from ember.frontend.guard_writer import Matcher, MatcherWriter, matcher_text
from ember.runtime.logs import log

__all__ = ["FAST_PATH_MIN_GUARDS", "stamped_matcher"]

FAST_PATH_MIN_GUARDS = 64
"""A check function gets the fast path from this many guards that a stamp may cover
(below it, the stamp costs about what it saves)."""

_warned: list[bool] = []


def _candidates(guards: Sequence[Guard]) -> dict[Source, list[Guard]]:
    """Guards whose source is a chain of steps a stamp may cover, by root."""
    groups: dict[Source, list[Guard]] = {}
    for g in guards:
        chain = chain_of(g.source) if g.source is not None else None
        if chain is not None:
            groups.setdefault(chain[0], []).append(g)
    return groups


def stamped_matcher(guards: Sequence[Guard], inputs: Sequence[Source], plain: Matcher,
                    title: str | None, learn_after: int = 1) -> Matcher:
    """``plain`` (the full check of ``guards``), with the fast path written at the
    ``learn_after``-th passing call (a capture-cache hit passes 2: its first call is a
    process's first, checked in full, as a call that captured is, and not worth the
    writing unless the function is called again); ``plain`` itself when too few guards
    could be stamped or dict versions are not available. The returned function's
    ``__ember_stamps__`` lists its stamps."""
    groups = _candidates(guards)
    if sum(len(gs) for gs in groups.values()) < FAST_PATH_MIN_GUARDS:
        return plain
    if dict_version_reader() is None:
        if not _warned:
            _warned.append(True)
            log("guards", "guard fast path off: torch's dict_version reader is missing or "
                          "does not see dict writes on this Python; every guard is checked "
                          "every call")
        return plain
    box: list[Matcher] = []
    stamps: list[Stamp] = []
    passed = [0]

    def learn(state: Any, ctx: Any) -> list[Any] | None:
        result = plain(state, ctx)
        if result is None:
            return None
        passed[0] += 1
        if passed[0] < learn_after:
            return result
        try:
            fast, src = _write_fast(guards, inputs, groups, state, ctx, stamps)
        except Exception as e:  # noqa: BLE001 - the full check stays correct without it
            log("guards", f"guard fast path off for {title or 'a check function'}: "
                          f"writing it raised {type(e).__name__}: {e}")
            fast, src = plain, matcher_text(plain)
        box[0] = fast
        match.__ember_source__ = src  # type: ignore[attr-defined]
        if title is not None and fast is not plain:
            log("guards", lambda: f"check function of {title} with the fast path "
                                  f"({len(guards)} guards):\n{src}")
        return result

    box.append(learn)

    def match(state: Any, ctx: Any) -> list[Any] | None:
        return box[0](state, ctx)

    match.__ember_source__ = matcher_text(plain)  # type: ignore[attr-defined]
    match.__ember_stamps__ = stamps  # type: ignore[attr-defined]
    return match


def _safe_guards(groups: dict[Source, list[Guard]], state: Any,
                 ctx: Any) -> dict[Source, list[Guard]]:
    """Per root, the guards stamp-safe on the objects of this (passing) call. A root
    that is a fresh container each call (``args``, ``kwargs``) gets none."""
    values: dict[Source, Any] = {}

    def value_of(source: Source) -> Any:
        if source not in values:
            values[source] = source.fetch(state, ctx)
        return values[source]

    safe: dict[Source, list[Guard]] = {}
    finder = NeedsFinder(value_of)  # only which guards: its needs are not kept
    for root, gs in groups.items():
        if type(value_of(root)) in (dict, list, tuple):
            continue
        found = [g for g in gs if finder.add(g)]
        if found:
            safe[root] = found
    return safe


_NAME = re.compile(r"\b[vs]\d+\b")


def _write_fast(guards: Sequence[Guard], inputs: Sequence[Source],
                groups: dict[Source, list[Guard]], state: Any, ctx: Any,
                stamps: list[Stamp]) -> tuple[Matcher, str]:
    safe = _safe_guards(groups, state, ctx)
    w = MatcherWriter()  # NOTE: a stamp's own tensors are checked by the stamp
    blocks: list[tuple[Source, str, list[str], list[tuple[Source, str]], Stamp, str]] = []
    skipped: set[int] = set()
    fixed: dict[Source, tuple[int, int]] = {}  # read the same object while stamp i holds
    for root, gs in safe.items():
        r = w.ref(root)
        known = set(w.local_names())
        outer = w.lines
        w.lines = []
        for g in gs:
            w.guard(g)
            skipped.add(id(g))
        body = w.lines
        w.lines = outer
        created = [(s, n) for s, n in w.local_items() if n not in known]
        index = {s: k for k, (s, _) in enumerate(created)}
        for g in gs:
            for s in (g.source, *([g.expected] if g.kind in SECOND_SOURCES else [])):
                if s in index:
                    fixed.setdefault(s, (len(blocks), index[s]))
        stamp = Stamp(root, gs, [s for s, _ in created])
        w.lines.append(f"#STAMP{len(blocks)}")
        blocks.append((root, r, body, created, stamp, w.const("stamp", stamp)))
    w.batch_tensors = sum(g.kind == "tensor" and id(g) not in skipped
                          for g in guards) >= MIN_BATCHED
    for g in guards:
        if id(g) in skipped:
            continue
        if g.kind == "distinct" and any(s in fixed for s in g.expected):
            _distinct_beside_stamps(w, g, fixed, [(b[4], b[5]) for b in blocks])
        else:
            w.guard(g)
    w.check_batch()
    result = "[" + ", ".join(w.ref(s) for s in inputs) + "]"
    lines, records = list(w.lines), []
    for i, (root, r, body, created, stamp, k) in enumerate(blocks):
        at = lines.index(f"#STAMP{i}")
        later = set(_NAME.findall("\n".join(lines[at + 1:]) + result))
        stamp.kept = [j for j, (_, n) in enumerate(created) if n in later]
        stamps.append(stamp)
        flag = f"s{i}"
        unpack = ", ".join(created[j][1] for j in stamp.kept)
        fast = [f"{flag} = False"] + ([f"{unpack}, = {k}.keep"] if stamp.kept else [])
        lines[at:at + 1] = (
            [f"# {stamp.describe()}", f"if {k}.holds({r}):"]
            + [f"    {line}" for line in fast] + ["else:", f"    {flag} = True"]
            + [f"    {line}" for line in body])
        names = ", ".join(n for _, n in created) + ("," if len(created) == 1 else "")
        records.append(f"if {flag}: {k}.record(S, C, {r}, ({names}))")
    return w.finish(lines + records, result)


def _distinct_beside_stamps(w: MatcherWriter, g: Guard, fixed: dict[Source, tuple[int, int]],
                            stamps: Sequence[tuple[Stamp, str]]) -> None:
    """A ``distinct`` guard some of whose sources a stamp covers (``fixed``: source ->
    (stamp, index among its sources); ``stamps``: each stamp and its constant's name):
    checked in full when a stamp did not hold; while they all hold, those sources read
    the objects of the call that took the stamps, distinct then (the full check passed),
    so only the others are checked, against each other and against the stamps' objects
    (``Stamp.ids``)."""
    full = GUARD_KINDS["distinct"].check(w, g)
    watched: dict[int, list[int]] = {}
    for source in g.expected:
        if source in fixed:
            i, k = fixed[source]
            watched.setdefault(i, []).append(k)
    for i, indexes in watched.items():
        stamps[i][0].watch(indexes)
    rest = [w.ref(s) for s in g.expected if s not in fixed]
    w.lines.append(f"if {' or '.join(f's{i}' for i in sorted(watched))}:")
    w.lines.append(f"    if not ({full}): return None")
    if rest:
        ids = "(" + ", ".join(f"id({n})" for n in rest) + ("," if len(rest) == 1 else "") + ")"
        checks = [f"{stamps[i][1]}.ids.isdisjoint({ids})" for i in sorted(watched)]
        if len(rest) > 1:
            checks.append(f"len(set({ids})) == {len(rest)}")
        w.lines.append(f"elif not ({' and '.join(checks)}): return None")
