"""The launcher the compiled-artifact loader uses for ``lang == "triton"`` kernels.

The loader calls :func:`load_kernel` with the kernel's entry of the artifact and the
artifact's files; the result is called by the generated wrapper as ``kernel(*tensors)``
with the tensors of the kernel's buffers, in order, then (a kernel over symbolic sizes)
the values of its size symbols as ints. Everything else a launch needs (the grid, block
sizes, warps) lives in the entry's ``meta``, written by ``ember.inductor.codegen.triton``
and decoded by :class:`~ember.runtime.ir.contracts.TritonLaunchMeta`:

``meta = {"signature": {param: triton type}, "constexprs": {name: int},
"num_warps": int, "num_stages": int, "grid": [size, size, size], "split": {...}?}``

A ``size`` is an int, or (symbolic sizes) the text of a size expression over the
kernel's integer parameters, ``"(s0*64+1023)//1024"``: the launcher evaluates it from
the arguments of each launch (``ember.runtime.ir.symbolic.evaluate``), so the grid
follows the run-time sizes.

A *split reduction* (``meta["split"]``) is two functions of one module: first
``split["entry"]`` over ``split["grid"]`` writes partial results into workspaces the
launcher allocates (``workspace_numel`` elements of each of ``workspace_dtypes``), then the
main entry combines them. Both take the kernel's tensors followed by the workspaces.

The kernel runs where its tensors are: compiled by Triton's JIT on a CUDA device, in
Triton's interpreter on the CPU (CI).
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from ember.runtime.compiled.triton_fast_launch import fast_launch
from ember.runtime.compiled.triton_kernel import (
    TritonKernel,
    TritonKernelSpec,
    load_triton_kernel,
)
from ember.runtime.compiled.wrapper_support import allocator
from ember.runtime.ir import symbolic
from ember.runtime.ir.contracts import KernelEntry, TritonLaunchMeta, TritonSplitMeta


def _decoded(entry: KernelEntry | dict[str, Any]) -> tuple[KernelEntry, TritonLaunchMeta]:
    """``entry`` (decoded strictly when given as JSON) and its Triton launch data."""
    if not isinstance(entry, KernelEntry):
        entry = KernelEntry.from_json(entry, "Triton kernel entry")
    if not isinstance(entry.meta, TritonLaunchMeta):
        raise TypeError(f"Triton kernel entry {entry.name!r} is a {entry.lang!r} kernel")
    return entry, entry.meta


def spec_from_entry(entry: KernelEntry | dict[str, Any],
                    files: dict[str, bytes]) -> TritonKernelSpec:
    """Build the :class:`TritonKernelSpec` of an artifact's kernel entry.

    Args:
        entry: the kernel's :class:`~ember.runtime.ir.contracts.KernelEntry` (or its JSON
            object, decoded strictly) with :class:`~ember.runtime.ir.contracts.TritonLaunchMeta`.
        files: the artifact's files.

    Raises:
        ValueError: naming what is missing or malformed (a ``MetadataError`` for the entry).
    """
    entry, meta = _decoded(entry)
    if entry.source not in files:
        raise ValueError(
            f"Triton kernel {entry.name!r}: source file {entry.source!r} is not in "
            "the compiled program"
        )
    try:
        source = files[entry.source].decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"Triton kernel source {entry.source!r} is not UTF-8 text") from e
    return TritonKernelSpec(name=entry.entry, source=source, signature=dict(meta.signature),
                            constexprs=dict(meta.constexprs), num_warps=meta.num_warps,
                            num_stages=meta.num_stages)


@dataclass(frozen=True)
class SplitStage:
    """The partial kernel of a split reduction and the workspaces it fills."""

    spec: TritonKernelSpec
    grid: tuple[int | str, ...]
    workspace_dtypes: tuple[torch.dtype, ...]
    workspace_numel: int | str


def split_from_entry(spec: TritonKernelSpec,
                     split: TritonSplitMeta | dict[str, Any]) -> SplitStage:
    """The :class:`SplitStage` of ``meta["split"]`` (decoded strictly when given as JSON:
    workspace dtypes only by their names in the runtime's dtype table).

    Raises:
        ValueError: naming what is malformed (a ``MetadataError``).
    """
    if not isinstance(split, TritonSplitMeta):
        split = TritonSplitMeta.from_json(split, f"Triton kernel {spec.name!r}: meta['split']")
    partial = dataclasses.replace(spec, name=split.entry, constexprs=dict(split.constexprs))
    return SplitStage(partial, split.grid, split.workspace_dtypes, split.workspace_numel)


# Where a launch can run: CUDA (compiled by Triton's JIT) or the CPU (Triton's interpreter).
_LAUNCH_DEVICES = ("cuda", "cpu")


#: distinct size-argument values whose launch sizes a LaunchSizes remembers
LAUNCH_SIZES_CACHE = 1024


class LaunchSizes:
    """The grid (and workspace size) of a launch: ints, or size expressions evaluated
    from the launch's integer arguments (the kernel's size symbols). Results are kept
    per argument values: a launch at sizes seen before costs one dictionary lookup."""

    def __init__(self, signature: Mapping[str, str], sizes: Sequence[int | str]) -> None:
        self.sizes = tuple(sizes)
        self.symbolic = any(isinstance(s, str) for s in self.sizes)
        # where each integer parameter sits among the launch's arguments
        self.positions = {name: i for i, (name, ty) in enumerate(signature.items())
                          if ty in ("i32", "i64")}
        # the size arguments' values as one hashable key (one value, or a tuple of them)
        self._key = operator.itemgetter(*self.positions.values()) if self.positions \
            else (lambda args: ())
        self._seen: dict[Any, tuple[int, ...]] = {}

    def at(self, args: Sequence[Any]) -> tuple[int, ...]:
        """The sizes for this launch's arguments."""
        key = self._key(args)
        found = self._seen.get(key)
        if found is None:
            values = key if len(self.positions) > 1 else (key,)
            found = self.evaluate(dict(zip(self.positions, map(int, values))))
            if len(self._seen) >= LAUNCH_SIZES_CACHE:
                self._seen.clear()
            self._seen[key] = found
        return found

    def evaluate(self, env: Mapping[str, int]) -> tuple[int, ...]:
        """The sizes at the symbol values ``env``."""
        return tuple(s if isinstance(s, int) else symbolic.evaluate(s, env)
                     for s in self.sizes)


