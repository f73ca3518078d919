"""The inductor driver: core-functional Program -> compiled Program.

``compile_program`` runs the graph passes, then for each graph: lowering
(:class:`~ember.inductor.lowering.graph_lowering.GraphLowering`, with the lowering passes
of :mod:`ember.inductor.lowering.extern_passes`) into a
:class:`~ember.inductor.lowering.lowered_graph.LoweredGraph`, scheduling and fusion
(:func:`~ember.inductor.scheduler.schedule`), kernel codegen (the device's
:class:`~ember.inductor.codegen.backend.KernelBackend`) and the wrapper
(:class:`~ember.inductor.codegen.wrapper.WrapperWriter`). The artifact layout is
documented in ``ember/runtime/compiled/README.md``.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import re
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from ember.inductor.autotune import autotuning, tuning_device, tuning_report
from ember.inductor.codegen import KernelSource, backend_for
from ember.inductor.codegen import registry as kernel_backends
from ember.inductor.codegen.backend import KernelBackend
from ember.inductor.codegen.build import GraphKernels, KernelBuilds
from ember.inductor.codegen.dedupe import share_identical_kernels
from ember.inductor.codegen.memory_plan import MemoryReport
from ember.inductor.codegen.wrapper import WrapperWriter
from ember.inductor.idle_templates import lower_and_schedule
from ember.inductor.loop_ir import Kernel, format_kernel
from ember.inductor.loop_ir.symbolic_index import size_hints
from ember.inductor.lowering.builder import precision_casts
from ember.inductor.lowering.devices import traced_device
from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.inductor.lowering.saved_padding import with_padded_saved
from ember.inductor.passes import pipeline_for, run_passes
from ember.inductor.scheduler import KernelStep
from ember.runtime.ir import Program, symbolic
from ember.runtime.ir.contracts import (
    CompiledGraphEntry,
    CompiledMetadata,
    CompileReport,
    KernelEntry,
    launch_meta_from_json,
)
from ember.runtime.logs import log, log_enabled
from ember.runtime.phases import count, phase, profiles_compile
from ember.runtime.pipeline import MODE_FEATURES, mode_features

_EXTENSIONS = {"cpp": "cpp", "triton": "py"}


@dataclass
class CompiledGraph:
    """The generated code of one graph."""

    name: str
    device: torch.device
    wrapper: str
    kernels: list[tuple[Kernel, KernelSource]]
    constants: dict[str, str]
    fallbacks: collections.Counter[str] = field(default_factory=collections.Counter)
    deduped: int = 0
    """How many scheduled kernels run the code of one in ``kernels`` (codegen/dedupe.py)."""
    memory: MemoryReport | None = None
    """The wrapper's live bytes step by step (codegen/memory_plan.py)."""
    padded_outputs: dict[int, int] = field(default_factory=dict)
    """Saved tensors returned zero-padded: output index -> padded last size
    (``lowering/saved_padding.py``)."""


def graph_device(program: Program, graph_name: str) -> torch.device:
    """The device of a graph's tensors (the first tensor value found; cpu if none)."""
    metas = [n.meta for n in program.graphs[graph_name].nodes]
    return traced_device(metas) or torch.device("cpu")


def compile_graph(program: Program, graph_name: str = "forward",
                  device: torch.device | None = None, eager: bool = False,
                  eager_random: bool = False, pad_saved: bool = False) -> CompiledGraph:
    """Lower, schedule and generate code for one graph (no graph passes). ``eager``:
    generate no kernels, run every op as an extern call; ``eager_random``: only the
    random ops; ``pad_saved``: saved tensors a matmul padded are returned padded (the
    caller rewrites the program to match: ``lowering/saved_padding.py``).

    Raises:
        ember.inductor.lowering.graph_lowering.LoweringError: a lowering rule failed
            other than by ``NotLowerable`` (a bug in the rule).
    """
    graph = program.graphs[graph_name]
    hints = {name: symbolic.hint_of(name, r) for name, r in graph.symbols.items()}
    with size_hints(hints, graph.symbols):  # heuristics look at the hints
        dev = device or graph_device(program, graph_name)
        with tuning_device(dev):  # autotuning times candidates where the graph runs
            return _compile_graph_on(program, graph_name, dev, eager, eager_random,
                                     pad_saved)


