"""One cache entry: a compiled program in bytes, without the caller's weights.

Layout (the same locally and in a remote cache)::

    ember-program-cache\\n
    {"format": "1", "key": KEY, "sha256": SHA, "inputs": [NAME, ...],
     "signature": HEX or null}\\n
    PAYLOAD

``PAYLOAD`` is the compiled program as a ``.ember`` file (:func:`ember.runtime.ir.save`:
JSON, safetensors and the kernel sources, with the manifest of SHA-256 digests; no
pickle). ``inputs`` names the tensors left out of it: those the program takes through
placeholders (its parameters, buffers and constant inputs, :func:`.key.placeholder_tensors`),
which no stage reads. A hit puts the *current* program's tensors back under those names,
so it never runs on the values of the process that stored the entry. ``signature`` is
the HMAC of a remote entry (:mod:`.signing`), ``null`` locally.

Decoding checks the magic line, the header, that the entry is for the key asked for,
the payload's digest and (remote) the signature, and the ``.ember`` file's own checks
(:func:`ember.runtime.ir.load`); any failure is an :class:`EntryError` naming it.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json

from ember.runtime.cache.key import placeholder_tensors
from ember.runtime.cache.signing import sign, signature_ok
from ember.runtime.ir import IRFormatError, Program, load, save

MAGIC = b"ember-program-cache\n"
ENTRY_FORMAT = "1"
_MAX_HEADER = 1 << 20


class EntryError(ValueError):
    """A cache entry cannot be used (corrupt, for another key, badly signed)."""


class NeedsProgram(EntryError):
    """A sound entry that left tensors out, decoded without the captured program that
    holds them (it is not corrupt: a compile with that program can use it)."""


def frame(magic: bytes, key: str, payload: bytes, **fields: object) -> bytes:
    """``magic``, a JSON header line (``format``, ``key``, the payload's ``sha256`` and
    ``fields``), then ``payload``: the framing every cache entry shares."""
    header = {"format": ENTRY_FORMAT, "key": key,
              "sha256": hashlib.sha256(payload).hexdigest(), **fields}
    return magic + json.dumps(header, sort_keys=True).encode("ascii") + b"\n" + payload


def unframe(data: bytes, magic: bytes, key: str) -> tuple[dict[str, object], bytes]:
    """The header and payload of an entry framed by :func:`frame`, checked: the magic
    line, the format, that it was stored for ``key``, the payload's SHA-256.

    Raises:
        EntryError: naming what is wrong.
    """
    if not data.startswith(magic):
        kind = magic.decode("ascii").strip().removeprefix("ember-").replace("-", " ")
        raise EntryError(f"not a {kind} entry (no magic line)")
    end = data.find(b"\n", len(magic), len(magic) + _MAX_HEADER)
    if end < 0:
        raise EntryError("the header line is missing or too long")
    try:
        header = json.loads(data[len(magic):end].decode("ascii"))
    except (UnicodeDecodeError, ValueError) as e:
        raise EntryError(f"unreadable header ({e})") from None
    if not isinstance(header, dict) or header.get("format") != ENTRY_FORMAT:
        raise EntryError(f"unknown entry format (expected {ENTRY_FORMAT})")
    if header.get("key") != key:
        raise EntryError("the entry was stored for another key")
    payload = data[end + 1:]
    if header.get("sha256") != hashlib.sha256(payload).hexdigest():
        raise EntryError("the payload does not match its SHA-256 (truncated or changed)")
    return header, payload


def encode(key: str, compiled: Program, source: Program, secret: bytes | None = None) -> bytes:
    """The entry for ``compiled``, compiled from ``source`` under ``key``; signed when
    ``secret`` is given.

    Raises:
        IRFormatError: ``compiled`` cannot be saved (a value the format cannot hold).
    """
    left_out = sorted(placeholder_tensors(source) & set(compiled.tensors))
    stored = copy.copy(compiled)
    stored.tensors = {n: t for n, t in compiled.tensors.items() if n not in left_out}
    buffer = io.BytesIO()
    save(stored, buffer)
    payload = buffer.getvalue()
    digest = hashlib.sha256(payload).hexdigest()
    return frame(MAGIC, key, payload, inputs=left_out,
                 signature=sign(secret, key, digest, left_out) if secret is not None else None)


def decode(data: bytes, key: str, source: Program | None,
           secret: bytes | None = None) -> Program:
    """The compiled program of entry ``data`` for ``key``, with ``source``'s placeholder
    tensors put back (see the module docstring). ``source`` None: the caller has no
    captured program (a capture cache hit); an entry that left tensors out is refused.

    Args:
        secret: check the entry's signature with this secret (remote entries).

    Raises:
        EntryError: naming what is wrong.
    """
    header, payload = unframe(data, MAGIC, key)
    inputs = header.get("inputs")
    if not isinstance(inputs, list) or not all(isinstance(n, str) for n in inputs):
        raise EntryError("the header's inputs are not a list of names")
    digest = hashlib.sha256(payload).hexdigest()
    if secret is not None and not signature_ok(secret, key, digest, inputs,
                                               header.get("signature")):
        raise EntryError("missing or bad signature (written without this "
                         "EMBER_REMOTE_CACHE_KEY, or changed since)")
    if source is None and inputs:
        raise NeedsProgram(f"the entry expects tensors {inputs} that only the captured "
                         "program holds")
    try:
        # NOTE: trusted: a local entry sits in a directory private to this user, a
        # remote one was signed with the user's secret (checked above).
        compiled = load(io.BytesIO(payload), trusted=True)
    except (IRFormatError, RuntimeError) as e:
        raise EntryError(f"the payload is no loadable program ({e})") from None
    if source is None:
        return compiled
    missing = [n for n in inputs if n not in source.tensors]
    if missing or not set(inputs) <= placeholder_tensors(source):
        raise EntryError(f"the entry expects tensors {missing or inputs} the program lacks")
    tensors = dict(compiled.tensors)
    tensors.update({n: source.tensors[n] for n in inputs})
    compiled.tensors = tensors
    return compiled
