"""The loop-IR op table (``loop_ir/ops.py``) against the backends: each backend has a rule
for every op of the table and for nothing else, and generates a kernel for each op; an op
outside the table is refused by name."""

from __future__ import annotations

import pytest
import torch
from ember.inductor.codegen.cpp import ops as cpp_ops
from ember.inductor.codegen.cpp.backend import CppBackend
from ember.inductor.codegen.triton import ops as triton_ops
from ember.inductor.codegen.triton import reductions as triton_reductions
from ember.inductor.codegen.triton.backend import TritonBackend
from ember.inductor.codegen.backend import KernelBackend
from ember.inductor.loop_ir import (
    BOOL_RESULT_OPS,
    COSTLY_OPS,
    LOOP_OPS,
    POINTWISE_OPS,
    REDUCTION_OPS,
    Buffer,
    Compute,
    Kernel,
    Load,
    Reduce,
    Stmt,
    Store,
    Var,
    add,
    mul,
)
from ember.inductor.loop_ir.ops import KINDS, RESULTS

BACKENDS = {"cpp": CppBackend, "triton": TritonBackend}
X, R = Var("x0", 4), Var("r0", 8)


def test_table_rows_are_well_formed() -> None:
    for name, op in LOOP_OPS.items():
        assert op.name == name and op.kind in KINDS and op.result in RESULTS, op
        assert op.doc and op.arity >= 1, op
    assert set(POINTWISE_OPS) | set(REDUCTION_OPS) == set(LOOP_OPS)
    assert BOOL_RESULT_OPS <= set(POINTWISE_OPS) and COSTLY_OPS <= set(POINTWISE_OPS)
    # the ops the lowering relies on being costly (stored, cached per row)
    assert {"exp", "log", "tanh", "sigmoid", "pow"} <= COSTLY_OPS
    assert not {"add", "sqrt", "where", "cast"} & COSTLY_OPS


def test_cpp_rules_are_exactly_the_table() -> None:
    assert set(cpp_ops.RULES) == set(POINTWISE_OPS)
    assert set(cpp_ops.REDUCTION_INITS) == set(REDUCTION_OPS)


def test_triton_rules_are_exactly_the_table() -> None:
    assert set(triton_ops.RULES) == set(POINTWISE_OPS)
    assert set(triton_reductions.COMBINE_HELPERS) == set(REDUCTION_OPS)


def _operand_dtype(op: str) -> torch.dtype:
    family = LOOP_OPS[op].family
    if family == "bitwise" or LOOP_OPS[op].result == "float32":
        return torch.int64
    if family == "logical":
        return torch.bool
    return torch.float32


def _result_dtype(op: str, operand: torch.dtype) -> torch.dtype:
    result = LOOP_OPS[op].result
    return {"bool": torch.bool, "float32": torch.float32, "int64": torch.int64,
            "cast": torch.float64}.get(result, operand)


def pointwise_kernel(op: str) -> Kernel:
    """``out[x] = op(a[x], b[x], ...)`` (``where``: a bool condition first)."""
    operand = _operand_dtype(op)
    arity = POINTWISE_OPS[op]
    body: list[Stmt] = []
    buffers = []
    args = []
    for k in range(arity):
        dtype = torch.bool if op == "where" and k == 0 else operand
        buffers.append(Buffer(f"in{k}", dtype, (4,), (1,)))
        body.append(Load(f"v{k}", f"in{k}", X, dtype))
        args.append(f"v{k}")
    out = _result_dtype(op, operand)
    body += [Compute("y", op, tuple(args), out), Store("out", X, "y")]
    buffers.append(Buffer("out", out, (4,), (1,)))
    return Kernel(f"k_{op}", (X,), (), tuple(body), tuple(buffers))


def reduction_kernel(op: str) -> Kernel:
    """``out[x] = op over r of a[x, r]``."""
    operand = torch.bool if op in ("any", "all") else torch.float32
    out = _result_dtype(op, operand)
    body: tuple[Stmt, ...] = (
        Load("v0", "in0", add(mul(X, 8), R), operand),
        Reduce("y", op, "v0", out),
        Store("out", X, "y"),
    )
    buffers = (Buffer("in0", operand, (4, 8), (8, 1)), Buffer("out", out, (4,), (1,)))
    return Kernel(f"k_{op}", (X,), (R,), body, buffers)


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("op", list(POINTWISE_OPS))
def test_backend_generates_every_pointwise_op(backend: str, op: str) -> None:
    source = BACKENDS[backend]().generate(pointwise_kernel(op)).source
    assert f"k_{op}" in source


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("op", list(REDUCTION_OPS))
def test_backend_generates_every_reduction_op(backend: str, op: str) -> None:
    source = BACKENDS[backend]().generate(reduction_kernel(op)).source
    assert f"k_{op}" in source


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_backend_refuses_an_op_outside_the_table(backend: str) -> None:
    chosen: KernelBackend = BACKENDS[backend]()
    kernel = pointwise_kernel("neg")
    body = tuple(Compute("y", "frobnicate", ("v0",), torch.float32) if isinstance(s, Compute)
                 else s for s in kernel.body)
    with pytest.raises(NotImplementedError, match="frobnicate"):
        chosen.generate(Kernel(kernel.name, kernel.ranges, (), body, kernel.buffers))
    kernel = reduction_kernel("sum")
    body = tuple(Reduce("y", "median", "v0", torch.float32) if isinstance(s, Reduce) else s
                 for s in kernel.body)
    with pytest.raises(NotImplementedError, match="median"):
        chosen.generate(Kernel(kernel.name, kernel.ranges, kernel.reduction_ranges, body,
                               kernel.buffers))