def _compile_graph_on(program: Program, graph_name: str, dev: torch.device,
                      eager: bool, eager_random: bool, pad_saved: bool) -> CompiledGraph:
    lowered, steps = lower_and_schedule(lambda idle: GraphLowering(
        program, graph_name, dev, eager=eager, eager_random=eager_random,
        extern_matmuls=idle, pad_saved=pad_saved).run())
    if log_enabled("graphs"):
        log("graphs", lowered.format)
    shared = share_identical_kernels([s.kernel for s in steps if isinstance(s, KernelStep)])
    if shared.deduped:
        count("deduped kernels", shared.deduped)
        log("stages", f"graph {graph_name!r}: {shared.deduped} kernels run the code of an "
                      f"identical one ({', '.join(f'{a}->{b}' for a, b in shared.runs.items())})")
    with phase("codegen"):
        backend = backend_for(dev.type) if shared.unique else None
        kernels = list(shared.unique)
        sources = [generate_named(backend, k, graph_name) for k in kernels] if backend else []
        if backend:
            sources = backend.bundle(sources)
        writer = WrapperWriter(lowered, steps, str(dev), shared.runs)
        wrapper = writer.write()
    compiled = CompiledGraph(graph_name, dev, wrapper, list(zip(kernels, sources)),
                             dict(lowered.constants), collections.Counter(lowered.fallbacks),
                             shared.deduped, writer.memory, dict(lowered.padded_outputs))
    if log_enabled("output_code"):
        log("output_code", lambda: render_output_code(compiled))
    return compiled


def entry_name(graph_name: str, kernel_name: str) -> str:
    """The generated function's name: the kernel's, after its graph's (``bwd_kernel3``),
    so that a profile of a training step tells the forward's ``kernel3`` from the
    backward's (the wrapper still calls it ``kernel3``)."""
    tag = _GRAPH_TAGS.get(graph_name) or re.sub(r"\W", "_", graph_name)
    return f"{tag}_{kernel_name}" if tag.isidentifier() else f"g{tag}_{kernel_name}"


def generate_named(backend: KernelBackend, kernel: Kernel, graph_name: str) -> KernelSource:
    """``backend.generate(kernel)``, its function named by :func:`entry_name` where the
    backend asks for it (``KernelBackend.entries_named_by_graph``)."""
    if not backend.entries_named_by_graph:
        return backend.generate(kernel)
    source = backend.generate(dataclasses.replace(kernel, name=entry_name(graph_name,
                                                                           kernel.name)))
    return dataclasses.replace(source, name=kernel.name)


#: short graph names in kernel function names (others: the graph's name)
_GRAPH_TAGS = {"forward": "fwd", "backward": "bwd"}


def render_output_code(compiled: CompiledGraph) -> str:
    """The wrapper, the loop IR and the kernel sources of a graph, as one text."""
    parts = [f"# ===== wrapper of graph {compiled.name!r} =====", compiled.wrapper]
    shown: set[str] = set()
    for kernel, src in compiled.kernels:
        parts.append("# ----- loop IR -----\n" + format_kernel(kernel))
        if src.source not in shown:
            shown.add(src.source)
            parts.append(f"# ----- {src.lang} source -----\n{src.source}")
    return "\n".join(parts)


