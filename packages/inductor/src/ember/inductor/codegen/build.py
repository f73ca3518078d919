"""Building a program's kernels at compile time, all graphs at once, in parallel.

The inductor's ``precompile`` option (default on) builds every kernel before the
program is returned: the C++ file of each graph with ``g++`` (the kernel cache,
``ember.runtime.compiled.cpp_build``), and, with ``precompile_triton`` (default off) on a
CUDA device, each Triton kernel with Triton's compiler
(``ember.runtime.compiled.triton_aot.warm_kernel``), so the first call runs rather than
compiles. ``precompile_triton`` is off because on the H200 (2026-12-02 05:55 UTC, Triton
3.6) the first launch still compiled every warmed kernel again: the warm-up's argument
specialization was not the launch's, so it doubled the Triton build time. The builds of all graphs (forward and backward) go to one
thread pool (``ember.runtime.compiled.parallel_build``, ``EMBER_COMPILE_THREADS``); each
distinct source is built once.

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
from dataclasses import dataclass

import torch
from ember.inductor.codegen.backend import KernelSource
from ember.runtime.compiled.parallel_build import BuildJob, run_builds
from ember.runtime.ir.contracts import TritonLaunchMeta, launch_meta_from_json
from ember.runtime.logs import log
from ember.runtime.phases import count


@dataclass(frozen=True)
class GraphKernels:
    """The kernels of one graph to build: its name, device and kernel sources."""

    graph: str
    device: torch.device
    sources: Sequence[KernelSource]


def _cpp_job(source: KernelSource, names: list[str], graph: str) -> BuildJob[object]:
    from ember.runtime.compiled.cpp_build import compile_cpp

    what = f"the C++ kernels {', '.join(names)} of graph {graph!r}"
    return BuildJob(what, lambda: compile_cpp(source.source, what))


def _triton_jobs(source: KernelSource, device: torch.device) -> list[BuildJob[object]]:
    """The warm-up builds of a Triton kernel (two for a split reduction), or none when
    it can only be built at launch."""
    from ember.runtime.compiled.triton_aot import warm_kernel, warmable
    from ember.runtime.compiled.triton_kernel import TritonKernelSpec
    from ember.runtime.compiled.triton_launcher import split_from_entry

    meta = launch_meta_from_json("triton", dict(source.meta), f"kernel {source.name!r}")
    assert isinstance(meta, TritonLaunchMeta)
    spec = TritonKernelSpec(source.entry, source.source, dict(meta.signature),
                            dict(meta.constexprs), meta.num_warps, meta.num_stages)
    specs = [spec] if meta.split is None else [split_from_entry(spec, meta.split).spec, spec]
    if not all(warmable(s) for s in specs):
        count("triton builds at launch")
        return []

    def warm(s: TritonKernelSpec) -> Callable[[], object]:
        return lambda: warm_kernel(s, device)

    return [BuildJob(f"Triton kernel {s.name}", warm(s)) for s in specs]


def build_kernels(graphs: Sequence[GraphKernels],
                  triton: bool = False) -> dict[str, Exception]:
    """Build the kernels of ``graphs`` (see the module docstring; ``triton``: also the
    Triton kernels of CUDA graphs, on a GPU); returns the first error of each graph with
    a kernel that failed to build (a source shared by several graphs fails them all)."""
    jobs: list[BuildJob[object]] = []
    owners: list[list[str]] = []  # the graphs of each job
    by_source: dict[tuple[str, str], list[int]] = {}  # the jobs of each distinct source
    gpu = torch.cuda.is_available()
    warm_device: torch.device | None = None  # a GPU Triton kernels are built for
    for g in graphs:
        for source in g.sources:
            # NOTE: the C++ backend bundles a graph's kernels into one file: one build
            key = (source.lang, source.source if source.lang == "cpp"
                   else f"{source.entry}\n{source.source}")
            if key in by_source:
                for index in by_source[key]:
                    if g.graph not in owners[index]:
                        owners[index].append(g.graph)
                continue
            if source.lang == "cpp":
                names = [s.name for s in g.sources if s.source == source.source]
                new = [_cpp_job(source, names, g.graph)]
            elif source.lang == "triton" and g.device.type == "cuda" and gpu and triton:
                new = _triton_jobs(source, g.device)
                warm_device = warm_device or (g.device if new else None)
            else:
                new = []
            by_source[key] = list(range(len(jobs), len(jobs) + len(new)))
            jobs += new
            owners += [[g.graph] for _ in new]
    if any(g.device.type == "cuda" for g in graphs) and not (gpu and triton):
        log("stages", "the Triton kernels are built at their first launch ("
                      + ("no GPU" if triton else "precompile_triton is off") + ")")
    if warm_device is not None:
        from ember.runtime.compiled.triton_aot import start_triton_driver

        start_triton_driver(warm_device)  # here, before the threads would race to start it
    failed: dict[str, Exception] = {}
    for result, graph_names in zip(run_builds(jobs, "kernel builds"), owners):
        if result.error is not None:
            for name in graph_names:
                failed.setdefault(name, result.error)
    return failed
