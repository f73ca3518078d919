"""Loop coordinates back from an element offset: the inverse of a dense layout.

A pointwise kernel over ``[32, 64, 64, 64]`` that stores ``buf[x0*262144 + x1*4096 + x2*64
+ x3]`` writes every element of a dense buffer once. Another kernel that reads the same
buffer at ``off`` (a channels-last read by a per-channel reduction: ``r0*262144 + x0 +
r1*4096 + r2*64``) reads the element the first one wrote at ``x_d = off // stride_d %
size_d``. The scheduler uses this to run the pointwise work inside the reduction
(``inductor/absorb.py``); the index builders simplify each coordinate back to a plain
variable when the layouts agree, and the caller keeps a mapping only if they do.
"""

from __future__ import annotations

from collections.abc import Sequence

from ember.inductor.loop_ir.index import Add, IndexExpr, Int, Mul, Var, floordiv, mod


def dense_strides(index: IndexExpr, variables: Sequence[IndexExpr]) -> list[int] | None:
    """The constant stride of each of ``variables`` in ``index`` when ``index`` is exactly
    ``sum(stride_d * v_d)`` over the non-constant ones and those strides lay the
    variables' sizes out densely (some order of them is row-major: 1, size, size*size2,
    ...); a constant variable (``Int(0)``, a size-1 dim) gets stride 0. Else None."""
    found: dict[str, int] = {}
    for term in index.terms if isinstance(index, Add) else (index,):
        if isinstance(term, Var):
            var, stride = term, 1
        elif (isinstance(term, Mul) and len(term.factors) == 2
              and any(isinstance(f, Var) for f in term.factors)
              and any(isinstance(f, Int) for f in term.factors)):
            var = next(f for f in term.factors if isinstance(f, Var))
            stride = next(f.value for f in term.factors if isinstance(f, Int))
        else:
            return None
        if var.name in found:
            return None
        found[var.name] = stride
    strides: list[int] = []
    for v in variables:
        if isinstance(v, Var):
            if v.name not in found or not isinstance(v.size, int):
                return None
            strides.append(found.pop(v.name))
        else:
            strides.append(0)
    if found:
        return None  # a variable that is not the kernel's
    expected = 1
    for stride, size in sorted((s, v.size) for s, v in zip(strides, variables)
                               if isinstance(v, Var) and isinstance(v.size, int)):
        if stride != expected:
            return None
        expected = stride * size
    return strides


def coordinates(offset: IndexExpr, strides: Sequence[int],
                variables: Sequence[IndexExpr]) -> list[IndexExpr]:
    """Each variable's value at the element ``offset`` of the dense layout ``strides``
    (:func:`dense_strides`): ``offset // stride % size``, simplified; a constant variable
    stays itself."""
    return [mod(floordiv(offset, stride), v.size) if isinstance(v, Var) else v
            for stride, v in zip(strides, variables)]
