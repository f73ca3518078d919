"""The kernel-backend interface: loop-IR kernel -> source code, and the device policy.

A backend turns one :class:`~ember.inductor.loop_ir.Kernel` into a
:class:`KernelSource`. The wrapper calls every generated kernel the same way,
``name(*tensors)`` with the tensors of ``Kernel.buffers`` in order; the loader in
``ember.runtime.compiled`` builds that callable from the ``KernelSource`` stored in the
artifact, picking the launcher by ``KernelSource.lang`` (``"cpp"``: compiled with g++ and
loaded with ctypes; ``"triton"``: the Triton helper's launcher).

A backend also answers the device-specific questions of the lowering and the scheduler,
so that neither tests device types nor imports a code generator:

================================  ============================================  =========
question                          asked by                                      default
================================  ============================================  =========
``can_fuse(group, fused)``        the scheduler, before a node joins a group    True
``supports_atomic_add(dtype)``    the lowering of accumulating scatters         True
``checks_integer_division``       the lowering of integer ``//``, ``%``, fmod   True
``pads_unaligned_matmuls``        the ``pad_unaligned_matmul`` lowering pass    False
``max_scan_length``               the ``cumsum`` lowering                       None
``matmul_templates``              the ``matmul_template`` lowering pass         False
``matmul_template(problem)``      the same, per matmul: template or extern      None
``aligned_buffers(kernel)``       the wrapper, at each launch: 16-byte bases    ()
================================  ============================================  =========

Which backend serves a device type is :func:`~ember.inductor.codegen.registry.backend_for`'s
business (``codegen/registry.py``).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field

import torch
from ember.inductor.loop_ir import Kernel, Load, MatmulTemplate, Size, Store


@dataclass(frozen=True)
class KernelSource:
    """Generated code for one kernel.

    ``lang``: ``"cpp"`` or ``"triton"``; ``name``: the wrapper's name for the kernel;
    ``source``: the code; ``entry``: the symbol / function to call in it; ``meta``:
    JSON-able launch data the runtime launcher needs (the Triton grid, block sizes,
    argument dtypes, ...).
    """

    lang: str
    name: str
    source: str
    entry: str
    meta: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class MatmulProblem:
    """One matmul the lowering may write as a template (``lowering/matmul_template.py``):
    ``op`` (``mm``, ``addmm``, ``bmm``, ``baddbmm``), sizes (``batch`` None unless
    batched; symbolic sizes as sympy expressions), the operands' dtype, their strides
    (None: computed by an inlined producer), whether there is work to fuse (a bias, an
    inlined producer, pointwise consumers, the padding of an unaligned extern),
    whether float32 may use TF32, whether the only work to fuse is an epilogue (a
    bias, pointwise consumers: no inlined producer, no padding), and whether a reduction
    reads what the pointwise consumers compute (``reduced``: a residual add before a
    norm; with the extern, the reduction's kernel would take those consumers in)."""

    op: str
    batch: Size | None
    m: Size
    n: Size
    k: Size
    dtype: torch.dtype
    a_strides: tuple[Size, ...] | None
    b_strides: tuple[Size, ...] | None
    fuses: bool
    allow_tf32: bool
    epilogue_only: bool = False
    reduced: bool = False


class KernelBackend(abc.ABC):
    """Generates kernels for one device type and answers its device policy."""

    #: the torch device type this backend serves ("cpu", "cuda")
    device_type: str = ""

    #: whether eager raises on an integer division by zero on this backend's device (CPU:
    #: ``RuntimeError("ZeroDivisionError")``; CUDA: no, the GPU's quotient): the lowering
    #: then records a run-time check (``lowering/checks.py``)
    checks_integer_division: bool = True

    #: whether a large matmul whose result rows are not 16-byte multiples runs on a
    #: zero-padded right operand (``lowering/matmul_padding.py``; cuBLAS falls back to
    #: unaligned kernels otherwise)
    pads_unaligned_matmuls: bool = False

    #: the longest dim a ``cumsum`` runs along as a masked sum, quadratic in the dim
    #: (``lowering/scans.py``); None: eager's scan (an extern call)
    max_scan_length: int | None = None

    #: whether a kernel's function is named after its graph too (``bwd_kernel3``,
    #: ``compile.entry_name``): GPU profilers list kernels by function name, and a
    #: training step's forward and backward both have a ``kernel3``
    entries_named_by_graph: bool = False

    #: whether ``mm``/``addmm``/``bmm``/``baddbmm`` may become matmul template kernels
    #: (``lowering/matmul_template.py``) that fuse their producers and consumers; each
    #: matmul then asks :meth:`matmul_template`
    matmul_templates: bool = False

    #: whether a kernel may hold reductions across its outer ranges (``Reduce.across``:
    #: a norm's weight gradient summed inside its row kernel, ``inductor/mixed.py``);
    #: :meth:`can_fuse` then says which such kernels
    across_reductions: bool = False
    #: an experiment, off: every column reduction's group run over its rows, its sums
    #: across them (``mixed.as_rows``), where :meth:`can_fuse` takes the kernel
    column_groups_as_rows: bool = False

    @abc.abstractmethod
    def generate(self, kernel: Kernel) -> KernelSource:
        """Source code for ``kernel``.

        Raises:
            NotImplementedError: naming the statement or op the backend cannot express
            (the caller then runs the kernel's nodes as extern calls).
        """

    def bundle(self, sources: list[KernelSource]) -> list[KernelSource]:
        """Optionally merge the kernels of one graph into fewer compilation units
        (the C++ backend emits one file per graph, so g++ runs once). Default: as is."""
        return sources

    #: horizontal fusion limit: a node that shares no buffer with a kernel joins it only
    #: while the kernel touches at most this many buffers (None: no limit). One CPU
    #: thread streaming dozens of arrays at once (an optimizer step's parameters fused
    #: side by side) defeats the hardware prefetchers.
    horizontal_buffer_limit: int | None = None

    #: the most buffers a kernel grows to by fusion, of any kind (None: no limit): what
    #: a kernel call can take (C++: ctypes passes at most 1024 arguments; Triton: see
    #: its backend). Past it the scheduler starts another kernel.
    max_kernel_buffers: int | None = None

    #: the most loop-IR statements a kernel grows to by fusion (None: no limit): a
    #: compiler whose time grows faster than the kernel (Triton: see its backend) gets
    #: two kernels, at the cost of storing and re-reading the values that cross.
    max_kernel_statements: int | None = None

    def can_fuse(self, group: Kernel, fused: Kernel) -> bool:
        """Whether the scheduler may grow the kernel ``group`` into ``fused`` (the same
        loop ranges, the body with one more node's work), as far as this backend is
        concerned; the scheduler has already checked that the result is correct.
        Default: unless ``fused`` touches more than :attr:`max_kernel_buffers` buffers
        (an upper bound: stores the scheduler drops later count) or has more than
        :attr:`max_kernel_statements` statements. A backend that overrides this calls
        it first."""
        statements = self.max_kernel_statements
        if statements is not None and len(fused.body) > statements:
            return False
        limit = self.max_kernel_buffers
        if limit is None:
            return True
        return len({s.buffer for s in fused.body if isinstance(s, (Load, Store))}) <= limit

    def can_absorb(self, fused: Kernel) -> bool:
        """Whether a reduction may take in the pointwise kernel producing what it reads
        (``inductor/absorb.py``), ``fused`` being the reduction with that work inside;
        asked after :meth:`can_fuse`. Default: yes. Measured with Triton on an H100
        (training, bf16, one process): the zoo's resnet 23.51 against 23.70 ms without
        (``tools/gpu/ab_matmul_choice.py resnet bfloat16 full ember,ember_no_absorb train``)."""
        return True

    def supports_atomic_add(self, dtype: torch.dtype) -> bool:
        """Whether kernels can add values of ``dtype`` into a buffer at run-time indexes
        that may repeat (a ``Store`` with ``mode="add"``). Default: yes."""
        return True

    def matmul_template(self, problem: MatmulProblem) -> MatmulTemplate | None:
        """The template kernel to write ``problem`` as, or None to call the extern
        (ATen) matmul. Asked only when :attr:`matmul_templates`. Default: None."""
        return None

    def concurrent_parts(self, kernel: Kernel) -> list[frozenset[str]] | None:
        """The buffers of each part of ``kernel`` that runs in programs of its own,
        concurrently with the other parts (Triton's combo kernels), or None when each
        program runs the whole body in order. A buffer may then take the memory of one
        it reads (an in-place write) only within one part: across parts nothing orders
        the read before the write. Default: None."""
        return None

    def aligned_buffers(self, kernel: Kernel) -> tuple[str, ...]:
        """The buffers of ``kernel`` whose base address must be a multiple of 16 bytes
        (read through TMA descriptors): the wrapper tests each at every launch and
        passes an aligned copy of one that is not. Default: none."""
        return ()
