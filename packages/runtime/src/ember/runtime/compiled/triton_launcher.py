"""The launcher the compiled-artifact loader uses for ``lang == "triton"`` kernels.

The loader calls :func:`load_kernel` with the kernel's entry of the artifact and the
artifact's files; the result is called by the generated wrapper as ``kernel(*tensors)``
with the tensors of the kernel's buffers, in order. Everything else a launch needs (the
grid, block sizes, warps) is static and lives in the entry's ``meta``, written by
``ember.inductor.codegen.triton``:

``meta = {"signature": {param: triton type}, "constexprs": {name: int},
"num_warps": int, "num_stages": int, "grid": [int, int, int]}``

The kernel runs where its tensors are: compiled by Triton's JIT on a CUDA device, in
Triton's interpreter on the CPU (CI).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from ember.runtime.compiled.triton_kernel import (
    TritonKernel,
    TritonKernelSpec,
    load_triton_kernel,
)


def spec_from_entry(entry: dict[str, Any], files: dict[str, bytes]) -> TritonKernelSpec:
    """Build the :class:`TritonKernelSpec` of an artifact's kernel entry.

    Args:
        entry: ``{"name", "lang", "entry", "source": <path in files>, "meta": {...}}``.
        files: the artifact's files.

    Raises:
        ValueError: naming what is missing or malformed.
    """
    source_path = entry.get("source")
    if not isinstance(source_path, str) or source_path not in files:
        raise ValueError(
            f"Triton kernel {entry.get('name')!r}: source file {source_path!r} is not in "
            "the compiled program"
        )
    meta = entry.get("meta")
    if not isinstance(meta, dict):
        raise ValueError(f"Triton kernel {entry.get('name')!r}: no launch metadata")
    try:
        source = files[source_path].decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"Triton kernel source {source_path!r} is not UTF-8 text") from e
    return TritonKernelSpec.from_json({
        "name": entry.get("entry", entry.get("name")),
        "source": source,
        "signature": meta.get("signature"),
        "constexprs": meta.get("constexprs", {}),
        "num_warps": meta.get("num_warps", 4),
        "num_stages": meta.get("num_stages", 1),
    })


class TritonLaunch:
    """``launch(*tensors)``: runs one generated kernel over its static grid, loading
    (and compiling) it for each device it is first called on."""

    def __init__(self, spec: TritonKernelSpec, grid: tuple[int, ...]) -> None:
        self.spec = spec
        self.grid = grid
        self._by_device: dict[torch.device, TritonKernel] = {}

    def kernel_for(self, device: torch.device) -> TritonKernel:
        """The loaded kernel for ``device`` (loaded on first use)."""
        kernel = self._by_device.get(device)
        if kernel is None:
            kernel = load_triton_kernel(self.spec, device)
            self._by_device[device] = kernel
        return kernel

    def __call__(self, *tensors: Any) -> None:
        if any(g == 0 for g in self.grid):
            return  # an empty tensor: nothing to compute
        device = next((t.device for t in tensors if isinstance(t, torch.Tensor)),
                      torch.device("cpu"))
        self.kernel_for(device).launch(self.grid, *tensors)

    def __repr__(self) -> str:
        return f"<TritonLaunch {self.spec.name} grid={self.grid}>"


def load_kernel(entry: dict[str, Any], files: dict[str, bytes]) -> Callable[..., None]:
    """The callable for one Triton kernel of a compiled artifact (see module doc).

    Raises:
        ValueError: when the entry or its metadata is malformed.
    """
    spec = spec_from_entry(entry, files)
    grid = entry["meta"].get("grid")
    if not isinstance(grid, (list, tuple)) or not all(isinstance(g, int) for g in grid):
        raise ValueError(f"Triton kernel {spec.name!r}: grid {grid!r} is not a list of ints")
    return TritonLaunch(spec, tuple(grid))
