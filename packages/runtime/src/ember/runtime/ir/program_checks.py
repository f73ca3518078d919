"""The registry of the dialect checks that live above the IR layer: the ``compiled``
dialect's artifact layout belongs to ``ember.runtime.compiled``, which registers its
check here when imported (importing ember.runtime imports it);
:func:`ember.runtime.ir.verify` runs it. Its own module so that registering does not
import the verifier (a warm start, whose programs come from the caches, never runs it).
"""

from __future__ import annotations

from collections.abc import Callable

from ember.runtime.ir.errors import VerificationError
from ember.runtime.ir.graph import DIALECTS, Program

ProgramCheck = Callable[[Program], None]
"""A dialect's whole-program check: raises VerificationError naming what is wrong."""

# Dialect -> the check of the rules that live above the IR layer.
_PROGRAM_CHECKS: dict[str, ProgramCheck] = {}
DIALECTS_CHECKED_ABOVE: tuple[str, ...] = ("compiled",)


def register_program_check(dialect: str, check: ProgramCheck) -> None:
    """Make :func:`~ember.runtime.ir.verify` run ``check`` on every program verified
    against ``dialect`` (one check per dialect; registering again replaces it).

    Raises:
        VerificationError: if ``dialect`` is not one of :data:`DIALECTS`.
    """
    if dialect not in DIALECTS:
        raise VerificationError(f"cannot register a check for unknown dialect {dialect!r}; "
                                f"dialects: {', '.join(DIALECTS)}")
    _PROGRAM_CHECKS[dialect] = check