class TritonLaunch:
    """``launch(*args)``: runs one generated kernel over its grid (static, or evaluated
    from the size arguments), loading (and compiling) it for each device it is first
    called on."""

    def __init__(self, spec: TritonKernelSpec, grid: tuple[int | str, ...],
                 split: SplitStage | None = None) -> None:
        self.spec = spec
        self.grid = grid
        self.split = split
        # three dimensions, as a compiled binary's launch takes them
        self._grid = LaunchSizes(spec.signature, (*grid, *(1,) * (3 - len(grid))))
        self._split_sizes = None if split is None else LaunchSizes(
            spec.signature, (*split.grid, split.workspace_numel))
        self._static_grid = None if self._grid.symbolic else self._grid.evaluate({})
        self._arity = len(spec.signature)
        self._by_device: dict[torch.device, tuple[TritonKernel, TritonKernel | None]] = {}
        # CUDA device index -> its kernel's direct launches (.triton_fast_launch)
        self.fast_by_index: dict[int, dict[tuple[Any, ...], Any]] = {}

    def kernels_for(self, device: torch.device) -> tuple[TritonKernel, TritonKernel | None]:
        """The loaded (main, partial) kernels for ``device`` (loaded on first use)."""
        kernels = self._by_device.get(device)
        if kernels is None:
            partial = load_triton_kernel(self.split.spec, device) if self.split else None
            kernels = (load_triton_kernel(self.spec, device), partial)
            self._by_device[device] = kernels
            if device.type == "cuda" and device.index is not None and self.split is None:
                self.fast_by_index[device.index] = kernels[0].fast
        return kernels

    def fast_call(self) -> Callable[..., None]:
        """This launch as one Python frame where it can be (:mod:`.triton_fast_launch`),
        itself elsewhere."""
        return fast_launch(self.spec.name, self.spec.signature, self._static_grid,
                           self._grid.at, self.fast_by_index, self)

    def __call__(self, *args: Any) -> None:
        grid = self._static_grid or self._grid.at(args)
        if 0 in grid:
            return  # an empty tensor: nothing to compute
        device = args[0].device if args and isinstance(args[0], torch.Tensor) \
            else torch.device("cpu")
        if device.type not in _LAUNCH_DEVICES:
            # a meta tensor has no memory to read (the interpreter would follow a null
            # pointer); the wrapper's input checks say which input it was
            raise TypeError(f"Triton kernel {self.spec.name} runs on CUDA tensors or, "
                            f"interpreted, CPU ones; got a tensor on {device}")
        main, partial = self.kernels_for(device)
        if self.split is None or partial is None or self._split_sizes is None:
            if len(args) != self._arity:
                main.launch(grid, *args)  # raises, naming the signature
            main.launch3(grid, args)
            return
        *split_grid, workspace_numel = self._split_sizes.at(args)
        alloc = allocator(str(device))  # no device text parsed per workspace
        workspaces = [alloc((workspace_numel,), (1,), d) for d in self.split.workspace_dtypes]
        partial.launch(split_grid, *args, *workspaces)
        main.launch(grid, *args, *workspaces)

    def __repr__(self) -> str:
        return f"<TritonLaunch {self.spec.name} grid={self.grid}>"


def load_kernel(entry: KernelEntry | dict[str, Any],
                files: dict[str, bytes]) -> Callable[..., None]:
    """The callable for one Triton kernel of a compiled artifact (see module doc).

    Raises:
        ValueError: when the entry or its metadata is malformed.
    """
    entry, meta = _decoded(entry)
    spec = spec_from_entry(entry, files)
    stage = split_from_entry(spec, meta.split) if meta.split is not None else None
    return TritonLaunch(spec, meta.grid, stage).fast_call()
