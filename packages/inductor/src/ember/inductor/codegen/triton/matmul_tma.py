"""When the persistent TMA matmul variant applies, as a table of rules.

The variant (:mod:`.matmul_tma_template`) loads its A and B tiles with Hopper's Tensor
Memory Accelerator through device-side tensor descriptors (``tl.make_tensor_descriptor``)
and runs one program per SM over the output tiles. A matmul gets it (in default mode
the heuristic's first choice; under max-autotune among the candidates) only when every
rule below passes, checked in order at the sizes' hints; the first that fails is the
reason ``EMBER_LOGS=autotune`` prints:

=================  =====================================================================
rule               passes when
=================  =====================================================================
graph              the graph is on CUDA (a CPU graph's Triton kernels, a test backend's,
                   run in Triton's interpreter)
device             the current CUDA device is sm_90 (Hopper: H100, H200)
triton             Triton has ``tl.make_tensor_descriptor`` and ``triton.set_allocator``
dtype              float16/bfloat16, or float32 with TF32 allowed
batched            not ``bmm``/``baddbmm`` (the descriptors are 2-d)
operand A / B      row-major or a transposed view, whose other stride is a static
                   multiple of 16 bytes (K, N multiples of 8 16-bit elements); an
                   operand computed by a producer passes here (the lowering may still
                   store it: a GELU before the MLP's second matmul is)
=================  =====================================================================

The template writer checks the operands again on the kernel itself (TMA copies memory
as it is, so an operand whose producer was fused into the loads as a prologue does not
suit it; nor does an offset view); a kernel that fails there is written as the pointer
template with the same tiles, logged and counted (``matmul TMA fallbacks``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import sympy
import torch
from ember.inductor.codegen.backend import MatmulProblem
from ember.inductor.loop_ir import Size

#: the compute capability the variant is written for (Hopper)
HOPPER = (9, 0)
#: TMA's alignment of a row stride (and of the base address), in bytes
ALIGN_BYTES = 16
#: programs of a persistent launch when no CUDA device is there to ask (the H200's SMs)
DEFAULT_SMS = 132

_UNSET = object()
_assumed: object = _UNSET
_assumed_sms: int | None = None


class TmaUnsuitable(NotImplementedError):
    """The kernel is not of the TMA variant's form; the message says why."""


@contextlib.contextmanager
def assume_capability(capability: tuple[int, int] | None,
                      sms: int | None = None) -> Iterator[None]:
    """Within the block the rules see a device of ``capability`` (None: no CUDA device)
    with ``sms`` SMs (None: :data:`DEFAULT_SMS`) instead of asking CUDA: tests on a
    machine without a GPU (the choice table; a persistent launch of fewer programs than
    tiles)."""
    global _assumed, _assumed_sms
    saved = _assumed, _assumed_sms
    _assumed, _assumed_sms = capability, sms
    try:
        yield
    finally:
        _assumed, _assumed_sms = saved


def device_capability() -> tuple[int, int] | None:
    """The current CUDA device's compute capability, None without one."""
    if _assumed is not _UNSET:
        return _assumed  # type: ignore[return-value]
    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability()
    return (major, minor)


def sm_count() -> int:
    """The current CUDA device's SMs (:data:`DEFAULT_SMS` without one): the persistent
    launch's programs."""
    if _assumed is _UNSET and torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(torch.cuda.current_device())
                   .multi_processor_count)
    return _assumed_sms or DEFAULT_SMS


def stride_reason(stride: Size, itemsize: int) -> str | None:
    """Why a row stride (elements) cannot be a descriptor's, None when it can."""
    if not isinstance(stride, int):
        if sympy.Mod(sympy.sympify(stride) * itemsize, ALIGN_BYTES) == 0:
            return None
        return f"row stride {stride} is not provably a multiple of {ALIGN_BYTES} bytes"
    if stride == 0:
        return "row stride 0 (a broadcast)"
    if stride * itemsize % ALIGN_BYTES:
        return (f"row stride {stride} x {itemsize} bytes is not a multiple of "
                f"{ALIGN_BYTES} bytes")
    return None


def operand_reason(name: str, strides: tuple[Size, ...] | None, itemsize: int
                   ) -> str | None:
    """Why operand ``name`` (2-d strides; None: computed, which the writer decides on)
    cannot be TMA-loaded."""
    if strides is None:
        return None
    rows, cols = strides
    if cols == 1:
        reason = stride_reason(rows, itemsize)
    elif rows == 1:
        reason = stride_reason(cols, itemsize)
    else:
        reason = f"strides {tuple(strides)} have no unit stride"
    return None if reason is None else f"operand {name}: {reason}"


def _device(problem: MatmulProblem) -> str | None:
    capability = device_capability()
    if capability == HOPPER:
        return None
    found = "no CUDA device" if capability is None else f"sm_{capability[0]}{capability[1]}"
    return f"the device is not sm_90 (Hopper): {found}"


def _triton(problem: MatmulProblem) -> str | None:
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return "Triton is not installed"
    if not (hasattr(tl, "make_tensor_descriptor") and hasattr(triton, "set_allocator")):
        return f"Triton {triton.__version__} has no tl.make_tensor_descriptor"
    return None


def _dtype(problem: MatmulProblem) -> str | None:
    if problem.dtype in (torch.float16, torch.bfloat16):
        return None
    if problem.dtype == torch.float32 and problem.allow_tf32:
        return None
    return f"{problem.dtype} without TF32 allowed"


def _batched(problem: MatmulProblem) -> str | None:
    return None if problem.batch is None else f"{problem.op} is batched"


def _operand_a(problem: MatmulProblem) -> str | None:
    return operand_reason("A", problem.a_strides, problem.dtype.itemsize)


def _operand_b(problem: MatmulProblem) -> str | None:
    return operand_reason("B", problem.b_strides, problem.dtype.itemsize)


#: the rules (module doc), in the order they are checked
RULES: tuple[tuple[str, Callable[[MatmulProblem], str | None]], ...] = (
    ("device", _device),
    ("triton", _triton),
    ("dtype", _dtype),
    ("batched", _batched),
    ("operand A", _operand_a),
    ("operand B", _operand_b),
)


def tma_reason(problem: MatmulProblem, device_type: str = "cuda") -> str | None:
    """Why the TMA variant does not apply to ``problem`` of a graph on ``device_type``
    (the first failing rule), None when it does."""
    if device_type != "cuda":
        return (f"a {device_type} graph (its Triton kernels run in Triton's interpreter, "
                "which not every Triton runs descriptors in)")
    for _, rule in RULES:
        reason = rule(problem)
        if reason is not None:
            return reason
    return None


__all__ = [
    "ALIGN_BYTES",
    "DEFAULT_SMS",
    "HOPPER",
    "RULES",
    "TmaUnsuitable",
    "assume_capability",
    "device_capability",
    "operand_reason",
    "sm_count",
    "stride_reason",
    "tma_reason",
]
