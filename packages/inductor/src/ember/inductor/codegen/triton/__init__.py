"""Triton code generation for CUDA tensors.

Importing this package registers :class:`TritonBackend` for the ``cuda`` device type.
Modules: :mod:`.kernel_writer` (loop IR -> Triton source), :mod:`.ops` (pointwise op
rules), :mod:`.reductions` (reduction rules), :mod:`.ranges` (merging loop ranges into
flat dimensions), :mod:`.heuristics` (block sizes), :mod:`.dtypes`.
"""

from ember.inductor.codegen.backend import register_backend
from ember.inductor.codegen.triton.backend import TritonBackend
from ember.inductor.codegen.triton.kernel_writer import TritonKernelCode, generate_triton_kernel

register_backend("cuda", TritonBackend)

__all__ = ["TritonBackend", "TritonKernelCode", "generate_triton_kernel"]
