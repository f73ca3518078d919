"""The loop-level IR: what the lowering produces and the codegens consume.

How a backend plugs in: subclass ``ember.inductor.codegen.backend.KernelBackend``
(``generate``, and the device-policy answers ``can_fuse``, ``supports_atomic_add``,
``checks_integer_division``) and name it in ``codegen/registry.py``'s
``BUILTIN_BACKENDS`` (or ``register_backend(device_type, factory)``). ``generate``
returns a ``KernelSource(lang=..., name=kernel.name, source=..., entry=..., meta={...})``;
it implements every op of :data:`LOOP_OPS` (``tests/test_loop_ir_ops.py`` checks it).
At run time the artifact loader (``ember.runtime.compiled``) imports the module
``ember.runtime.compiled.<lang>_launcher`` and calls its
``load_kernel(spec: dict, files: dict[str, bytes]) -> callable(*tensors)``, where
``spec`` is ``{"name", "lang", "entry", "source": <file path in program.files>,
"meta": KernelSource.meta}``.

Model
-----
- :mod:`.index` — index expressions over named loop ranges: ``Var(name, size)``, ``Int``,
  ``Sym(expr)`` (a symbolic size term), ``Add``, ``Mul``, ``FloorDiv``, ``Mod``,
  ``Indirect(value)``; simplifying builders ``add/mul/floordiv/mod``; :func:`render`
  prints one for C or Python, :func:`render_size` a size.
- :mod:`.symbolic_index` — the sympy reasoning behind symbolic divisors and bounds;
  :mod:`.size_text` — sizes as C++/Python text.

Symbolic sizes: a ``Var.size`` (and every size in the loop IR: buffer sizes and strides,
``Kernel.numel``) is ``int | sympy.Expr`` over the graph's size symbols
(``sympy.Symbol(name, integer=True)``, as ``ember.runtime.ir.symbolic.symbol(name)``);
symbolic terms inside an index are :class:`Sym` leaves. A kernel takes the symbols it uses
as ``int64`` scalars after its buffers, in ``Kernel.size_args`` order (sorted names);
codegens print a symbolic term as its expression over those arguments (:func:`render`,
:func:`render_size`: ``//`` is floor division of non-negative ints, ``%`` C's ``%`` of
non-negative ints).
- :mod:`.body` — SSA statements: ``Load`` (optionally masked), ``Literal``,
  ``IndexValue``, ``Compute`` (an op of :data:`POINTWISE_OPS`), ``Reduce`` (an op of
  :data:`REDUCTION_OPS` over all reduction ranges), ``Store``; the dtype rules.
- :mod:`.ops` — the op table (:data:`~.ops.LOOP_OPS`: name, arity, kind, result, costly,
  what it computes); ``POINTWISE_OPS``, ``REDUCTION_OPS``, ``COSTLY_OPS`` derive from it.
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

from ember.inductor.loop_ir import symbolic_index  # noqa: F401  (registers symbolic division)
from ember.inductor.loop_ir.body import (
    BOOL_RESULT_OPS,
    COSTLY_OPS,
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
    Size,
    Sym,
    Var,
    add,
    canonical,
    floordiv,
    free_vars,
    is_affine,
    mod,
    mul,
    render,
    render_size,
    size_symbols,
    substitute,
)
from ember.inductor.loop_ir.kernel import (
    Buffer,
    Kernel,
    MatmulTemplate,
    Phase,
    reduction_phases,
)
from ember.inductor.loop_ir.ops import LOOP_OPS, LoopOp
from ember.inductor.loop_ir.printer import dtype_name, format_kernel, format_stmt

__all__ = [
    "BOOL_RESULT_OPS", "COSTLY_OPS", "LOOP_OPS", "POINTWISE_OPS", "REDUCTION_OPS", "Add", "Buffer",
    "Compute", "FloorDiv", "IndexExpr", "IndexValue", "Indirect", "Int", "Kernel", "Literal",
    "Load", "LoopOp", "MatmulTemplate", "Mod", "Mul", "Phase", "Reduce", "Size", "Stmt", "Store", "Sym",
    "ValueStmt", "Var", "add", "canonical", "dtype_name", "floordiv", "format_kernel",
    "format_stmt", "free_vars", "is_affine", "mod", "mul", "reduction_phases", "render",
    "render_size", "size_symbols", "stmt_inputs", "substitute",
]