@profiles_compile  # run alone (not under the pipeline): its own stage profile
def compile_program(program: Program, options: dict[str, Any] | None = None) -> Program:
    """Compile every graph of a core-functional ``program`` into a ``compiled`` Program.

    Options: ``mode`` (a ``torch.compile`` mode, ``ember.runtime.pipeline.MODE_FEATURES``,
    which the runtime's pipeline passes on; those naming ``"autotune"`` time candidate
    kernels on the device and record the counts in ``metadata["autotune"]``: see
    :mod:`ember.inductor.autotune`), ``device`` (``"cpu"``/``"cuda"``, default: where
    the tensors are),
    ``precompile`` (default True: build the kernels now, on ``EMBER_COMPILE_THREADS``
    threads, each graph's as soon as its code is generated — the C++ files, and with ``precompile_triton``
    (default True, see ``codegen/build.py``) on a GPU the Triton kernels — which warms
    the caches and catches compile errors here rather than at load time), ``strict`` (default False:
    a graph whose lowering, code generation or C++ build fails — a lowering rule failing
    other than by ``NotLowerable`` included — runs its ops eagerly, with an
    :class:`InductorFallbackWarning`; True raises instead), ``eager_random`` (default
    False: random ops run in the kernels, on Philox keyed by a seed drawn from torch's
    generator, see ``lowering/random.py``; True runs them as extern calls on torch's
    generator, counted as fallbacks, so that results equal eager's under the same
    ``torch.manual_seed``: for tests that compare with eager), ``emulate_precision_casts``
    (default False: a float16/bfloat16 op's result is rounded where it is stored or cast
    explicitly, and a fused consumer reads it in float32, as torch.compile's kernels do;
    True rounds after every op like eager, at the cost of instructions: see
    ``lowering/builder.py``), ``attention_dropout`` (default True: attention with
    dropout on its probabilities becomes SDPA with ``dropout_p``, whose kernel draws its
    own mask; False, or ``eager_random``, leaves it unfused: ``passes/attention.py``).

    Raises:
        ember.runtime.compiled.cpp_build.CppCompileError: with ``strict``, a generated
            kernel does not compile (the message holds the compiler output).
        ValueError: ``mode`` is no ``torch.compile`` mode, or ``device`` no device
            that a kernel backend serves (naming the option).
    """
    options = options or {}
    tune = autotunes(options.get("mode"))
    with autotuning(tune), precision_casts(bool(options.get("emulate_precision_casts"))):
        out = _compile_program(program, options)
        if tune:
            report = tuning_report()
            out.metadata["autotune"] = report.to_json()
            if not (report.benchmarked or report.cached or report.failed):
                # NOTE: never silently the default: say why the mode changed nothing
                log("autotune", f"mode={options.get('mode')!r}: no kernel of this program "
                    "has candidates to time (C++ kernels for CPU tensors are not tuned "
                    "and CPU matmuls call ATen; Triton kernels under 65536 elements keep "
                    "their heuristic blocks): compiled as the default mode would")
    return out


def autotunes(mode: object) -> bool:
    """Whether ``mode`` asks for autotuning (``"max-autotune"``,
    ``"max-autotune-no-cudagraphs"``).

    Raises:
        ValueError: ``mode`` is no ``torch.compile`` mode.
    """
    if mode is not None and mode not in MODE_FEATURES:
        raise ValueError(f"unknown mode {mode!r}; modes: None, {', '.join(MODE_FEATURES)}")
    return "autotune" in mode_features(None if mode is None else str(mode))


def option_device(options: dict[str, Any]) -> torch.device | None:
    """The ``device`` option as a device (None: where the tensors are).

    Raises:
        ValueError: naming the option, for a value that is no device, or a device type
            no kernel backend serves (listing those that one serves).
    """
    value = options.get("device")
    if value is None or value == "":
        return None
    try:
        device = torch.device(value)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"option 'device'={value!r}: not a device ({e})") from None
    served = sorted(set(kernel_backends.BACKENDS) | set(kernel_backends.BUILTIN_BACKENDS))
    if device.type not in served:
        raise ValueError(f"option 'device'={value!r}: no Ember kernel backend for device "
                         f"type {device.type!r}; device types: {', '.join(served)}")
    return device


