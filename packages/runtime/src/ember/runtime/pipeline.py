"""The pipeline: compose the installed stages into a backend and run the result.

A backend is a list of stages (found through the ``ember.stages`` entry points) followed
by the executor the final dialect calls for (docs/architecture.md):

===============  ========================  ===============================
backend          stages                    runs on
===============  ========================  ===============================
``eager``        (none)                    the reference interpreter
``aot_eager``    aot                       the reference interpreter
``inductor``     aot, inductor             the compiled artifact
===============  ========================  ===============================

The input program is verified as ``aten``. With ``EMBER_SERIALIZE_BOUNDARIES=1`` every
boundary (the input, and each stage's output) is written to a ``.ember`` file, read back,
checked equal to what was written, and verified in its dialect: the file format, not a
Python object, is then what stages exchange. With ``EMBER_DEBUG_DIR`` set, each stage's
output is also saved there for inspection.
"""

from __future__ import annotations

import copy
import functools
import inspect
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ParamSpec

from ember.runtime.cache import program_cache
from ember.runtime.callable import ProgramCallable
from ember.runtime.config import config
from ember.runtime.ir import IRError, Program, VerificationError, load, save
from ember.runtime.ir.contracts import CompileReport
from ember.runtime.ir.effects import check_may_run
from ember.runtime.logs import log
from ember.runtime.phases import phase, profiles_compile
from ember.runtime.stages import (
    PRE_GRAD_PASSES,
    EagerGraphWarning,
    Stage,
    StageDeclined,
    load_stage,
)

BACKENDS: dict[str, tuple[str, ...]] = {
    "eager": (),
    "aot_eager": ("aot",),
    "inductor": ("aot", "inductor"),
}
"""Each backend's stages, in order."""

MODE_FEATURES: dict[str, frozenset[str]] = {
    "default": frozenset(),
    "reduce-overhead": frozenset({"cudagraphs"}),
    "max-autotune": frozenset({"autotune", "cudagraphs"}),
    "max-autotune-no-cudagraphs": frozenset({"autotune"}),
}
"""What each ``torch.compile`` mode asks of the stages and the runtime (a table: a mode
is implemented exactly when every feature it names is in :data:`IMPLEMENTED_FEATURES`)."""

IMPLEMENTED_FEATURES: set[str] = {"autotune", "cudagraphs"}
"""The mode features Ember implements: ``"autotune"`` (the inductor benchmarks its
candidate kernels at compile time) and ``"cudagraphs"`` (the runtime records and replays
CUDA graphs). The code implementing a feature adds it here, next to its implementation."""


FEATURE_STAGES: dict[str, str] = {"autotune": "inductor"}
"""The stage that implements a mode feature, for the features a stage implements (the
runtime implements the others for every backend: ``"cudagraphs"``, which skips, logs and
counts a program that is not compiled). A mode asking for one is refused with a backend
that runs no such stage."""


def _modes(implemented: bool) -> tuple[str, ...]:
    return tuple(m for m, features in MODE_FEATURES.items()
                 if (features <= IMPLEMENTED_FEATURES) == implemented)


def implemented_modes() -> tuple[str, ...]:
    """The ``mode=`` values Ember implements (``None`` means ``"default"``)."""
    return _modes(True)


def mode_features(mode: str | None) -> frozenset[str]:
    """The features ``mode`` asks for (``None``: the default mode's, none)."""
    return MODE_FEATURES["default" if mode is None else mode]


def list_backends() -> list[str]:
    """The names ``compile_program`` accepts (whether or not their stages are installed)."""
    return list(BACKENDS)


