"""Building a program's kernels at compile time, all graphs at once, in parallel.

The inductor's ``precompile`` option (default on) builds every kernel before the
program is returned: the C++ file of each graph with ``g++`` (the kernel cache,
``ember.runtime.compiled.cpp_build``), and, with ``precompile_triton`` (default on) on a
CUDA device, each Triton kernel with Triton's compiler
(``ember.runtime.compiled.triton_aot.warm_kernel``), so the first call runs rather than
compiles: the warm-up keeps each binary in ``ember.runtime.compiled.triton_warmed``, and a
kernel's first launch with the argument specialization it was built for (16-byte aligned
tensors of its dtypes) takes it from there (``docs/compile-time.md`` has its H200 measurements). The builds of all
graphs (forward and backward) go to one thread pool
(``ember.runtime.compiled.parallel_build``, ``EMBER_COMPILE_THREADS``), each graph's as
soon as its code is generated (:class:`KernelBuilds`); each distinct source is built
once.

==========================  ===============================================================
kernel                      built now when
==========================  ===============================================================
C++                         always (the build is the kernel cache's entry)
Triton, CUDA device         ``precompile_triton``, a GPU is present and every argument is a
                            tensor (a kernel over
                            symbolic sizes is specialized on their values: it is built at
                            its first launch, and counted as ``triton builds at launch``)
Triton, CPU tensors         never: Triton's interpreter runs it, nothing to build
==========================  ===============================================================
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch
from ember.inductor.codegen.backend import KernelSource
from ember.runtime.compiled.parallel_build import (
    BuildJob,
    BuildResult,
    compile_threads,
    run_build,
    run_builds,
)
from ember.runtime.config import config
from ember.runtime.ir.contracts import TritonLaunchMeta, launch_meta_from_json
from ember.runtime.logs import log
from ember.runtime.phases import count, set_count


@dataclass(frozen=True)
class GraphKernels:
    """The kernels of one graph to build: its name, device and kernel sources."""

    graph: str
    device: torch.device
    sources: Sequence[KernelSource]


def _cpp_job(source: KernelSource, names: list[str], graph: str) -> BuildJob[object]:
    from ember.runtime.compiled.cpp_build import compile_cpp

    what = f"the C++ kernels {', '.join(names)} of graph {graph!r}"
    return BuildJob(what, lambda: compile_cpp(source.source, what), len(source.source))


def _triton_jobs(source: KernelSource, device: torch.device) -> list[BuildJob[object]]:
    """The warm-up builds of a Triton kernel (two for a split reduction), or none when
    it can only be built at launch."""
    from ember.runtime.compiled.triton_aot import warm_kernel
    from ember.runtime.compiled.triton_kernel import warmable
    from ember.runtime.compiled.triton_kernel import TritonKernelSpec
    from ember.runtime.compiled.triton_launcher import split_from_entry
    from ember.runtime.compiled.triton_warmed import device_index

    meta = launch_meta_from_json("triton", dict(source.meta), f"kernel {source.name!r}")
    assert isinstance(meta, TritonLaunchMeta)
    spec = TritonKernelSpec(source.entry, source.source, dict(meta.signature),
                            dict(meta.constexprs), meta.num_warps, meta.num_stages)
    specs = [spec] if meta.split is None else [split_from_entry(spec, meta.split).spec, spec]
    if not all(warmable(s) for s in specs):
        count("triton builds at launch")
        return []

    # NOTE: the device index resolved here, in the compiling thread: a build thread's
    # current CUDA device is the default one, not necessarily the caller's
    index = torch.device("cuda", device_index(device))

    def warm(s: TritonKernelSpec) -> Callable[[], object]:
        return lambda: warm_kernel(s, index)

    # the source's length as the build's cost: Triton's compile time grows with it
    return [BuildJob(f"Triton kernel {s.name}", warm(s), len(s.source)) for s in specs]


def build_kernels(graphs: Sequence[GraphKernels],
                  triton: bool = False) -> dict[str, Exception]:
    """Build the kernels of ``graphs`` (see the module docstring; ``triton``: also the
    Triton kernels of CUDA graphs, on a GPU); returns the first error of each graph with
    a kernel that failed to build (a source shared by several graphs fails them all)."""
    builds = KernelBuilds(triton)
    for g in graphs:
        builds.start(g)
    return builds.finish()


class KernelBuilds:
    """The kernel builds of one program, started graph by graph: with a pool of more
    than one thread (``EMBER_COMPILE_THREADS``), a graph's builds begin as soon as
    :meth:`start` is given its kernels, so they run while the inductor lowers the next
    graph (the backward graph's Python stages overlap the forward graph's ``g++``);
    :meth:`finish` waits for all of them. With one thread they run one by one in
    :meth:`finish`, in the calling thread. Each distinct source is built once, whichever
    graphs share it; results are taken in start order, so the outcome is a serial
    build's."""

    def __init__(self, triton: bool = False, threads: int | None = None,
                 cuda: bool = False) -> None:
        self._triton = triton
        self._threads = threads or compile_threads()
        self._gpu = torch.cuda.is_available()
        self._jobs: list[BuildJob[object]] = []
        self._owners: list[list[str]] = []  # the graphs of each job
        self._by_source: dict[tuple[str, str], list[int]] = {}  # the jobs of a source
        self._futures: list[Future[BuildResult[object]]] = []
        self._pool: ThreadPoolExecutor | None = None
        self._driver_started = False
        self._launch_logged = False
        if cuda and triton and self._gpu and self._threads > 1:
            # the worker processes import torch and Triton while the graphs are lowered
            # (:mod:`ember.runtime.compiled.triton_processes`)
            from ember.runtime.compiled.triton_processes import prestart

            set_count("triton worker processes", prestart())

    def start(self, g: GraphKernels) -> None:
        """Add graph ``g``'s kernels (those an earlier graph added are not built again);
        with a pool, start building them now."""
        first_new = len(self._jobs)
        for source in g.sources:
            # NOTE: the C++ backend bundles a graph's kernels into one file: one build
            key = (source.lang, source.source if source.lang == "cpp"
                   else f"{source.entry}\n{source.source}")
            if key in self._by_source:
                for index in self._by_source[key]:
                    if g.graph not in self._owners[index]:
                        self._owners[index].append(g.graph)
                continue
            if source.lang == "cpp":
                names = [s.name for s in g.sources if s.source == source.source]
                new = [_cpp_job(source, names, g.graph)]
            elif (source.lang == "triton" and g.device.type == "cuda" and self._gpu
                  and self._triton):
                new = _triton_jobs(source, g.device)
                if new and not self._driver_started:
                    from ember.runtime.compiled.triton_aot import start_triton_driver

                    start_triton_driver(g.device)  # here, before threads race to start it
                    self._driver_started = True
            else:
                new = []
            self._by_source[key] = list(range(len(self._jobs), len(self._jobs) + len(new)))
            self._jobs += new
            self._owners += [[g.graph] for _ in new]
        if (g.device.type == "cuda" and not (self._gpu and self._triton)
                and not self._launch_logged):
            self._launch_logged = True
            log("stages", "the Triton kernels are built at their first launch ("
                          + ("no GPU" if self._triton else "precompile_triton is off") + ")")
        if self._threads > 1 and len(self._jobs) > first_new:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self._threads,
                                                thread_name_prefix="ember-build")
            # costly builds first (the slowest kernel bounds the wait), results kept
            # in start order
            new_jobs = range(first_new, len(self._jobs))
            submitted = {i: self._pool.submit(run_build, self._jobs[i])
                         for i in sorted(new_jobs, key=lambda i: -self._jobs[i].cost)}
            self._futures += [submitted[i] for i in new_jobs]

    def finish(self) -> dict[str, Exception]:
        """Wait for every build; the first error of each graph with a kernel that failed
        to build (a source shared by several graphs fails them all)."""
        if self._pool is None:
            results = run_builds(self._jobs, "kernel builds", 1) if self._jobs else []
        else:
            workers = min(self._threads, len(self._jobs))
            set_count("build threads", workers)
            log("stages", f"kernel builds: {len(self._jobs)} build"
                          f"{'s' if len(self._jobs) != 1 else ''} on {workers} thread"
                          f"{'s' if workers != 1 else ''}, each graph's started once its "
                          "code was generated "
                          f"(EMBER_COMPILE_THREADS={config.compile_threads or 'auto'})")
            try:
                results = [f.result() for f in self._futures]
            finally:
                self._pool.shutdown()
        failed: dict[str, Exception] = {}
        for result, graph_names in zip(results, self._owners):
            if result.error is not None:
                for name in graph_names:
                    failed.setdefault(name, result.error)
        return failed

    def abandon(self) -> None:
        """Stop: builds not yet begun are dropped, running ones end in the background
        (the compile failed before :meth:`finish`)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
