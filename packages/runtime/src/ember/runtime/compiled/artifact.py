"""``load_artifact``: a compiled ``.ember`` file -> a callable (README.md here).

It sits above the loader: it builds a :class:`~ember.runtime.callable.ProgramCallable`,
whose executor comes from :mod:`ember.runtime.compiled.loader` (the loader itself
imports nothing of the callable, so the two do not import each other).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ember.runtime.callable import ProgramCallable
from ember.runtime.compiled.loader import graph_entry, load_executor
from ember.runtime.config import config
from ember.runtime.ir import load
from ember.runtime.ir.contracts import MetadataError
from ember.runtime.ir.effects import check_may_run_code
from ember.runtime.ir.limits import LoadLimits


def load_artifact(path: Any, *, trusted: bool = False,
                  limits: LoadLimits | None = None) -> Callable[..., list[Any]]:
    """Load a compiled ``.ember`` file; returns ``fn(*user_inputs) -> list of outputs``.

    A compiled artifact is executable code: its Python wrapper is ``exec``'d and its C++
    and Triton kernel sources are built and run with your permissions, as importing a
    Python module would. Load one only from a source you trust, and say so with
    ``trusted=True`` (or ``EMBER_TRUST_ARTIFACTS=1`` for the whole process); without
    either it is refused before any of its code runs. Every member of the file is
    checked against the SHA-256 in its ``manifest.json`` (corruption, not forgery).

    Parameters and buffers come from the file's ``program.tensors`` unless the caller
    passes every placeholder's value positionally. Mutated inputs are copied back.

    Args:
        path: a file name or binary file object.
        trusted: you trust the file's source to run code on this machine.
        limits: size limits for reading the file (see ``ember.runtime.ir.limits``).

    Raises:
        UntrustedProgramError: neither ``trusted=True`` nor ``EMBER_TRUST_ARTIFACTS=1``
            (the message names both).
        IRFormatError: the file is not a valid compiled program, or a member does not
            match its SHA-256 (a ``MetadataError`` naming the key and the file for
            malformed metadata).
    """
    program = load(path, trusted=trusted, limits=limits)
    try:
        graph_entry(program, "forward")
        check_may_run_code(program, config.trust_artifacts)
        fn = ProgramCallable(program, load_executor)
    except MetadataError as e:
        if program.untrusted_origin:
            raise  # the message names the file already
        name = os.fspath(path) if isinstance(path, (str, os.PathLike)) else getattr(
            path, "name", repr(path))
        raise MetadataError(f"{e} (read from {str(name)!r})") from None

    def call(*inputs: Any) -> list[Any]:
        return fn(list(inputs))

    call.program = program  # type: ignore[attr-defined]
    return call