def check_mode(mode: object, backend: str | None = None) -> None:
    """Accept ``None`` and the implemented modes (:func:`implemented_modes`); with
    ``backend``, only those whose features the backend's stages implement
    (:data:`FEATURE_STAGES`).

    Raises:
        NotImplementedError: ``mode`` is a ``torch.compile`` mode whose features Ember
            does not implement yet (:data:`MODE_FEATURES`).
        ValueError: ``mode`` is no mode at all, or one ``backend`` would ignore (the
            message lists the valid ones).
    """
    done = implemented_modes()
    if mode is None:
        return
    if isinstance(mode, str) and mode in done:
        if backend in BACKENDS:
            _check_mode_backend(mode, backend)
        return
    if isinstance(mode, str) and mode in MODE_FEATURES:
        missing = sorted(MODE_FEATURES[mode] - IMPLEMENTED_FEATURES)
        raise NotImplementedError(
            f"mode={mode!r}: this torch.compile mode is not implemented in Ember yet "
            f"(missing: {', '.join(missing)}); implemented modes: None, {', '.join(done)}")
    pending = _modes(False)
    later = f" (not implemented yet: {', '.join(pending)})" if pending else ""
    raise ValueError(f"unknown mode {mode!r}; modes: None, {', '.join(done)}{later}")


def _ignored_feature(mode: str, backend: str) -> str | None:
    """A feature of ``mode`` whose stage (:data:`FEATURE_STAGES`) ``backend`` lacks."""
    for feature in sorted(MODE_FEATURES[mode]):
        stage = FEATURE_STAGES.get(feature)
        if stage is not None and stage not in BACKENDS[backend]:
            return feature
    return None


def _check_mode_backend(mode: str, backend: str) -> None:
    feature = _ignored_feature(mode, backend)
    if feature is None:
        return
    stage = FEATURE_STAGES[feature]
    valid = [m for m in implemented_modes() if _ignored_feature(m, backend) is None]
    raise ValueError(
        f"mode={mode!r} asks for {feature}, which the {stage} stage does; backend "
        f"{backend!r} runs no {stage} stage, so the mode would be ignored. Use a backend "
        f"with the {stage} stage, or a mode of backend {backend!r}: None, {', '.join(valid)}")


def check_options(backend: str, options: Mapping[str, Any],
                  accepted: Mapping[str, tuple[type, ...]] | None = None,
                  where: str = "", also_valid: tuple[str, ...] = ()) -> None:
    """Check each key of ``options`` against what the stages of ``backend`` declare
    (``Stage.options``) plus ``accepted`` (what the caller itself reads). A stage that
    declares nothing accepts any key.

    Args:
        where: how the caller names itself in messages (default ``backend 'B'``).
        also_valid: further names listed as valid (keys the caller took out already).

    Raises:
        ValueError: a key nobody reads (listing the valid ones), a value of the
            wrong type, or one a stage refuses (:meth:`Stage.check_options`).
        ember.runtime.stages.StageNotInstalledError: a stage of ``backend`` is missing.
    """
    known = dict(accepted or {})
    undeclared = False
    stages = [load_stage(name) for name in BACKENDS[backend]]  # StageNotInstalledError first
    for stage in stages:
        declared = stage.options
        if declared is None:
            undeclared = True
        else:
            known.update(declared)
    for key, value in options.items():
        types = known.get(key)
        if types is None:
            if undeclared:
                continue
            valid = ", ".join(sorted([*also_valid, *known]))
            raise ValueError(f"unknown option {key!r} for {where or f'backend {backend!r}'}; "
                             f"valid options: {valid}")
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            names = " or ".join("None" if t is type(None) else t.__name__ for t in types)
            raise ValueError(f"option {key!r}={value!r}: expected {names}")
    for stage in stages:
        stage.check_options(options)


_P = ParamSpec("_P")


def _records_cuda_graphs(
    compile_fn: Callable[_P, ProgramCallable],
) -> Callable[_P, ProgramCallable]:
    """``compile_fn`` whose result records CUDA graphs when its ``mode`` asks for them
    (``"cudagraphs" in mode_features(mode)``: :mod:`ember.runtime.cudagraphs`). A
    decorator, so that every way ``compile_program`` returns (compiled, loaded from the
    cache, run eagerly) gets it; other modes return what ``compile_fn`` returned."""
    parameters = inspect.signature(compile_fn)

    @functools.wraps(compile_fn)
    def compile_and_record(*args: _P.args, **kwargs: _P.kwargs) -> ProgramCallable:
        result = compile_fn(*args, **kwargs)
        mode = parameters.bind(*args, **kwargs).arguments.get("mode")
        if "cudagraphs" in mode_features(mode):
            result.enable_cuda_graphs()
        return result

    return compile_and_record


