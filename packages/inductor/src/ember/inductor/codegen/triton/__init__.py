"""Triton code generation for CUDA tensors.

:class:`TritonBackend` is the backend ``codegen.registry.backend_for("cuda")`` returns.
Modules: :mod:`.backend` (the backend and CUDA's device policy), :mod:`.generate` (which
writer a kernel gets), :mod:`.kernel_writer` (loop IR -> Triton source),
:mod:`.kernel_code` (what generation returns), :mod:`.split_writer` (split
reductions), :mod:`.sizes` (symbolic sizes: text, hints, bounds), :mod:`.ops` (pointwise
op rules),
:mod:`.reductions` (reduction rules), :mod:`.ranges` (merging loop ranges into flat
dimensions), :mod:`.heuristics` (block sizes), :mod:`.dtypes`.
"""

from ember.inductor.codegen.triton.backend import TritonBackend
from ember.inductor.codegen.triton.generate import generate_triton_kernel
from ember.inductor.codegen.triton.kernel_code import TritonKernelCode

__all__ = ["TritonBackend", "TritonKernelCode", "generate_triton_kernel"]
