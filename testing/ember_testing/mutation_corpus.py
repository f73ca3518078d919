"""The mutation and aliasing corpus: small functions that write into their inputs, into
views of them or into intermediates, or return views; and :func:`check_against_eager`,
which compares a compiled function with eager on them. The aot tests run it through the
aot stage alone; ``integration_tests`` through ``ember.frontend.compile``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ember_testing.compare import prefixed, shares_memory


def add_on_input(x: torch.Tensor) -> torch.Tensor:
    x.add_(1)
    return x * 2


def mul_broadcast(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x.mul_(y)
    return x.sum()


def inplace_identity(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x.add_(y)


def slice_mul(x: torch.Tensor) -> torch.Tensor:
    x[1:3].mul_(2)
    return x.sum()


def select_zero(x: torch.Tensor) -> torch.Tensor:
    x[0].zero_()
    return x + 1


def diagonal_fill(x: torch.Tensor) -> torch.Tensor:
    x.diagonal().fill_(0.5)
    return x.exp()


def transpose_row(x: torch.Tensor) -> torch.Tensor:
    x.t()[0].add_(1)
    return x.clone()


def unfold_mul(x: torch.Tensor) -> torch.Tensor:
    x.unfold(0, 2, 2).mul_(3)
    return x.sum()


def as_strided_add(x: torch.Tensor) -> torch.Tensor:
    x.as_strided((2, 2), (1, 2)).add_(1)
    return x * 1


def flat_view_slice(x: torch.Tensor) -> torch.Tensor:
    x.view(-1)[2:5].sub_(1)
    return x.cos()


def view_chain(x: torch.Tensor) -> torch.Tensor:
    x[1:].t()[0].mul_(0.5)
    return x.sum(1)


def old_view_sees_mutation(x: torch.Tensor) -> torch.Tensor:
    v = x[0]
    x.add_(1)
    return v * 2


def sibling_view(x: torch.Tensor) -> torch.Tensor:
    col = x[:, 0]
    row = x[0]
    row.fill_(3.0)
    return col.clone()


def view_output(x: torch.Tensor) -> torch.Tensor:
    return x[0]


def identity(x: torch.Tensor) -> torch.Tensor:
    return x


def mutate_then_view_output(x: torch.Tensor) -> torch.Tensor:
    x.add_(1)
    return x.t()


def outputs_alias_each_other(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = x * 2
    return y, y.view(-1)


def copy_into_input(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x.copy_(y)
    return x + 1


def copy_broadcast_dtype(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x.copy_(y)
    return x.sum()


def mutate_intermediate(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[0].add_(1)
    return y


def split_part(x: torch.Tensor) -> torch.Tensor:
    _, b = x.split(2)  # type: ignore[no-untyped-call]
    b.mul_(2)
    return x.sum(0)


def unbind_part(x: torch.Tensor) -> torch.Tensor:
    x.unbind(0)[1].add_(1)
    return x.abs()


def dtype_promotion(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x.add_(y)
    return x


def two_mutated_inputs(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x.add_(1)
    y.mul_(2)
    return x + y


def index_put(x: torch.Tensor, idx: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    x[idx] = v
    return x.sum()


def masked_fill(x: torch.Tensor) -> torch.Tensor:
    x.masked_fill_(x > 0, 0.0)
    return x * 3


def relu_intermediate(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    y.relu_()
    return y + x


def squeeze_intermediate(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # torch.matmul of a 1-d and a 2-d tensor: unsqueeze, mm, then squeeze_ of the result
    y = a.unsqueeze(0) @ b
    y.squeeze_(0)
    return y


def inplace_views_then_write(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = x * 2
    y.t_()
    y.unsqueeze_(0)
    y[0, 1].add_(5)  # a write through the changed view reaches y's data
    return y, y * 1


def mutated_view_is_output(x: torch.Tensor) -> torch.Tensor:
    row = x[1]
    row.add_(10)
    return row


def bits_through_int_view(x: torch.Tensor) -> torch.Tensor:
    x.view(torch.int32).bitwise_and_(0x7FFFFFFF)  # the sign bit cleared: |x|, bit for bit
    return x * 2


def bytes_view_write(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.view(torch.uint8)[::4] = 0  # a view whose last dim is 4 times longer
    return y


def imag_zero(z: torch.Tensor) -> torch.Tensor:
    z.imag.zero_()
    return z * 2


def real_scale(z: torch.Tensor) -> torch.Tensor:
    y = z.clone()
    y.real.mul_(3)
    return y


def view_as_real_write(z: torch.Tensor) -> torch.Tensor:
    torch.view_as_real(z)[:, 1] = 1.0
    return z + 1


def view_as_complex_write(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    torch.view_as_complex(y).mul_(1j)
    return y


def _c64(n: int) -> torch.Tensor:
    return torch.randn(n, dtype=torch.complex64)


def _f32(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


MutationCase = tuple[str, Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]]]

CORPUS: list[MutationCase] = [
    ("add_on_input", add_on_input, lambda: (_f32(3, 4),)),
    ("mul_broadcast", mul_broadcast, lambda: (_f32(3, 4), _f32(4))),
    ("inplace_identity", inplace_identity, lambda: (_f32(3, 4), _f32(3, 4))),
    ("slice", slice_mul, lambda: (_f32(5, 2),)),
    ("select_zero", select_zero, lambda: (_f32(3, 4),)),
    ("diagonal_fill", diagonal_fill, lambda: (_f32(4, 4),)),
    ("transpose_row", transpose_row, lambda: (_f32(3, 4),)),
    ("unfold", unfold_mul, lambda: (_f32(6),)),
    ("as_strided", as_strided_add, lambda: (_f32(4),)),
    ("flat_view_slice", flat_view_slice, lambda: (_f32(3, 3),)),
    ("view_chain", view_chain, lambda: (_f32(4, 3),)),
    ("old_view_sees_mutation", old_view_sees_mutation, lambda: (_f32(3, 4),)),
    ("sibling_view", sibling_view, lambda: (_f32(3, 4),)),
    ("view_output", view_output, lambda: (_f32(3, 4),)),
    ("identity", identity, lambda: (_f32(3, 4),)),
    ("mutate_then_view_output", mutate_then_view_output, lambda: (_f32(3, 4),)),
    ("outputs_alias_each_other", outputs_alias_each_other, lambda: (_f32(3, 4),)),
    ("copy_into_input", copy_into_input, lambda: (_f32(3, 4), _f32(3, 4))),
    ("copy_broadcast_dtype", copy_broadcast_dtype,
     lambda: (_f32(3, 4), torch.randn(4, dtype=torch.float64))),
    ("mutate_intermediate", mutate_intermediate, lambda: (_f32(3, 4),)),
    ("split_part", split_part, lambda: (_f32(4, 3),)),
    ("unbind_part", unbind_part, lambda: (_f32(3, 4),)),
    ("dtype_promotion", dtype_promotion,
     lambda: (_f32(3, 4), torch.randn(3, 4, dtype=torch.float64))),
    ("two_mutated_inputs", two_mutated_inputs, lambda: (_f32(3, 4), _f32(3, 4))),
    ("index_put", index_put, lambda: (_f32(5, 3), torch.tensor([0, 3]), _f32(2, 3))),
    ("masked_fill", masked_fill, lambda: (_f32(3, 4),)),
    ("relu_intermediate", relu_intermediate, lambda: (_f32(3, 4),)),
    ("squeeze_intermediate", squeeze_intermediate, lambda: (_f32(3), _f32(3, 5))),
    ("inplace_views_then_write", inplace_views_then_write, lambda: (_f32(3, 4),)),
    ("mutated_view_is_output", mutated_view_is_output, lambda: (_f32(3, 4),)),
    # views that reinterpret the dtype: the write goes back as bits, not converted values
    ("bits_through_int_view", bits_through_int_view, lambda: (_f32(3, 4),)),
    ("bytes_view_write", bytes_view_write, lambda: (_f32(6),)),
    ("imag_zero", imag_zero, lambda: (_c64(4),)),
    ("real_scale", real_scale, lambda: (_c64(4),)),
    ("view_as_real_write", view_as_real_write, lambda: (_c64(3),)),
    ("view_as_complex_write", view_as_complex_write, lambda: (_f32(3, 2),)),
]
"""(name, function, input factory) for each case."""


def _as_list(value: Any) -> list[torch.Tensor]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def check_against_eager(fn: Callable[..., Any], run: Callable[..., Any],
                        inputs: Sequence[torch.Tensor]) -> None:
    """``run(*inputs)`` (a compiled ``fn``) gives eager's outputs, leaves the inputs as
    eager leaves them, and aliases as eager does: an output shares memory with an input
    (with the same strides) or with another output exactly where eager's does. Each side
    gets its own clones of ``inputs``."""
    eager_inputs = [t.clone() for t in inputs]
    compiled_inputs = [t.clone() for t in inputs]
    expected = _as_list(fn(*eager_inputs))
    got = _as_list(run(*compiled_inputs))
    assert len(got) == len(expected), f"{len(got)} outputs, eager gives {len(expected)}"
    for i, (e, g) in enumerate(zip(expected, got)):
        torch.testing.assert_close(g, e, msg=prefixed(f"output {i}"))
        aliased = [shares_memory(e, ei) for ei in eager_inputs]
        assert [shares_memory(g, gi) for gi in compiled_inputs] == aliased, (
            f"output {i}: aliasing with the inputs differs from eager")
        if any(aliased):
            assert g.stride() == e.stride(), f"output {i}: strides differ from eager"
        for j in range(i):
            assert shares_memory(g, got[j]) == shares_memory(e, expected[j]), (
                f"outputs {j} and {i}: aliasing differs from eager")
    for i, (e, g) in enumerate(zip(eager_inputs, compiled_inputs)):
        torch.testing.assert_close(g, e, msg=prefixed(f"input {i} after the call"))
