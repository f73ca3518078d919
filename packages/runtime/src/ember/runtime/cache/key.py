"""The whole-program cache key: everything a compiled program depends on.

===================  ==========================================================
component            what goes in
===================  ==========================================================
``program``          the program's text (:func:`~ember.runtime.ir.print_program`:
                     graphs with their metas, symbols, ranges, guards, sources,
                     signature, metadata, the declarations of its tensors), with
                     torch.fx's generated file names made stable
                     (:func:`stable_sources`)
``tensors``          per tensor: name, dtype, shape, strides, device, requires_grad,
                     and, for tensors no placeholder takes (``constant`` and
                     ``get_attr`` values, which a stage may fold), the SHA-256 of
                     the values
``backend``          the backend's name and its stages
``options``          the options, as canonical JSON
``mode``             the ``torch.compile`` mode (``default`` for None)
``stages``           the version of ember-runtime and of each stage's
                     distribution; for an editable install also the SHA-256 of
                     its sources (a checkout changes without a new version)
``torch``            torch's version (and its CUDA version)
``triton``           Triton's version, read from its metadata (not imported)
``python``           the interpreter's major.minor
``device``           for a program with CUDA tensors: each device's name and
                     compute capability
``settings``         torch's global numerics settings a stage may bake into code
                     (:data:`NUMERICS_SETTINGS`: float32 matmul precision and TF32,
                     reduced-precision reductions, deterministic algorithms)
``grad``             whether grad mode is on: the aot stage derives a backward only
                     under it, so the same program text compiles to an inference
                     program under ``torch.no_grad()`` and to a training one outside
``format``           :data:`CACHE_FORMAT`
===================  ==========================================================

Parameters, buffers and constants that the program takes through placeholders are
*inputs* of the compiled code: no stage reads their values, so only their metadata is
in the key, and a cache entry does not store them (:mod:`.entry`): a hit runs on the
current values, never on stale ones. The key is the SHA-256 of the components (each
hashed on its own, so a log can say which one differs) and is the same in every process.
Where to add a component: a function in :data:`COMPONENTS`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata, util
from pathlib import Path
from typing import Any

import torch
from ember.runtime.ir import (
    InputKind,
    IRFormatError,
    Program,
    SourceLocation,
    TensorMeta,
)
from ember.runtime.stages import Stage, available_stages

CACHE_FORMAT = "1"
"""Changes whenever an entry's layout or the key's meaning changes."""

_BOUND_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT)


class Uncacheable(Exception):
    """The compile cannot be cached (an option without a stable text form); the
    message says why."""


@dataclass(frozen=True)
class KeyRequest:
    """What one ``compile_program`` call compiles."""

    program: Program
    backend: str
    stages: tuple[Stage, ...]
    options: Mapping[str, Any]
    mode: str | None


@dataclass(frozen=True)
class CacheKey:
    """A cache key: ``digest`` (hex SHA-256) over ``components`` (name -> hex SHA-256)."""

    digest: str
    components: Mapping[str, str]

    @property
    def short(self) -> str:
        """The digest's first 16 characters, as logs print it."""
        return self.digest[:16]


def placeholder_tensors(program: Program) -> frozenset[str]:
    """The names of the tensors ``program`` takes through placeholders (parameters,
    buffers and constants bound as inputs): no stage reads their values."""
    return frozenset(spec.target for specs in program.signature.inputs.values()
                     for spec in specs
                     if spec.kind in _BOUND_KINDS and spec.target is not None)


def tensor_digest(t: torch.Tensor) -> str:
    """The SHA-256 of ``t``'s values (its bytes in row-major order)."""
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    if flat.dtype != torch.uint8:
        flat = flat.view(torch.uint8)
    return hashlib.sha256(flat.numpy().tobytes()).hexdigest()


def canonical_json(value: object, where: str) -> object:
    """``value`` as JSON data with a stable text (tuples as lists, ``torch.device`` and
    ``torch.dtype`` as their names).

    Raises:
        Uncacheable: a value with no stable text (an object, a function).
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return repr(value)  # NOTE: nan and inf have no JSON form; repr is exact
    if isinstance(value, (torch.device, torch.dtype)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [canonical_json(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return {k: canonical_json(v, f"{where}[{k!r}]") for k, v in sorted(value.items())}
    raise Uncacheable(f"{where} is a {type(value).__name__}, which has no stable text form")


_GENERATED_FILE = re.compile(r"<eval_with_key>\.\d+")
"""torch.fx's name for the code of a GraphModule: a per-process counter (Dynamo's graphs,
imported with ``import_fx``, carry it in their source lines), not the user's code."""