def _compile_program(program: Program, options: dict[str, Any]) -> Program:
    device = option_device(options)
    with phase("passes"):
        optimized = run_passes(program, pipeline_for(options))
    # NOTE: each graph's kernels start building once its code is generated, so that the
    # next graph's lowering overlaps them (codegen/build.py: KernelBuilds)
    cuda = any((device or graph_device(optimized, name)).type == "cuda"
               for name in optimized.graphs)
    builds = (KernelBuilds(bool(options.get("precompile_triton", True)), cuda=cuda)
              if options.get("precompile", True) else None)
    graphs: dict[str, CompiledGraph] = {}
    try:
        for name in optimized.graphs:
            pad_saved = name == "forward" and "backward" in optimized.graphs
            graphs[name] = _compile_graph_or_eager(optimized, name, device, options, pad_saved)
            if graphs[name].padded_outputs:  # the program says what the forward saves
                optimized = with_padded_saved(optimized, graphs[name].padded_outputs)
            if builds is not None:
                builds.start(_kernels_of(name, graphs[name]))
    except BaseException:
        if builds is not None:
            builds.abandon()
        raise
    if builds is not None:
        _build_or_eager(optimized, graphs, device, options, builds)
    out = optimized.copy()
    out.dialect = "compiled"
    # the sources of user Triton kernels (user_kernels/...) stay; kernels are new
    out.files = {k: v for k, v in optimized.files.items() if k.startswith("user_kernels/")}
    graphs_meta: dict[str, CompiledGraphEntry] = {}
    fallbacks: collections.Counter[str] = collections.Counter()
    n_kernels = 0
    for name, compiled in graphs.items():
        fallbacks.update(compiled.fallbacks)
        n_kernels += len(compiled.kernels)
        wrapper_path = f"{name}/wrapper.py"
        out.files[wrapper_path] = compiled.wrapper.encode()
        entries: list[KernelEntry] = []
        for kernel, src in compiled.kernels:
            digest = hashlib.sha256(src.source.encode()).hexdigest()[:16]
            path = f"{name}/{src.lang}_{digest}.{_EXTENSIONS.get(src.lang, 'txt')}"
            out.files[path] = src.source.encode()
            # NOTE: decoding the backend's launch data checks it against the contract
            # the runtime's launchers read (a codegen bug fails here, not at load time).
            meta = launch_meta_from_json(src.lang, dict(src.meta), f"kernel {src.name!r}")
            entries.append(KernelEntry(src.name, src.lang, src.entry, path, meta))
        graphs_meta[name] = CompiledGraphEntry(wrapper_path, tuple(entries),
                                               dict(compiled.constants), compiled.device)
    out.metadata = dict(out.metadata)
    CompiledMetadata(graphs_meta).write_to(out)
    CompileReport(n_kernels, dict(sorted(fallbacks.items()))).write_to(out)
    # each graph's static peak and ideal at the size hints (codegen/memory_plan.py)
    out.metadata["memory"] = {name: g.memory.to_json() for name, g in graphs.items()
                              if g.memory is not None}
    return out


def _compile_graph_or_eager(program: Program, name: str, device: torch.device | None,
                            options: dict[str, Any], pad_saved: bool = False) -> CompiledGraph:
    """compile_graph; if that fails — a bug in Ember — warn and run the graph's ops
    eagerly instead, unless ``options["strict"]`` asks for the error."""
    eager_random = bool(options.get("eager_random", False))
    try:
        return compile_graph(program, name, device, eager_random=eager_random,
                             pad_saved=pad_saved)
    except Exception as e:
        if options.get("strict"):
            raise
        return _eager_fallback(program, name, device, e)


def _kernels_of(name: str, graph: CompiledGraph) -> GraphKernels:
    return GraphKernels(name, graph.device, [s for _, s in graph.kernels])


def _build_or_eager(program: Program, graphs: dict[str, CompiledGraph],
                    device: torch.device | None, options: dict[str, Any],
                    builds: KernelBuilds) -> None:
    """Wait for the kernel builds of every graph (``codegen/build.py``; the ``kernel
    builds`` phase is the wait, what the builds add to the compile after the last
    graph's code generation); a graph whose kernels fail to build runs its ops eagerly
    instead (replaced in ``graphs``), unless ``options["strict"]`` asks for the error
    (the first failed graph's)."""
    with phase("kernel builds"):
        failed = builds.finish()
    for name, error in failed.items():
        if options.get("strict"):
            raise error
        graphs[name] = _eager_fallback(program, name, device, error)


def _eager_fallback(program: Program, name: str, device: torch.device | None,
                    error: Exception) -> CompiledGraph:
    message = (f"ember-inductor could not compile graph {name!r} "
               f"({type(error).__name__}: {str(error)[:500]}); its ops run eagerly")
    warnings.warn(message, InductorFallbackWarning, stacklevel=4)
    log("fallbacks", message)
    return compile_graph(program, name, device, eager=True)


class InductorFallbackWarning(UserWarning):
    """Ops run eagerly because Ember failed to compile them (a bug worth reporting)."""
