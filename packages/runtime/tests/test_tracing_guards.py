"""Which guards a dynamic recording keeps (GraphRecorder(dynamic=True).finish()): one
form per relation, none implied by the others or by the ranges, and none from torch's
performance heuristics that leave the recorded ops unchanged."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy
import torch
import torch.export
from ember.runtime import import_exported
from ember.runtime.callable import ProgramCallable
from ember.runtime.ir import InputSpec, ShapeGuard, SourceLocation, SymbolRange, verify
from ember.runtime.ir import symbolic as S
from ember.runtime.tracing import GraphRecorder
from ember.runtime.tracing_guards import canonical_relation, one_form_per_relation


def guards(fn: Callable[..., Any], *inputs: torch.Tensor,
           dims: dict[int, tuple[int, int | None]]) -> list[str]:
    """The guard lines of ``fn`` recorded with ``dims`` of each input dynamic."""
    rec = GraphRecorder(dynamic=True)
    fakes = [rec.add_input(x, InputSpec(f"x{i}"), dynamic_dims=dims)
             for i, x in enumerate(inputs)]
    with rec:
        out = fn(*fakes)
    program = rec.finish([out])
    verify(program)
    return [g.expr for g in program.forward.guards]


BOTH: dict[int, tuple[int, int | None]] = {0: (2, None), 1: (2, None)}


def test_a_view_that_needs_an_even_size_keeps_one_guard() -> None:
    # torch adds s0*s1 == 2*s0*(s1//2), s1%(s1//2) == 0 and s1//(s1//2) == 2
    assert guards(lambda x: x.view(x.size(0), x.size(1) // 2, 2), torch.randn(4, 6),
                  dims=BOTH) == ["s1%2 == 0"]


def test_a_product_times_a_remainder_is_the_remainder() -> None:
    # torch: s0*(s1%16) == 0, s0*s1 == 16*s0*(s1//16), s1%(s1//16) == 0, ...
    assert guards(lambda x: x.view(x.size(0), -1, 16), torch.randn(4, 32),
                  dims=BOTH) == ["s1%16 == 0"]


def test_guards_not_implied_by_a_divisibility_stay() -> None:
    # s0 != s0*s1//2 says s1 != 2: a real condition of the view; s0*s1 == 2*(s0*s1//2)
    # and s0*s1%(s0*s1//2) == 0 follow from s0*s1%2 == 0 and are left out
    assert guards(lambda x: x.view(-1, 2), torch.randn(4, 6), dims=BOTH) == [
        "s0*s1%2 == 0", "s0 != s0*s1//2", "s0%(s0*s1//2) != 0"]


def test_one_form_per_relation_rules() -> None:
    s0, s1 = S.symbol("s0"), S.symbol("s1")
    ranges = {"s0": SymbolRange(2, None, 4), "s1": SymbolRange(2, None, 6)}
    where = SourceLocation("m.py", 3, "f", "y = x.view(-1, 2)")
    relations = [
        (sympy.Eq(s0 * sympy.Mod(s1, 4), 0), where),  # s1%4 == 0, with the first source
        (sympy.Eq(sympy.Mod(s1, 2), 0), None),  # implied by s1%4 == 0
        (sympy.Eq(sympy.Mod(s1, 4), 0), None),  # the same text
        (sympy.Eq(sympy.Mod(s0 * s1, 8), 0), None),  # s0*s1 = 4*s0*q: not implied
        (sympy.Eq(sympy.floor(s1 / sympy.floor(s1 / 4)), 4), None),  # 4q // q == 4
        (sympy.Le(sympy.floor(s0 / 2), s0), None),  # by the ranges
        (sympy.Ne(s0, 3), None),
    ]
    assert one_form_per_relation(relations, ranges) == [
        ShapeGuard("s1%4 == 0", where), ShapeGuard("s0*s1%8 == 0"), ShapeGuard("s0 != 3")]


def test_a_remainder_of_a_symbol_that_may_be_zero_keeps_its_factor() -> None:
    u0, s1 = S.symbol("u0"), S.symbol("s1")
    ranges = {"u0": SymbolRange(0), "s1": SymbolRange(2, None, 6)}
    assert canonical_relation(sympy.Eq(u0 * sympy.Mod(s1, 2), 0), ranges) == sympy.Eq(
        u0 * sympy.Mod(s1, 2), 0)


class ConvBN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.relu(self.bn(self.conv(x)))
        return out


def test_conv_backend_heuristic_is_not_a_guard() -> None:
    # torch's fake convolution asks batch >= 16 to pick mkldnn over its own kernel: the
    # recorded convolution and its contiguous output are the same either way
    conv = torch.nn.Conv2d(3, 4, 3)
    assert guards(conv, torch.randn(4, 3, 8, 8), dims={0: (2, 64)}) == []


def test_conv_backend_heuristic_does_not_narrow_the_range() -> None:
    # had the heuristic narrowed s0 to [2, 15], torch would take this branch unguarded
    conv = torch.nn.Conv2d(3, 4, 3)

    def branch(x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = conv(x)
        return y * 2 if x.shape[0] < 32 else y

    assert guards(branch, torch.randn(4, 3, 8, 8), dims={0: (2, 64)}) == ["s0 < 32"]


def test_conv_backend_heuristic_stays_a_guard_for_a_channels_last_input() -> None:
    # the backend then decides the output's memory format: kept
    conv = torch.nn.Conv2d(3, 4, 3)
    x = torch.randn(4, 3, 8, 8).to(memory_format=torch.channels_last)
    assert guards(conv, x, dims={0: (2, 64)}) == ["s0 < 16"]


def test_exported_conv_bn_with_a_batch_dim_runs_at_every_batch_in_its_range() -> None:
    model = ConvBN().eval()
    ep = torch.export.export(model, (torch.randn(4, 3, 8, 8),),
                             dynamic_shapes=({0: torch.export.Dim("batch", min=2, max=64)},))
    program = import_exported(ep)
    assert program.forward.guards == []
    for batch in (2, 16, 64):
        x = torch.randn(batch, 3, 8, 8)
        with torch.no_grad():
            got = ProgramCallable(program)([x])[0]
            torch.testing.assert_close(got, model(x))


def test_an_exact_quotient_inside_a_remainder_is_cancelled_to_writable_text() -> None:
    # torch's view-size check after a strided convolution states Mod(1, (a*b + a + b + 1)
    # / (a + 1)) with a and b the output height and width: a quotient only // may write.
    s2, s3 = S.symbol("s2"), S.symbol("s3")
    a = sympy.floor(s2 / 2 - sympy.Rational(3, 2))
    b = sympy.floor(s3 / 2 - sympy.Rational(3, 2))
    relation = sympy.Ne((4 * a + 4) * sympy.Mod(1, (a * b + a + b + 1) / (a + 1)), 0)
    ranges = {"s2": SymbolRange(3, None, 8), "s3": SymbolRange(3, None, 8)}
    [guard] = one_form_per_relation([(relation, None)], ranges)
    assert guard.expr == "4*(1%((s3-3)//2+1))*((s2-3)//2)+4*(1%((s3-3)//2+1)) != 0"


def test_a_strided_convolution_then_flatten_records_its_guards() -> None:
    # every dim dynamic: the Linear after Flatten pins out_h*out_w; recording used to
    # fail writing one of torch's view checks
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, stride=2), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 3 * 3, 5)).eval()
    rec = GraphRecorder(dynamic=True)
    x = rec.add_input(torch.randn(4, 3, 8, 8), InputSpec("x"),
                      dynamic_dims={d: (2, None) for d in range(4)})
    with rec:
        out = model(x)
    program = rec.finish([out])
    verify(program)
    assert any("== 36" in g.expr for g in program.forward.guards), program.forward.guards