def _generated_file(source: SourceLocation | None) -> SourceLocation | None:
    if source is None or not _GENERATED_FILE.fullmatch(source.file):
        return source
    return dataclasses.replace(source, file="<eval_with_key>")


def stable_sources(program: Program) -> Program:
    """``program``, or a copy whose source lines in torch.fx's generated code name the
    file without its per-process counter (so the same graph has the same key in every
    process and after ``torch._dynamo.reset()``)."""
    if not any(_generated_file(n.source) is not n.source for g in program.graphs.values()
               for n in g.nodes) and not any(
            _generated_file(g.source) is not g.source
            for graph in program.graphs.values() for g in graph.guards):
        return program
    copy = program.copy()
    for graph in copy.graphs.values():
        graph.nodes = [dataclasses.replace(n, source=_generated_file(n.source))
                       for n in graph.nodes]
        graph.guards = [dataclasses.replace(g, source=_generated_file(g.source))
                        for g in graph.guards]
    return copy


def _program(req: KeyRequest) -> str:
    from ember.runtime.ir.printer import print_program  # a capture-cache hit needs no key

    try:
        return print_program(stable_sources(req.program))
    except IRFormatError as e:  # NOTE: the stages' verification reports it, not the cache
        raise Uncacheable(f"the program has no text form ({e})") from None


def _tensors(req: KeyRequest) -> str:
    bound = placeholder_tensors(req.program)
    lines = []
    for name in sorted(req.program.tensors):
        t = req.program.tensors[name]
        try:
            values = "input" if name in bound else tensor_digest(t)
        except (RuntimeError, NotImplementedError, TypeError) as e:  # meta, quantized, ...
            raise Uncacheable(f"the values of tensor {name!r} cannot be hashed "
                              f"({type(e).__name__}: {e})") from None
        lines.append(f"{name} {t.dtype} {list(t.shape)} {list(t.stride())} {t.device} "
                     f"{t.requires_grad} {values}")
    return "\n".join(lines)


def _backend(req: KeyRequest) -> str:
    return f"{req.backend} {' '.join(stage.name for stage in req.stages)}"


def _options(req: KeyRequest) -> str:
    return json.dumps(canonical_json(dict(req.options), "option"), sort_keys=True)


def _mode(req: KeyRequest) -> str:
    return req.mode or "default"


def _stages(req: KeyRequest) -> str:
    return "\n".join([distribution_identity("ember-runtime", "ember.runtime"),
                      *(stage_identity(stage) for stage in req.stages)])


def stage_identity(stage: Stage) -> str:
    """What the key knows of ``stage``'s code: the distribution that advertises it (its
    version, and its sources when installed editable); for a stage no entry point
    advertises (a test's), its class's qualified name."""
    cls = type(stage)
    where = f"{cls.__module__}.{cls.__qualname__}"
    entry = available_stages().get(stage.name)
    if entry is None or entry.module != cls.__module__ or entry.dist is None:
        return f"{stage.name} {where}"
    return f"{stage.name} {distribution_identity(entry.dist.name, entry.module.rpartition('.')[0])}"


def _torch(req: KeyRequest) -> str:
    return f"{torch.__version__} cuda {torch.version.cuda}"


def _triton(req: KeyRequest) -> str:
    return installed_version("triton")


def _python(req: KeyRequest) -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _device(req: KeyRequest) -> str:
    devices = sorted({str(m.device) for m in _metas(req.program) if m.device.type == "cuda"}
                     | {str(t.device) for t in req.program.tensors.values()
                        if t.device.type == "cuda"})
    described = []
    for name in devices:
        device = torch.device(name)
        major, minor = torch.cuda.get_device_capability(device)
        described.append(f"{name} {torch.cuda.get_device_name(device)} sm{major}{minor}")
    return "\n".join(described) or "cpu"


def _format(req: KeyRequest) -> str:
    return CACHE_FORMAT


NUMERICS_SETTINGS: dict[str, Callable[[], object]] = {
    "float32_matmul_precision": torch.get_float32_matmul_precision,
    "cuda.matmul.allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
    "cuda.matmul.allow_fp16_reduced_precision_reduction":
        lambda: torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
    "cuda.matmul.allow_bf16_reduced_precision_reduction":
        lambda: torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
    "cudnn.allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
    "deterministic_algorithms": torch.are_deterministic_algorithms_enabled,
}
"""torch's process-wide numerics settings, read at compile time: the inductor bakes the
TF32 choice into its matmul templates, so a program compiled under one setting is not
the program for another."""


