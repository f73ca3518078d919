"""The capture cache: a fresh process's first call of a compiled function, answered
without capturing (issue 17; ``docs/caching.md``, "The capture cache").

After a strict capture of a whole call (resume point 0, no graph break) whose compiled
program the program cache (:mod:`ember.runtime.cache`) stored, an entry is written to
``<EMBER_CACHE_DIR>/captures/`` (JSON, framed and stored under the program cache's
rules: private directory, atomic writes, SHA-256, no pickle). Its key
(:func:`capture_key`) is the compiled function's code fingerprint, the module's class,
the compile's backend, mode, options, ``fullgraph``/``dynamic``, the versions of Ember's
packages, torch, Triton and Python, torch's numerics settings and the GPUs. It holds:

- ``guards``: the capture's guards in portable form (:mod:`.capture_cache_codec`);
- ``inlined``: the fingerprint of every function the capture inlined, with the name it
  is importable under; ``files``: the SHA-256 of the source files of the compiled
  function and of every inlined one (so defaults, decorator arguments and class
  attributes written in them are covered); ``globals``: globals of inlined functions
  read without a source;
- ``inputs``: the graph inputs' sources; ``returns``: how the result is rebuilt;
  ``inference_outputs``, ``asserts``: the results made as inference tensors, the user's
  asserts over data-dependent sizes (their messages);
- ``program``: the program cache's key of the compiled program.

A later process's first call looks the entry up; every inlined function's code must
still match, every global still hold its value, every guard pass on the live arguments;
the compiled program is then loaded from the program cache and run: no capture, no
fake tensors, no aot or inductor. Anything else is a miss, and the call is captured as
usual (and stored again). ``EMBER_LOGS=cache`` says every hit, miss (and why) and every
capture not stored (and why). The cache is on when the program cache is
(``EMBER_CACHE``, ``EMBER_PROGRAM_CACHE``); ``EMBER_CAPTURE_CACHE=0`` turns it off alone.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import types
from collections.abc import Callable
from typing import Any

import torch
from ember.frontend.bytecode.assert_messages import SymbolicAssert
from ember.frontend.bytecode.frame import FrameState
from ember.frontend.bytecode.guards import GuardSet
from ember.frontend.bytecode.segment_run import FunctionContext, Segment
from ember.frontend.capture_cache_codec import (
    Unportable,
    code_fingerprint,
    decode_guard,
    decode_recipe,
    decode_replay,
    decode_source,
    decode_value,
    encode_guard,
    encode_recipe,
    encode_replay,
    encode_source,
    encode_value,
    reading_sources,
    resolve_name,
    writing_sources,
)
from ember.frontend.capture_modes import CompileRequest
from ember.frontend.function_ops import NAMESPACE as FUNCTION_NAMESPACE
from ember.runtime.cache.entry import EntryError, frame, unframe
from ember.runtime.cache.local import LocalProgramCache
from ember.runtime.config import config
from ember.runtime.ir import SourceLocation
from ember.runtime.ir.gc_pause import collector_paused
from ember.runtime.logs import log

__all__ = ["CaptureCache", "capture_cache_enabled", "capture_key"]

MAGIC = b"ember-capture-cache\n"
SUBDIR = "captures"
# 3: tensor guards expect the exact type; 4: inference mode guarded; 5: a source table
CAPTURE_FORMAT = "5"
MAX_ENTRIES = 8
"""Entries kept under one key (one compiled function and its settings): models behind
one wrapper class share the key, each its own entry (the newest first; a store beyond
this drops the oldest)."""


class _EntryMiss(Exception):
    """One entry of a key does not answer this call (the message says why); ``stale``:
    it never will again in this process (its code or files changed, it cannot be read),
    so the next store drops it."""

    def __init__(self, why: str, stale: bool = False) -> None:
        super().__init__(why)
        self.stale = stale


class _Stale(Unportable):
    """The code or a source file an entry was captured from has changed."""


def _entry_id(entry: dict[str, Any]) -> str:
    """What tells two entries apart: their guards, inputs and program."""
    return json.dumps([entry.get("guards"), entry.get("inputs"), entry.get("program")],
                      sort_keys=True)


def _nth(i: int, n: int) -> str:
    return "" if n == 1 else f", entry {i + 1} of {n}"


def capture_cache_enabled() -> bool:
    """On with the program cache, unless ``EMBER_CAPTURE_CACHE=0``."""
    return config.cache_enabled and config.program_cache and config.capture_cache


def capture_key(request: CompileRequest, fn: types.FunctionType) -> str:
    """The entry key of compiling ``fn`` (the function or ``forward`` being compiled)
    as ``request`` asks.

    Raises:
        Unportable: options without a JSON form.
    """
    try:
        options = json.dumps(request.options, sort_keys=True)
    except (TypeError, ValueError):
        raise Unportable("options without a JSON form") from None
    module = request.module
    parts = {
        "format": CAPTURE_FORMAT,
        "function": f"{fn.__module__}.{fn.__qualname__} {code_fingerprint(fn.__code__)}",
        "class": "" if module is None else f"{type(module).__module__}."
                                            f"{type(module).__qualname__}",
        "backend": request.backend,
        "mode": str(request.mode),
        "fullgraph": str(request.fullgraph),
        "dynamic": str(request.dynamic),
        "options": options,
        "versions": _versions(request.backend),
        "torch": f"{torch.__version__} cuda {torch.version.cuda}",
        "python": sys.version,
        "settings": _settings(),
        "devices": _devices(),
    }
    h = hashlib.sha256()
    for name, text in parts.items():
        h.update(f"{name}={text}\n".encode())
    return h.hexdigest()


def _versions(backend: str) -> str:
    from ember.runtime.cache.key import distribution_stamp, installed_version
    from ember.runtime.pipeline import BACKENDS
    from ember.runtime.stages import available_stages

    # NOTE: stamps (path, size, mtime of each source), not source digests: reading every
    # source of a checkout costs more than the rest of a cached first call
    found = [distribution_stamp("ember-runtime", "ember.runtime"),
             distribution_stamp("ember-frontend", "ember.frontend"),
             f"triton {installed_version('triton')}"]
    for name in BACKENDS[backend]:
        entry = available_stages().get(name)  # NOTE: read from metadata, not imported
        if entry is None or entry.dist is None:
            found.append(f"{name} missing")
        else:
            found.append(distribution_stamp(entry.dist.name,
                                            entry.module.rpartition(".")[0]))
    return "\n".join(found)


def _settings() -> str:
    from ember.runtime.cache.key import NUMERICS_SETTINGS

    return "\n".join(f"{name}={read()}" for name, read in NUMERICS_SETTINGS.items())


def _devices() -> str:
    if not torch.cuda.is_available():
        return "cpu"
    return "\n".join(f"{torch.cuda.get_device_name(i)} {torch.cuda.get_device_capability(i)}"
                     for i in range(torch.cuda.device_count()))


class CaptureCache:
    """The capture cache of one compiled function (``fn``, compiled as ``request``
    asks); ``name`` is how logs call it."""

    def __init__(self, request: CompileRequest, fn: types.FunctionType, name: str) -> None:
        self.request, self.fn, self.name = request, fn, name
        self._key: str | None = None
        self._stale: set[str] = set()  # entries the last lookup found out of date

    @property
    def key(self) -> str:
        """The entry key (:func:`capture_key`, computed once).

        Raises:
            Unportable: options without a JSON form.
        """
        if self._key is None:
            self._key = capture_key(self.request, self.fn)
        return self._key

    def _local(self) -> LocalProgramCache:
        return LocalProgramCache(config.cache_dir, SUBDIR)

    # ---- lookup ------------------------------------------------------------------------

    def lookup(self, state: FrameState, ctx: FunctionContext,
               load_program: Callable[[str], Any]) -> tuple[Segment, list[Any]] | None:
        """The segment stored for this function and its graph inputs, when every check
        of one of the key's entries (newest first) passes on ``state`` (the first call's
        arguments), with its runner from ``load_program(digest)`` (None when the program
        cache lacks it); else None (a miss, logged with each entry's reason). Python's
        garbage collector is paused meanwhile (``ember.runtime.ir.gc_pause``)."""
        with collector_paused():
            return self._lookup(state, ctx, load_program)

    def _lookup(self, state: FrameState, ctx: FunctionContext,
                load_program: Callable[[str], Any]) -> tuple[Segment, list[Any]] | None:
        self._stale = set()
        try:
            key = self.key
        except Unportable as e:
            log("cache", f"capture cache not used for {self.name}: {e}")
            return None
        entries = self._entries(key, remove_bad=True)
        if not entries:
            self._miss("no entry", key)
            return None
        reasons: list[str] = []
        for i, entry in enumerate(entries):
            try:
                found = self._try_entry(entry, state, ctx, load_program)
            except _EntryMiss as e:
                if e.stale:
                    self._stale.add(_entry_id(entry))
                reasons.append(str(e) if len(entries) == 1 else f"entry {i + 1}: {e}")
                continue
            seg, inputs = found
            log("cache", f"capture cache hit {key[:16]} for {self.name} "
                         f"({len(seg.guards)} guards, {len(entry['inlined'])} inlined "
                         f"functions{_nth(i, len(entries))})")
            return found
        self._miss("; ".join(reasons), key)
        return None

    def _entries(self, key: str, remove_bad: bool) -> list[dict[str, Any]]:
        """The entries stored under ``key``, newest first ([] when there are none; an
        unreadable file is removed when ``remove_bad``, logged)."""
        local = self._local()
        try:
            data = local.read(key)
            if data is None:
                return []
            _, payload = unframe(data, MAGIC, key)
            stored = json.loads(payload.decode("utf-8"))
            entries = stored["entries"]
            if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
                raise ValueError("'entries' is not a list of objects")  # noqa: TRY301
        except (EntryError, ValueError, KeyError, TypeError) as e:
            if remove_bad:
                log("cache", f"capture cache entry {key[:16]} of {self.name} is unusable "
                             f"({e}); removed")
                local.remove(key)
            return []
        return entries

    def _try_entry(self, entry: dict[str, Any], state: FrameState, ctx: FunctionContext,
                   load_program: Callable[[str], Any]) -> tuple[Segment, list[Any]]:
        """The segment of ``entry`` with its inputs and runner.

        Raises:
            _EntryMiss: a check failed (or the entry cannot be read), naming it.
        """
        try:
            seg = self._segment(entry, state, ctx)
        except _Stale as e:
            raise _EntryMiss(str(e), stale=True) from None
        except Unportable as e:
            raise _EntryMiss(str(e)) from None
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise _EntryMiss(f"unreadable entry ({type(e).__name__}: {e})",
                             stale=True) from None
        # NOTE: the fast path is written at the second passing call, as in a process
        # that captured (its first call ran the capture, not the check)
        seg._matcher = seg.guards.matcher(seg.input_sources,  # noqa: SLF001
                                          "the segment at resume point 0", learn_after=2)
        inputs = seg.match(state, ctx)
        if inputs is None:
            raise _EntryMiss(f"guard failed: {seg.guards.first_failure(state, ctx)}")
        runner = load_program(str(entry["program"]))
        if runner is None:
            raise _EntryMiss(f"the program cache has no entry {str(entry['program'])[:16]}",
                             stale=True)
        seg.runner = runner
        return seg, inputs

    def _miss(self, why: str, key: str) -> None:
        log("cache", f"capture cache miss {key[:16]} for {self.name}: {why}")

    def _segment(self, entry: dict[str, Any], state: FrameState,
                 ctx: FunctionContext) -> Segment:
        with reading_sources(entry["sources"]):
            return self._decoded_segment(entry, state, ctx)

    def _decoded_segment(self, entry: dict[str, Any], state: FrameState,
                         ctx: FunctionContext) -> Segment:
        for names, qualname, fingerprint in entry["inlined"]:
            if not _code_matches(names, qualname, fingerprint):
                raise _Stale(f"the code of {names[0][0]}.{qualname} changed")
        for module, name, expected in entry["globals"]:
            _check_global(module, name, None if expected is None else decode_value(expected))
        for path, digest in entry["files"]:
            if _file_digest(path) != digest:
                raise _Stale(f"the source file {path} changed")

        def live(source: Any) -> Any:
            try:
                return source.fetch(state, ctx)
            except Exception as e:  # noqa: BLE001 - any failed read is a miss, named
                raise Unportable(f"{source.expr()} cannot be read ({e})") from None

        guards = GuardSet()
        for data in entry["guards"]:
            guards.add(decode_guard(data, live))
        return Segment(
            start_ip=0, guards=guards,
            input_sources=[decode_source(s) for s in entry["inputs"]],
            program=None, runner=None,
            replays=[decode_replay(r) for r in entry["replays"]],
            grad_at_end=bool(entry["grad_at_end"]), graph_grad=bool(entry["graph_grad"]),
            inference_outputs=tuple(int(i) for i in entry["inference_outputs"]),
            asserts=tuple(SymbolicAssert(relation, message, SourceLocation(*where))
                          for relation, message, where in entry["asserts"]),
            returns=decode_recipe(entry["returns"]))

    # ---- store -------------------------------------------------------------------------

    def store(self, seg: Segment, program_digest: str | None) -> None:
        """Write the entry of ``seg`` (a whole call's capture); logs why not when it
        cannot be stored."""
        why = _unstorable(seg, program_digest)
        payload: dict[str, Any] | None = None
        if why is None:
            try:
                payload = self._payload(seg, str(program_digest))
                key = self.key
            except Unportable as e:
                why = str(e)
        if why is not None or payload is None:
            log("cache", f"capture of {self.name} not stored in the capture cache: {why}")
            return
        entries = [payload] + [e for e in self._entries(key, remove_bad=False)
                               if _entry_id(e) != _entry_id(payload)
                               and _entry_id(e) not in self._stale][:MAX_ENTRIES - 1]
        data = frame(MAGIC, key, json.dumps({"entries": entries}, sort_keys=True).encode())
        try:
            self._local().write(key, data)
        except OSError as e:
            log("cache", f"capture cache entry {key[:16]} of {self.name} not written ({e})")
            return
        log("cache", f"capture cache store {key[:16]} for {self.name} ({len(data)} bytes, "
                     f"{len(seg.guards)} guards, entry 1 of {len(entries)})")

    def _payload(self, seg: Segment, program_digest: str) -> dict[str, Any]:
        with writing_sources() as table:
            payload = self._payload_fields(seg, program_digest)
        payload["sources"] = table.rows
        return payload

    def _payload_fields(self, seg: Segment, program_digest: str) -> dict[str, Any]:
        assert seg.facts is not None and seg.returns is not None
        inlined = []
        for fn in seg.facts.inlined:
            code = fn.__code__
            qualname = getattr(code, "co_qualname", fn.__qualname__)
            # NOTE: the module whose globals the function runs in (where its code is
            # defined), not __module__, which code may rewrite
            module = str(fn.__globals__.get("__name__", fn.__module__))
            # a generated function (a dataclass's __init__) is found through the name
            # it was given (``Output.__init__``), its code through the function
            names = [[module, qualname], [str(fn.__module__), str(fn.__qualname__)]]
            fingerprint = code_fingerprint(code)
            if not _code_matches(names, qualname, fingerprint):
                raise Unportable(f"the inlined function {module}.{qualname} is not "
                                 "importable under its name")
            inlined.append([names, qualname, fingerprint])
        globals_: list[list[Any]] = []
        named: dict[int, tuple[str, str]] = {}
        for module, name, value in seg.facts.untracked_globals:
            try:
                globals_.append([module, name, encode_value(value)])
            except Unportable:
                # NOTE: an object that is no plain value (a registry, a context holder):
                # the capture read it without a guard; the loading process uses the
                # object its module holds under that name, as its own capture would
                globals_.append([module, name, None])
                named.setdefault(id(value), (module, name))
        # NOTE: code not from a file ("<frozen ...>": the standard library, covered by
        # the Python version in the key; "<string>": generated, checked by fingerprint)
        files = sorted(f for f in {fn.__code__.co_filename for fn in seg.facts.inlined}
                       | {self.fn.__code__.co_filename} if not f.startswith("<"))
        return {
            "files": [[path, _file_digest(path)] for path in files],
            "function": self.name,
            "program": program_digest,
            "inlined": inlined,
            "globals": globals_,
            "guards": [encode_guard(g) for g in seg.guards.guards],
            "inputs": [encode_source(s) for s in seg.input_sources],
            "returns": encode_recipe(seg.returns),
            "replays": [encode_replay(r, named) for r in seg.replays],
            "grad_at_end": seg.grad_at_end,
            "graph_grad": seg.graph_grad,
            "inference_outputs": list(seg.inference_outputs),
            "asserts": [[a.relation, a.message, [a.location.file, a.location.line,
                                                 a.location.function, a.location.text]]
                        for a in seg.asserts],
        }


def _unstorable(seg: Segment, program_digest: str | None) -> str | None:
    """Why ``seg`` cannot be stored, or None."""
    if seg.start_ip != 0 or seg.returns is None:
        return "the call has a graph break"
    if seg.facts is None:
        return "no capture facts"
    if seg.runner is None:
        return "the call has no graph"
    if seg.autocast_end is not None:
        return "the call leaves autocast's state changed"
    if program_digest is None:
        return "the program cache did not store the compiled program"
    if seg.program is not None and any(
            node.target.startswith(f"{FUNCTION_NAMESPACE}::")
            for graph in seg.program.graphs.values() for node in graph.nodes):
        return ("the program calls a custom autograd.Function's operator, which exists "
                "once a capture registered it (function_ops.py)")
    from ember.runtime.cache.key import placeholder_tensors

    if seg.program is not None and placeholder_tensors(seg.program) & set(seg.program.tensors):
        return "the program carries tensors its program cache entry leaves out"
    return None


def _code_matches(names: list[list[str]], qualname: str, fingerprint: str) -> bool:
    """Whether a code object named ``qualname`` with ``fingerprint`` is reachable from
    what one of ``names`` (``[module, qualified name]``; the name's part before
    ``.<locals>``) is, through ``__wrapped__`` chains, methods, properties and nested
    code."""
    for module, name in names:
        try:
            obj = resolve_name(module, name.split(".<locals>.")[0])
        except Unportable:
            continue
        if any(getattr(code, "co_qualname", None) == qualname
               and code_fingerprint(code) == fingerprint for code in _codes_of(obj)):
            return True
    return False


def _codes_of(obj: Any) -> list[types.CodeType]:
    found: list[types.CodeType] = []
    seen: set[int] = set()
    pending = [obj]
    while pending:
        item = pending.pop()
        if id(item) in seen or item is None:
            continue
        seen.add(id(item))
        if isinstance(item, types.CodeType):
            found.append(item)
            pending.extend(c for c in item.co_consts if isinstance(c, types.CodeType))
        elif isinstance(item, types.FunctionType):
            pending.extend([item.__code__, getattr(item, "__wrapped__", None)])
        elif isinstance(item, (types.MethodType, staticmethod, classmethod)):
            pending.append(item.__func__)
        elif isinstance(item, property):
            pending.extend([item.fget, item.fset, item.fdel])
        elif hasattr(item, "__wrapped__"):
            pending.append(item.__wrapped__)
    return found


def _file_digest(path: str) -> str:
    """The SHA-256 of source file ``path``.

    Raises:
        Unportable: the file cannot be read (code not from a file).
    """
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError as e:
        raise Unportable(f"the source file {path} cannot be read ({e})") from None


def _check_global(module: str, name: str, expected: Any) -> None:
    """``module.name`` exists and, unless ``expected`` is None (an object bound by
    name), holds ``expected`` (equal plain value, or the same importable object).

    Raises:
        Unportable: naming the global that changed or disappeared.
    """
    value = resolve_name(module, name)
    if expected is None:
        return
    if isinstance(expected, (bool, int, float, str, tuple, type(None))):
        same = type(value) is type(expected) and (value == expected or (
            isinstance(value, float) and isinstance(expected, float)
            and math.isnan(value) and math.isnan(expected)))
    else:
        same = value is expected
    if not same:
        raise Unportable(f"the global {module}.{name} changed")