@_records_cuda_graphs  # CUDA graphs (reduce-overhead): the one hook, outside the body
@profiles_compile  # the stage profile (EMBER_LOGS=stages): one table per compile
def compile_program(
    program: Program,
    backend: str = "inductor",
    options: dict[str, Any] | None = None,
    mode: str | None = None,
    *,
    eager_on_decline: bool = True,
) -> ProgramCallable:
    """Compile an ``aten`` program with ``backend`` and return it as a callable.

    Args:
        program: an ``aten`` (or stricter) program, e.g. from the frontend's capture.
            A symbolic program (``graph.symbols``) compiles once for every size its
            ranges and guards allow.
        backend: one of :func:`list_backends`.
        options: passed to every stage (unknown keys are the stages' business).
        mode: ``None`` or ``"default"`` (see :func:`check_mode`); passed to the stages
            as ``options["mode"]``.
        eager_on_decline: what a stage declining the program does: run it eagerly
            (below; default), or raise its ``StageDeclined`` (for callers with another
            fallback, e.g. the Dynamo backend compiling a symbolic graph per shape).

    Returns:
        A :class:`ProgramCallable` taking every forward placeholder's value in order.

    Raises:
        ValueError: unknown backend or mode, or a mode the backend would ignore.
        NotImplementedError: a ``torch.compile`` mode Ember does not implement yet.
        StageNotInstalledError: a stage of ``backend`` is not installed (names the package).
        VerificationError: the input, or a stage's output, breaks its dialect's rules.
        StageDeclined: a stage declined the program and ``eager_on_decline`` is False.
        SigningKeyError: ``EMBER_REMOTE_CACHE`` is set without a usable
            ``EMBER_REMOTE_CACHE_KEY`` (:mod:`ember.runtime.cache`).

    The whole-program cache (:mod:`ember.runtime.cache`) answers first: a hit loads the
    compiled program stored by an earlier compile with the same key and runs no stage
    (``EMBER_LOGS=cache`` logs hits, misses and stores; ``EMBER_PROGRAM_CACHE=0`` turns
    it off). A compile a stage declined is not stored.

    A stage that raises :class:`~ember.runtime.stages.StageDeclined` (a valid program it
    cannot compile) makes the program run eagerly: an ``EagerGraphWarning``, a log line
    under ``fallbacks``, and ``metadata["fallbacks"] == {"graph runs eagerly": 1}``.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown Ember backend {backend!r}; backends: {', '.join(BACKENDS)}")
    check_mode(mode, backend)
    stage_options = dict(options or {})
    if mode is not None:
        stage_options["mode"] = mode
    stages = [load_stage(name) for name in BACKENDS[backend]]  # fail before any work
    check_may_run(program)  # before a cache hit too: a file's effects stay refused
    with phase("program cache"):
        lookup = program_cache.begin(program, backend, stages, stage_options, mode)
        hit = lookup.load() if lookup is not None else None
    if lookup is not None and hit is not None:
        try:
            with phase("runtime load"):
                return ProgramCallable(hit)
        except IRError as e:  # an entry that decoded but does not run: compile
            lookup.discard(str(e))
    try:
        compiled = run_stages(program, stages, stage_options)
    except StageDeclined as e:
        if lookup is not None:
            lookup.not_stored(f"a stage declined the program ({e})")
        if not eager_on_decline:
            raise
        return ProgramCallable(run_eagerly(program, str(e)))
    with phase("runtime load"):
        callable_ = ProgramCallable(compiled)
    if lookup is not None:
        with phase("program cache"):
            lookup.store(compiled)  # NOTE: after ProgramCallable: only a program that loads
    return callable_


EAGER_GRAPH_FALLBACK = "graph runs eagerly"
"""The ``metadata["fallbacks"]`` key of a program a stage declined."""


def run_eagerly(program: Program, reason: str) -> Program:
    """``program`` itself (its ``aten`` ops run one by one, as the ``eager`` backend runs
    them; autograd records them as in eager), marked and counted as a fallback."""
    message = f"an Ember stage declined this graph ({reason}); its ops run eagerly"
    warnings.warn(message, EagerGraphWarning, stacklevel=3)
    log("fallbacks", message)
    eager = copy.copy(program)
    eager.metadata = dict(program.metadata)
    CompileReport(fallbacks={EAGER_GRAPH_FALLBACK: 1}).write_to(eager)
    return eager


def run_stages(program: Program, stages: list[Stage], options: dict[str, Any]) -> Program:
    """Verify ``program`` as ``aten``, then run ``stages`` in order, crossing (and, with
    ``EMBER_SERIALIZE_BOUNDARIES``, serializing) a boundary before each stage and after
    the last. Each stage gets ``options`` plus, under
    :data:`~ember.runtime.stages.PRE_GRAD_PASSES`, the later stages' pre-grad passes.

    Raises:
        VerificationError: a program breaks the dialect it is supposed to be in.
        UntrustedProgramError: a program loaded from a file without ``trusted=True``
            calls an operator with effects outside its tensors (compiling it would turn
            that call into code that runs).
    """
    from ember.runtime.ir.verifier import verify  # cold only: a warm start loads its programs

    verify(program, "aten")
    check_may_run(program)  # a program loaded from a file: no effects outside tensors
    program = _cross_boundary(program, "input", "aten")
    tag = _debug_tag(stages) if config.debug_dir is not None else ""
    for index, stage in enumerate(stages):
        start = time.perf_counter()
        stage_options = dict(options)
        stage_options.pop(PRE_GRAD_PASSES, None)  # the pipeline's to set, nobody else's
        later = tuple(p.for_options(stage_options)
                      for s in stages[index + 1:] for p in s.pre_grad_passes())
        if later:
            stage_options[PRE_GRAD_PASSES] = later
        with phase(stage.name):
            result = stage.run(program, stage_options)
        elapsed = time.perf_counter() - start
        log("stages", f"{stage.name}: {stage.consumes} -> {stage.produces} in {elapsed:.3f}s")
        if result.dialect != stage.produces:
            raise VerificationError(
                f"stage {stage.name!r} should produce dialect {stage.produces!r} "
                f"but returned a {result.dialect!r} program"
            )
        if config.debug_dir is not None:
            _save_debug_copy(result, f"{index + 1}_{stage.name}{tag}")
        program = _cross_boundary(result, f"after {stage.name}", stage.produces)
    return program


def _cross_boundary(program: Program, where: str, dialect: str) -> Program:
    """The program the next stage sees. Without ``EMBER_SERIALIZE_BOUNDARIES`` that is
    ``program`` itself; with it, ``program`` written to a file and read back."""
    if not config.serialize_boundaries:
        return program
    from ember.runtime.ir.verifier import verify

    verify(program, dialect)
    with tempfile.TemporaryDirectory(prefix="ember-boundary-") as tmp:
        path = Path(tmp) / "program.ember"
        save(program, path)
        size = path.stat().st_size
        reloaded: Program = load(path, trusted=True)  # the file this process just wrote
    log("stages", f"boundary {where}: saved and re-loaded {size} bytes ({dialect})")
    if reloaded != program:
        raise VerificationError(
            f"boundary {where}: the program read back from its file differs from the one "
            "written (the serializer lost or changed something)"
        )
    verify(reloaded, dialect)
    return reloaded


def _debug_tag(stages: list[Stage]) -> str:
    """The suffix of this compile's ``EMBER_DEBUG_DIR`` files: none for the first compile
    writing there (``1_aot.ember``), ``-2``, ``-3``, ... for later ones (each compile kept:
    a graph break or a recompile compiles several programs)."""
    assert config.debug_dir is not None
    if not stages or not config.debug_dir.is_dir():
        return ""
    first, n = f"1_{stages[0].name}", 1
    while (config.debug_dir / f"{first}{'' if n == 1 else f'-{n}'}.ember").exists():
        n += 1
    return "" if n == 1 else f"-{n}"


def _save_debug_copy(program: Program, name: str) -> None:
    assert config.debug_dir is not None
    if config.debug_dir.exists() and not config.debug_dir.is_dir():
        raise ValueError(f"EMBER_DEBUG_DIR={config.debug_dir}: not a directory")
    config.debug_dir.mkdir(parents=True, exist_ok=True)
    path = config.debug_dir / f"{name}.ember"
    save(program, path)
    log("stages", f"wrote {path}")