def _settings(req: KeyRequest) -> str:
    return "\n".join(f"{name}={read()}" for name, read in NUMERICS_SETTINGS.items())


def _grad(req: KeyRequest) -> str:
    return f"grad_enabled={torch.is_grad_enabled()}"


COMPONENTS: dict[str, Callable[[KeyRequest], str]] = {
    "program": _program,
    "tensors": _tensors,
    "backend": _backend,
    "options": _options,
    "mode": _mode,
    "stages": _stages,
    "torch": _torch,
    "triton": _triton,
    "python": _python,
    "device": _device,
    "settings": _settings,
    "grad": _grad,
    "format": _format,
}
"""The key's components, each a function of the request to text (see the module
docstring)."""


def cache_key(req: KeyRequest) -> CacheKey:
    """The key of ``req``: the same text in every process for the same compile.

    Raises:
        Uncacheable: an option value without a stable text form, a constant whose
            values cannot be read (a meta tensor), a program without a text form.
    """
    components = {name: hashlib.sha256(fn(req).encode("utf-8")).hexdigest()
                  for name, fn in COMPONENTS.items()}
    whole = hashlib.sha256()
    for name, digest in components.items():
        whole.update(f"{name}={digest}\n".encode("ascii"))
    return CacheKey(whole.hexdigest(), components)


def _metas(program: Program) -> list[TensorMeta]:
    return [n.meta for g in program.graphs.values() for n in g.placeholders
            if isinstance(n.meta, TensorMeta)]


def installed_version(distribution: str) -> str:
    """The version of an installed distribution, ``none`` when it is not installed (read
    from its metadata: nothing is imported)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "none"


@functools.cache
def distribution_identity(distribution: str, package: str) -> str:
    """``NAME VERSION``, plus ``src SHA256`` of the ``.py`` files of ``package`` when the
    distribution is an editable install (a checkout's code changes under one version).
    Computed once a process."""
    identity = f"{distribution} {installed_version(distribution)}"
    if not is_editable(distribution):
        return identity
    return f"{identity} src {source_digest(package)}"


def is_editable(distribution: str) -> bool:
    """Whether ``distribution`` is an editable install (its ``direct_url.json`` says so;
    False when it is not installed)."""
    try:
        direct_url = metadata.distribution(distribution).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return False
    return bool(direct_url) and bool(
        json.loads(direct_url or "{}").get("dir_info", {}).get("editable"))


@functools.cache
def distribution_stamp(distribution: str, package: str) -> str:
    """Like :func:`distribution_identity`, but an editable install's sources are
    identified by each ``.py`` file's path, size and modification time (``stat``, no
    reads): cheap enough for a process's first call (the frontend's capture cache),
    changed by any edit that a build tool or an editor makes; so are the sources of a
    package that no distribution installed (found on ``sys.path``). An installed, not
    editable distribution is its version alone: its files change only with it."""
    version = installed_version(distribution)
    identity = f"{distribution} {version}"
    if version != "none" and not is_editable(distribution):
        return identity
    spec = util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return identity
    stamps: list[str] = []
    for location in spec.submodule_search_locations:
        _stamp_folder(location, "", stamps)
    digest = hashlib.sha256("\n".join(sorted(stamps)).encode("utf-8", "surrogatepass"))
    return f"{identity} stamp {digest.hexdigest()}"


def _stamp_folder(folder: str, rel: str, stamps: list[str]) -> None:
    """Append ``path\0size\0mtime`` of each ``.py`` file under ``folder`` (``rel``: its
    path relative to the package root) to ``stamps``."""
    # NOTE: scandir entries carry their stat, and relative paths are built while
    # walking (os.walk plus relpath per file cost twice as much on a first call)
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.endswith(".py") and entry.is_file():
                st = entry.stat()
                stamps.append(f"{rel}{entry.name}\0{st.st_size}\0{st.st_mtime_ns}")
            elif entry.is_dir(follow_symlinks=False) and entry.name != "__pycache__":
                _stamp_folder(entry.path, f"{rel}{entry.name}{os.sep}", stamps)


def source_digest(package: str) -> str:
    """The SHA-256 over the relative paths and contents of ``package``'s ``.py`` files
    (found without importing the package); ``unknown`` when it cannot be found."""
    spec = util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return "unknown"
    h = hashlib.sha256()
    for location in spec.submodule_search_locations:
        root = Path(location)
        for path in sorted(root.rglob("*.py")):
            h.update(str(path.relative_to(root)).encode("utf-8") + b"\0")
            h.update(path.read_bytes() + b"\0")
    return h.hexdigest()
