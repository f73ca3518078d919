"""The loop-level IR: what the lowering produces and the codegens consume.

Stability note for codegen authors (C++ in ``codegen/cpp``, Triton in ``codegen/triton``):
this IR is stable; additions are announced here, breaking changes too.

    Changes since 04:50 UTC (all additions / clarifications, nothing renamed):
    - reduction_phases: a Store whose index uses a reduction variable is inner work
      (stored inside the pass loop) even when its value is an outer value (horizontal
      fusion puts pointwise work over the full row space into reduction kernels).
    - body rules: ``where`` (pure selection) may take float16/bfloat16 operands.
    - A ``Reduce`` may appear in a kernel without reduction ranges (a reduction over
      size-1 / no dims): it reduces one element (argmax/argmin give 0).
    - Pointwise ops ``rand(key, offset)`` / ``randn(key, offset)``: int64 arguments, a
      float32 result (an exception to "the dtype of its arguments"); Philox 4x32-10 with
      Triton's ``tl.rand``/``tl.randn`` conventions (see :mod:`.body`). Codegens must
      give ``rand`` bit-identical values (C++: ``ember_rand`` in the prelude).

How a backend plugs in: subclass ``ember.inductor.codegen.backend.KernelBackend`` and call
``register_backend("cuda", TritonBackend)`` when ``ember.inductor.codegen.triton`` is
imported (``codegen/__init__.py`` imports it if present). ``generate`` returns a
``KernelSource(lang="triton", name=kernel.name, source=..., entry=..., meta={...})``.
At run time the artifact loader (``ember.runtime.compiled``) imports the module
``ember.runtime.compiled.<lang>_launcher`` and calls its
``load_kernel(spec: dict, files: dict[str, bytes]) -> callable(*tensors)``, where
``spec`` is ``{"name", "lang", "entry", "source": <file path in program.files>,
"meta": KernelSource.meta}``. So the Triton launcher lives in
``ember/runtime/compiled/triton_launcher.py``.

Model
-----
- :mod:`.index` — index expressions over named loop ranges: ``Var(name, size)``, ``Int``,
  ``Add``, ``Mul``, ``FloorDiv``, ``Mod``, ``Indirect(value)``; simplifying builders
  ``add/mul/floordiv/mod``; :func:`render` prints one for C or Python.
- :mod:`.body` — SSA statements: ``Load`` (optionally masked), ``Literal``,
  ``IndexValue``, ``Compute`` (an op of :data:`POINTWISE_OPS`), ``Reduce`` (an op of
  :data:`REDUCTION_OPS` over all reduction ranges), ``Store``; the dtype rules.
- :mod:`.kernel` — ``Buffer`` (a tensor argument), ``Kernel`` (outer ranges, reduction
  ranges, body, buffers = a fused group), and :func:`reduction_phases` which splits a
  reduction kernel into sequential passes over its reduction ranges.
- :mod:`.printer` — ``format_kernel`` text form.

Example, softmax over the last dim of a [4, 8] float32 tensor ``arg0`` into ``buf0``::

    kernel k0(arg0: float32[4, 8], buf0: float32[4, 8]) over [x0<4] reduce [r0<8]:
        v0: float32 = load arg0[(x0*8 + r0)]
        v1: float32 = reduce_max(v0)
        v2: float32 = sub(v0, v1)
        v3: float32 = exp(v2)
        v4: float32 = reduce_sum(v3)
        v5: float32 = truediv(v3, v4)
        store buf0[(x0*8 + r0)] = v5

A kernel reads and writes only its ``buffers``; the wrapper allocates them and passes
them in ``Kernel.buffers`` order.
"""

from ember.inductor.loop_ir.body import (
    COSTLY_OPS,
    BOOL_RESULT_OPS,
    POINTWISE_OPS,
    REDUCTION_OPS,
    Compute,
    IndexValue,
    Literal,
    Load,
    Reduce,
    Stmt,
    Store,
    ValueStmt,
    stmt_inputs,
)
from ember.inductor.loop_ir.index import (
    Add,
    FloorDiv,
    IndexExpr,
    Indirect,
    Int,
    Mod,
    Mul,
    Var,
    add,
    canonical,
    floordiv,
    free_vars,
    mod,
    mul,
    render,
    substitute,
)
from ember.inductor.loop_ir.kernel import Buffer, Kernel, Phase, reduction_phases
from ember.inductor.loop_ir.printer import dtype_name, format_kernel, format_stmt

__all__ = [
    "BOOL_RESULT_OPS", "COSTLY_OPS", "POINTWISE_OPS", "REDUCTION_OPS", "Add", "Buffer", "Compute",
    "FloorDiv", "IndexExpr", "IndexValue", "Indirect", "Int", "Kernel", "Literal", "Load",
    "Mod", "Mul", "Phase", "Reduce", "Stmt", "Store", "ValueStmt", "Var", "add", "canonical",
    "dtype_name", "floordiv", "format_kernel", "format_stmt", "free_vars", "mod", "mul",
    "reduction_phases", "render", "stmt_inputs", "substitute",
]
