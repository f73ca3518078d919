"""HMAC-SHA256 signatures of remote cache entries.

A remote cache is shared by many machines, and an entry is a compiled program (code
that runs), so every machine signs what it stores with a secret the user configures
(``EMBER_REMOTE_CACHE_KEY``) and checks the signature of what it loads: an entry that
someone without the secret wrote or changed is refused. The signature covers the cache
key, the SHA-256 of the payload and the names of the tensors left out of it
(:mod:`.entry`), so an entry cannot be moved to another key either.
"""

from __future__ import annotations

import hashlib
import hmac

MIN_SECRET_BYTES = 16
"""The shortest secret accepted (a short one can be guessed)."""


class SigningKeyError(ValueError):
    """The configured signing secret is missing or too short."""


def check_secret(secret: str | None) -> bytes:
    """``secret`` as bytes.

    Raises:
        SigningKeyError: no secret, an empty one (or only whitespace: never a key), or
            one shorter than :data:`MIN_SECRET_BYTES`.
    """
    if secret is not None and not secret.strip():
        raise SigningKeyError(
            "EMBER_REMOTE_CACHE is set and EMBER_REMOTE_CACHE_KEY is set but empty"
            f"{' (only whitespace)' if secret else ''}: an empty secret is no key, and "
            "entries of a shared cache are code that every machine runs, so they are "
            "signed; set EMBER_REMOTE_CACHE_KEY to the same random secret (at least "
            f"{MIN_SECRET_BYTES} characters) on every machine, or unset EMBER_REMOTE_CACHE")
    if secret is None:
        raise SigningKeyError(
            "EMBER_REMOTE_CACHE is set but EMBER_REMOTE_CACHE_KEY is not: entries of a "
            "shared cache are code that every machine runs, so they are signed with a "
            "secret; set EMBER_REMOTE_CACHE_KEY to the same random secret (at least "
            f"{MIN_SECRET_BYTES} characters) on every machine, or unset EMBER_REMOTE_CACHE")
    data = secret.encode("utf-8")
    if len(data) < MIN_SECRET_BYTES:
        raise SigningKeyError(
            f"EMBER_REMOTE_CACHE_KEY is {len(data)} bytes long; use a random secret of at "
            f"least {MIN_SECRET_BYTES}")
    return data


def signed_text(key: str, payload_sha256: str, inputs: list[str]) -> bytes:
    """The bytes a signature covers."""
    return "\0".join(["ember-program-cache", key, payload_sha256, *inputs]).encode("utf-8")


def sign(secret: bytes, key: str, payload_sha256: str, inputs: list[str]) -> str:
    """The hex HMAC-SHA256 of an entry."""
    return hmac.new(secret, signed_text(key, payload_sha256, inputs), hashlib.sha256).hexdigest()


def signature_ok(secret: bytes, key: str, payload_sha256: str, inputs: list[str],
                 signature: object) -> bool:
    """Whether ``signature`` is the entry's signature (compared in constant time)."""
    if not isinstance(signature, str):
        return False
    return hmac.compare_digest(sign(secret, key, payload_sha256, inputs), signature)
