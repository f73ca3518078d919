"""A stage that declines a symbolic program: the function compiles per size instead.

A backend stage may be unable to compile a program for every size its guards allow
(the aot stage, when torch's backward formula of an op needs a size as a constant:
``cumprod``'s backward along a symbolic dimension). Run eagerly, the whole graph would
lose its compilation for every size. Instead, both capture modes compile a program whose
symbolic sizes came from ``dynamic=True`` or automatic dynamic (not from user marks)
with the decline raised (:func:`compile_for_policy`), and on
:class:`SymbolicProgramDeclined` turn the function's symbolic sizes off
(:meth:`~ember.frontend.dynamic.DynamicPolicy.refuse_symbolic_sizes`) and capture
again: the program is static, guarded on its sizes, and a call with other sizes
compiles again (up to the recompile limit), as torch.compile does for a size an
operator specialises. Logged under ``EMBER_LOGS=dynamic``.

Only a decline for the program's symbolic sizes (``SymbolicSizesDeclined``, which
ember-runtime 0.4.2 added) does this; any other decline, or one of a program still
symbolic after the retry (user marks, data-dependent sizes), runs the graph eagerly with
the stage's warning, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from ember.frontend.dynamic import DynamicPolicy
from ember.runtime.ir import Program

__all__ = ["SymbolicProgramDeclined", "compile_for_policy", "static_from_now_on",
           "symbolic_failure"]


def symbolic_failure(error: BaseException | None) -> bool:
    """Whether ``error`` (or an error it was raised from) is the recorder's refusal of a
    value it cannot write in the IR (a symbolic float, a size expression): a torch call
    that a capture with symbolic sizes cannot record, and one with static sizes can."""
    from ember.runtime.tracing_errors import RecordingError

    return error is not None and (isinstance(error, RecordingError)
                                  or symbolic_failure(error.__cause__))


class SymbolicProgramDeclined(Exception):
    """A stage declined a program for symbolic sizes that the function's dynamic policy
    made, or a call failed for them during the capture: capture again with static sizes
    (the message says which, and why)."""


def static_from_now_on(policy: DynamicPolicy, error: SymbolicProgramDeclined,
                       name: str) -> None:
    """Turn ``policy``'s symbolic sizes off after ``error`` (the caller captures again).

    Raises:
        AssertionError: ``policy`` made no size symbolic (:func:`compile_for_policy`
            raises only for a policy that did).
    """
    if not policy.refuse_symbolic_sizes(str(error), name):
        raise AssertionError("a static capture's decline was raised") from error


def compile_for_policy(compile_program: Callable[..., Any], program: Program, backend: str,
                       options: dict[str, Any], mode: str | None,
                       policy: DynamicPolicy) -> Callable[[list[Any]], list[Any]]:
    """``compile_program(program, backend, options, mode)``; for a symbolic program
    whose sizes ``policy`` may make static, a stage's decline for its symbolic sizes
    (``SymbolicSizesDeclined``, ember-runtime 0.4.2+) raises
    :class:`SymbolicProgramDeclined` instead of running the graph eagerly. Another
    decline runs it eagerly, as ``compile_program`` does.

    Raises:
        SymbolicProgramDeclined: as above.
    """
    from ember.runtime import stages

    sizes_declined = getattr(stages, "SymbolicSizesDeclined", None)
    if sizes_declined is None or not (policy.may_be_dynamic and program.forward.symbols):
        return cast(Callable[[list[Any]], list[Any]],
                    compile_program(program, backend, options, mode))
    try:
        return cast(Callable[[list[Any]], list[Any]],
                    compile_program(program, backend, options, mode, eager_on_decline=False))
    except sizes_declined as e:
        raise SymbolicProgramDeclined(f"a stage declined its symbolic program: {e}") from None
    except stages.StageDeclined as e:  # not for its sizes: as compile_program's own
        from ember.runtime.callable import ProgramCallable
        from ember.runtime.pipeline import run_eagerly

        return ProgramCallable(run_eagerly(program, str(e)))
