"""Why a decomposition left its op whole, for the fallback log.

A decomposition that covers only some calls of its op (dense inputs, masks of the
shapes eager accepts) returns ``NotImplemented`` for the others, which keeps the call
whole: an extern op (:mod:`ember.aot.extern_ops`). :func:`keep_whole` notes why, and the
``EMBER_LOGS=fallbacks`` line of that op says it instead of "no decomposition".
"""

from __future__ import annotations

from typing import Any

from ember.aot._torch import OpOverload, qualified_name

_REASONS: dict[str, list[str]] = {}


def keep_whole(op: OpOverload, reason: str) -> Any:
    """Note that a call of ``op`` stays whole because of ``reason`` (a phrase: "its
    input is a nested tensor") and return ``NotImplemented``, the decomposition's answer."""
    reasons = _REASONS.setdefault(qualified_name(op), [])
    if reason not in reasons:
        reasons.append(reason)
    return NotImplemented


def take_reasons() -> dict[str, list[str]]:
    """The reasons noted since the last call (qualified op name -> reasons), forgotten
    after."""
    taken = dict(_REASONS)
    _REASONS.clear()
    return taken
