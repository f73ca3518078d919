"""Device policy behind the kernel backend: the registry finds a backend by device type;
the lowering asks it about atomic adds and integer-division checks, the scheduler asks it
whether a fusion may happen (``KernelBackend.can_fuse``); neither tests a device type
nor imports a code generator. Loop nodes compute their reads and writes when made."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.buffers import PointwiseBuffer, ReductionBuffer
from ember.inductor.codegen.cpp.backend import CppBackend
from ember.inductor.codegen.registry import backend_for
from ember.inductor.codegen.triton.backend import TritonBackend
from ember.inductor.codegen.triton.testing import cpu_backend
from ember.inductor.compile import compile_program
from ember.inductor.loop_ir import (
    Buffer,
    Compute,
    IndexExpr,
    Kernel,
    Load,
    Reduce,
    Stmt,
    Store,
    Var,
    add,
    mul,
)
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.inductor.scheduler import KernelStep, schedule
from ember.runtime.ir import Program
from helpers import trace

SRC = Path(__file__).parents[1] / "src" / "ember" / "inductor"


def _compile(program: Program) -> Program:
    return compile_program(program, {"strict": True, "precompile": False})


def _files_text(program: Program) -> str:
    return "\n".join(v.decode() if isinstance(v, bytes) else str(v)
                     for v in program.files.values())


def test_registry_finds_the_builtin_backends_and_names_a_missing_one() -> None:
    assert type(backend_for("cpu")) is CppBackend
    assert type(backend_for("cuda")) is TritonBackend
    with pytest.raises(RuntimeError, match="no Ember kernel backend for device type 'mps'"):
        backend_for("mps")


def test_atomic_add_dtypes_are_the_backends_answer() -> None:
    cpp, triton = CppBackend(), TritonBackend()
    for dtype in (torch.int8, torch.int16, torch.uint8, torch.float32, torch.int64):
        assert cpp.supports_atomic_add(dtype)
    assert triton.supports_atomic_add(torch.float32) and triton.supports_atomic_add(torch.int64)
    assert not triton.supports_atomic_add(torch.int8)
    assert not triton.supports_atomic_add(torch.int16)
    assert cpp.checks_integer_division and not triton.checks_integer_division


def _accumulate(x: torch.Tensor, v: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    return torch.index_put(x, (i,), v, accumulate=True)


def test_lowering_asks_the_backend_about_atomic_adds() -> None:
    class NoAtomics(CppBackend):
        def supports_atomic_add(self, dtype: torch.dtype) -> bool:
            return dtype != torch.int32

    inputs = [torch.zeros(6, dtype=torch.int32), torch.ones(3, dtype=torch.int32),
              torch.tensor([0, 2, 2])]
    program = trace(_accumulate, inputs)
    assert _compile(program).metadata["fallbacks"] == {}
    with cpu_backend(NoAtomics):
        fallbacks = _compile(program).metadata["fallbacks"]
    assert fallbacks == {"aten::index_put.default": 1}


def test_lowering_asks_the_backend_about_integer_division_checks() -> None:
    class NoDivisionChecks(CppBackend):
        checks_integer_division = False

    program = trace(lambda a, b: a // b, [torch.arange(1, 7), torch.arange(6, 0, -1)])
    assert "ZeroDivisionError" in _files_text(_compile(program))
    with cpu_backend(NoDivisionChecks):
        assert "ZeroDivisionError" not in _files_text(_compile(program))


def _softmax(x: torch.Tensor) -> torch.Tensor:
    m = x.amax(-1, keepdim=True)
    e = (x - m).exp()
    return e / e.sum(-1, keepdim=True)


def test_scheduler_asks_the_backend_before_each_fusion() -> None:
    asked: list[tuple[int, int]] = []

    class NeverFuse(CppBackend):
        def can_fuse(self, group: Kernel, fused: Kernel) -> bool:
            asked.append((len(group.body), len(fused.body)))
            assert len(fused.body) > len(group.body)
            return False

    lowered = GraphLowering(trace(_softmax, [torch.randn(4, 8)])).run()
    fused = [s for s in schedule(lowered, CppBackend()) if isinstance(s, KernelStep)]
    alone = [s for s in schedule(lowered, NeverFuse()) if isinstance(s, KernelStep)]
    assert len(fused) == 1 and len(alone) == 3 and asked


def _sum_kernel(extra_pass: bool) -> Kernel:
    """``x.sum()`` of a [1, 65536] row (Triton splits it), optionally with a second pass
    (the sum of ``x - sum``) that cannot be split."""
    x, r = Var("x0", 1), Var("r0", 65536)
    body: list[Stmt] = [Load("v0", "a", r, torch.float32),
                        Reduce("v1", "sum", "v0", torch.float32),
                        Store("out", x, "v1")]
    if extra_pass:
        body += [Compute("v2", "sub", ("v0", "v1"), torch.float32),
                 Reduce("v3", "sum", "v2", torch.float32),
                 Store("out2", x, "v3")]
    buffers = (Buffer("a", torch.float32, (65536,), (1,)),
               Buffer("out", torch.float32, (1,), (1,)),
               Buffer("out2", torch.float32, (1,), (1,)))
    return Kernel("k", (), (r,), tuple(body), buffers)


def test_triton_keeps_a_split_reduction_splittable() -> None:
    one_pass, two_passes = _sum_kernel(False), _sum_kernel(True)
    assert not TritonBackend().can_fuse(one_pass, two_passes)
    assert TritonBackend().can_fuse(two_passes, two_passes)  # was not splittable anyway
    assert CppBackend().can_fuse(one_pass, two_passes)


def _module_sources(*paths: str) -> dict[str, ast.Module]:
    return {p: ast.parse((SRC / p).read_text(encoding="utf-8")) for p in paths}


def test_scheduling_and_lowering_name_no_device_and_no_code_generator() -> None:
    """The device policy moved behind the backend: these modules test no device type
    (string constants "cpu"/"cuda") and import no backend's code generator."""
    trees = _module_sources("scheduler.py", "lowering/pointwise.py",
                            "lowering/indexed_writes.py", "lowering/matmul_padding.py")
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant):
                assert node.value not in ("cpu", "cuda"), f"{path}:{node.lineno}"
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith(("ember.inductor.codegen.triton",
                                                   "ember.inductor.codegen.cpp")), \
                    f"{path}:{node.lineno} imports {node.module}"


def test_loop_nodes_compute_reads_and_writes_once_when_made() -> None:
    calls: list[tuple[IndexExpr, ...]] = []

    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        calls.append(index)
        return b.load("in0", add(mul(index[0], 8), index[1]), torch.float32)

    node = PointwiseBuffer("buf0", torch.float32, (4, 8), fn)
    assert (node.reads, node.writes, len(calls)) == (("in0",), ("buf0",), 1)
    red = ReductionBuffer("buf1", torch.float32, "sum", (4, 8), (1,), False, fn)
    assert (red.reads, red.writes, len(calls)) == (("in0",), ("buf1",), 2)


def test_matmul_padding_is_the_backends_policy() -> None:
    from ember.inductor.codegen.registry import backend_for

    assert backend_for("cuda").pads_unaligned_matmuls
    assert not backend_for("cpu").pads_unaligned_matmuls
