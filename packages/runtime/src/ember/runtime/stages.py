"""The stage protocol: how the runtime's pipeline finds and runs the compiler stages.

Stages are installed separately and found through the entry-point group ``ember.stages``
(``docs/architecture.md``). A stage takes a :class:`~ember.runtime.ir.Program` in the dialect it
``consumes`` and returns one in the dialect it ``produces``; the IR is the only thing
stages share.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
from dataclasses import dataclass
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from typing import Any, ClassVar

from ember.runtime.ir import Program

ENTRY_POINT_GROUP = "ember.stages"

PRE_GRAD_PASSES = "pre_grad_passes"
"""The ``options`` key under which the pipeline passes a stage the later stages'
:meth:`Stage.pre_grad_passes` (not a user option: ``compile`` rejects it)."""

ProgramPass = Callable[[Program], Program]


@dataclass(frozen=True)
class PreGradPass:
    """A rewrite a later stage asks an earlier one to run before differentiating
    (:meth:`Stage.pre_grad_passes`): ``run`` on the forward decomposed to Core ATen,
    only when ``applies`` (a cheap test of the functional ``aten`` program: the
    decomposition it needs is a re-trace of the whole forward). A pass that depends on
    the compile's options has ``configure``: ``configure(options)`` is its ``run`` for
    them (the pipeline hands on :meth:`for_options`)."""

    name: str
    run: ProgramPass
    applies: Callable[[Program], bool]
    configure: Callable[[Mapping[str, Any]], ProgramPass] | None = None

    def for_options(self, options: Mapping[str, Any]) -> PreGradPass:
        """This pass as a compile with ``options`` (the user's ``options=`` and ``mode``)
        runs it: ``run`` made by ``configure``; the pass itself without one."""
        if self.configure is None:
            return self
        return dataclasses.replace(self, run=self.configure(options), configure=None)

# The distribution that provides each stage, for "please install" messages.
STAGE_DISTRIBUTIONS = {"aot": "ember-aot", "inductor": "ember-inductor", "frontend": "ember-frontend"}


class Stage(abc.ABC):
    """A compiler stage: Program (dialect ``consumes``) -> Program (dialect ``produces``)."""

    name: str
    consumes: str
    produces: str
    options: ClassVar[Mapping[str, tuple[type, ...]] | None] = None
    """The ``options=`` keys this stage reads, each with the types its value may have;
    ``ember.frontend.compile`` rejects any other key (and other types). None: the stage
    does not declare them, and options are not checked."""

    def check_options(self, options: Mapping[str, Any]) -> None:
        """Check the values of this stage's options beyond their types (a count that
        is negative, ...); ``ember.frontend.compile`` and the ``torch.compile``
        backend call it, after the type checks of :attr:`options`, before any work.
        Default: nothing more to check.

        Raises:
            ValueError: naming the option, its value and what it accepts.
        """

    @abc.abstractmethod
    def run(self, program: Program, options: dict[str, Any]) -> Program:
        """Compile ``program``; ``options`` are the user's ``options=`` plus ``mode``.

        Raises:
            ember.runtime.ir.VerificationError: if ``program`` is not in ``consumes``.
            StageDeclined: the program is valid but this stage cannot compile it (not a
                bug: e.g. its backward needs an op whose output shape depends on data).
        """


    def pre_grad_passes(self) -> Sequence[PreGradPass]:
        """Rewrites this stage asks an earlier stage to run on a training program before
        it derives the backward (default none).

        The pipeline hands the passes of a backend's later stages to each earlier one
        under ``options[PRE_GRAD_PASSES]``, each made for the compile's options
        (:meth:`PreGradPass.for_options`). The aot stage runs them on the forward
        decomposed to Core ATen (one ``forward`` graph, no backward yet), so that a fused
        op a pass introduces (hand-written attention becoming SDPA) is differentiated as
        that op. A pass returns its input when it changes nothing and counts what it
        changed in ``metadata["rewrites"]``.
        """
        return ()


class StageDeclined(Exception):
    """A stage cannot compile a valid program, for a reason that is not a bug (the
    pipeline then runs the captured ops eagerly, with an :class:`EagerGraphWarning`)."""


class SymbolicSizesDeclined(StageDeclined):
    """A stage cannot compile a program with symbolic sizes for every size they allow
    (an operator needs one as a constant, or has no kernel for symbolic sizes); the same
    program with static sizes may compile. A frontend can capture it again with static
    sizes (ember-frontend does, for sizes it made symbolic itself) instead of running it
    eagerly."""


class EagerGraphWarning(UserWarning):
    """A program runs op by op, uncompiled, because a stage declined it; the message
    says which stage and why. Counted in the program's ``metadata["fallbacks"]``."""


class StageNotInstalledError(RuntimeError):
    """A backend needs a stage whose package is not installed."""


@functools.lru_cache(maxsize=None)
def available_stages() -> dict[str, metadata.EntryPoint]:
    """Installed stages by name."""
    found: dict[str, metadata.EntryPoint] = {}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in found and found[ep.name].value != ep.value:
            raise RuntimeError(
                f"two packages provide the Ember stage {ep.name!r}: "
                f"{found[ep.name].value} and {ep.value}; uninstall one"
            )
        found[ep.name] = ep
    return found


def load_stage(name: str) -> Stage:
    """Instantiate the installed stage ``name``.

    Raises:
        StageNotInstalledError: naming the distribution to install, and the commands
            that install it in a checkout of the repository.
    """
    stages = available_stages()
    if name not in stages:
        dist = STAGE_DISTRIBUTIONS.get(name, f"ember-{name}")
        raise StageNotInstalledError(
            f"the Ember stage {name!r} is not installed: pip install {dist} (in a checkout "
            f"of the Ember repository: pip install -e packages/{name}, or "
            f"python3 tools/dev.py setup to install every stage)"
        )
    cls = stages[name].load()
    stage = cls()
    if not isinstance(stage, Stage):
        raise TypeError(f"entry point {stages[name].value} is not an ember.runtime.stages.Stage")
    return stage
