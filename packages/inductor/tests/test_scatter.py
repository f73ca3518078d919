"""Writes through run-time indexes (index_put, scatter, scatter_add, index_add): how they
are scheduled (a kernel of their own after the kernel initializing their buffer), the
C++ they become, and results against eager on sizes with many repeated indexes. The op
table (op_table.py) covers every overload and dtype on small inputs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.compile import compile_program
from ember.inductor.loop_ir import Store
from ember.inductor.lowering.checks import ERROR_BUFFER
from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.inductor.scheduler import KernelStep, schedule
from helpers import compile_and_load, trace


def _steps(fn, *xs):  # type: ignore[no-untyped-def]
    lowered = GraphLowering(trace(fn, xs)).run()
    assert not lowered.fallbacks, dict(lowered.fallbacks)
    return [s for s in schedule(lowered) if isinstance(s, KernelStep)]


def _scatter_stores(step: KernelStep) -> list[Store]:
    return [s for s in step.kernel.body if isinstance(s, Store) and s.mask is not None
            and s.buffer != ERROR_BUFFER]  # not the stores that record a failed index check


def test_scatter_is_its_own_kernel_between_init_and_readers() -> None:
    x, v = torch.randn(8, 16), torch.randn(5, 16)
    i = torch.tensor([1, 1, 7, -1, 0])

    def fn(x: torch.Tensor, v: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        y = torch.index_put(x.exp(), (i,), v * 2, accumulate=True)
        return y.relu()

    steps = _steps(fn, x, v, i)
    # exp is fused into the copy that initializes the buffer; the scatter adds into it;
    # relu reads the result after the scatter
    assert len(steps) == 3
    init, scatter, reader = steps
    assert [s.mode for s in _scatter_stores(scatter)] == ["add"]
    target = _scatter_stores(scatter)[0].buffer
    assert target in init.kernel.stored_buffers()
    assert target in reader.kernel.loaded_buffers()
    assert not _scatter_stores(init) and not _scatter_stores(reader)


def test_scattered_value_is_not_forwarded_and_the_source_is_not_mutated() -> None:
    def fn(x: torch.Tensor, v: torch.Tensor, i: torch.Tensor) -> list[torch.Tensor]:
        y = x * 2
        z = torch.index_put(y, (i,), v, accumulate=True)
        return [y + 1, z + y, z.sum(1)]

    x, v = torch.randn(6, 4), torch.randn(9, 4)
    i = torch.randint(0, 6, (9,))
    _, run = compile_and_load(trace(fn, [x, v, i]))
    for a, e in zip(run(x, v, i), fn(x, v, i)):
        torch.testing.assert_close(a, e)


def test_cpp_accumulating_scatter_runs_sequentially() -> None:
    program = trace(lambda x, v, i: torch.index_put(x, (i,), v, accumulate=True),
                    [torch.randn(300, 64), torch.randn(4000, 64), torch.randint(0, 300, (4000,))])
    compiled = compile_program(program, {"strict": True})
    source = "\n".join(f.decode() if isinstance(f, bytes) else str(f)
                       for name, f in compiled.files.items() if name.endswith(".cpp"))
    scatter = source[source.index("+="):]
    function = source[:source.index("+=")].rsplit('extern "C"', 1)[1] + scatter.split("\n}")[0]
    assert "omp" not in function, function
    assert "omp parallel" in source  # the initializing copy is still parallel


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64])
def test_repeated_indexes_accumulate_like_eager(dtype: torch.dtype) -> None:
    """Embedding-gradient shape: many rows added into few, every row repeated."""
    gen = torch.Generator().manual_seed(0)
    rows = torch.randint(0, 37, (2048,), generator=gen)
    if dtype.is_floating_point:
        g = torch.randn(2048, 24, generator=gen).to(dtype)
    else:
        g = torch.randint(-5, 5, (2048, 24), generator=gen)
    base = torch.zeros(37, 24, dtype=dtype)

    def fn(base: torch.Tensor, g: torch.Tensor, rows: torch.Tensor) -> list[torch.Tensor]:
        return [torch.index_put(base, (rows,), g, accumulate=True),
                torch.index_add(base, 0, rows, g),
                torch.scatter_add(base, 0, rows[:, None].expand(2048, 24), g)]

    _, run = compile_and_load(trace(fn, [base, g, rows]))
    tol = {torch.float16: 0.05, torch.bfloat16: 0.5}.get(dtype, 1e-4)
    for a, e in zip(run(base, g, rows), fn(base, g, rows)):
        torch.testing.assert_close(a, e, rtol=tol, atol=tol)


def test_out_of_range_index_raises_like_eager() -> None:
    # the kernel writes nothing out of range and the wrapper raises eager's IndexError
    # (test_index_bounds.py covers every op)
    def fn(x: torch.Tensor, v: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        return torch.index_put(x, (i,), v, accumulate=True)

    x, v = torch.zeros(4, 3), torch.ones(3, 3)
    _, run = compile_and_load(trace(fn, [x, v, torch.tensor([0, 1, 2])]))
    with pytest.raises(IndexError, match="out of bounds for dimension 0 with size 4"):
        run(x, v, torch.tensor([0, 9, -9]))


def test_embedding_backward_has_no_fallback(capsys) -> None:  # type: ignore[no-untyped-def]
    """The embedding gradient (an accumulating index_put) compiles to kernels."""
    import ember.frontend
    from ember.runtime.config import patch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 16), torch.nn.Linear(16, 4))
    ids = torch.randint(0, 50, (8, 12))
    with patch(logs="fallbacks"):
        fast = ember.frontend.compile(model, backend="inductor")
        fast(ids).square().sum().backward()
    assert "runs eagerly" not in capsys.readouterr().err
    compiled = model[0].weight.grad.clone()
    model.zero_grad()
    model(ids).square().sum().backward()
    torch.testing.assert_close(compiled, model[0].weight.grad)


def test_index_put_with_mask_indices_falls_back() -> None:
    def fn(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.index_put(x, [m], torch.tensor(1.0))

    lowered = GraphLowering(trace(fn, [torch.randn(4), torch.tensor([True, False] * 2)])).run()
    assert dict(lowered.fallbacks) == {"aten::index_put.default": 1}


def test_scatter_value_and_dropout_style_masks() -> None:
    def fn(x: torch.Tensor, i: torch.Tensor) -> list[torch.Tensor]:
        return [torch.scatter(x, 1, i, -1.0), F.one_hot(i[:, 0], 6) * 3]

    x = torch.randn(5, 6)
    i = torch.stack([torch.randperm(6)[:2] for _ in range(5)])
    _, run = compile_and_load(trace(fn, [x, i]))
    for a, e in zip(run(x, i), fn(x, i)):
        torch.testing.assert_close(a, e)


EDGE_CASES = {
    "scalar_values": (lambda x, i: torch.index_put(x, (i,), torch.tensor(3.0)),
                      lambda: [torch.randn(5), torch.tensor([1, 3])]),
    "transposed_self": (lambda x, i, v: torch.index_put(x.t(), (i,), v, accumulate=True),
                        lambda: [torch.randn(6, 4), torch.tensor([0, 2]), torch.randn(2, 6)]),
    "indexes_apart": (lambda x, i, j, v: torch.ops.aten.index_put(x, [i, None, j], v),
                      lambda: [torch.randn(3, 4, 5), torch.tensor([0, 2]), torch.tensor([1, 4]),
                               torch.randn(2, 4)]),
    "scatter_add_3d": (lambda x, i, s: torch.scatter_add(x, 0, i, s),
                       lambda: [torch.randn(3, 4, 2), torch.randint(0, 3, (2, 4, 2)),
                                torch.randn(5, 4, 2)]),
    "no_updates": (lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True),
                   lambda: [torch.randn(4, 3), torch.zeros(0, dtype=torch.long),
                            torch.randn(0, 3)]),
    "bool_store": (lambda x, i, v: torch.index_put(x, (i,), v),
                   lambda: [torch.zeros(4, dtype=torch.bool), torch.tensor([1, 2]),
                            torch.tensor([True, True])]),
}


@pytest.mark.parametrize("name", sorted(EDGE_CASES))
def test_edge_cases_match_eager_without_fallback(name: str) -> None:
    fn, make = EDGE_CASES[name]
    torch.manual_seed(0)
    xs = make()
    program = trace(fn, xs)
    assert not GraphLowering(program).run().fallbacks
    _, run = compile_and_load(program)
    for a, e in zip(run(*xs), [fn(*xs)]):
        torch.testing.assert_close(a, e)
