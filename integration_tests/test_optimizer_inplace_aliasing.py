"""The runtime's input-aliasing check for programs that write their inputs (an optimizer
step writes hundreds): a fast pass over the inputs' address ranges, the exact check by
storage only when some ranges meet. Inputs in disjoint memory run; a written input
overlapping another input is refused, as before."""

from __future__ import annotations

import pytest
import torch
from ember.inductor.compile import compile_program
from ember.runtime.callable import ProgramCallable, _any_overlap
from ember.runtime.ir import parse_program

# ``x.add_(1); return y * 2``, as the aot stage leaves it
ADD_ = """\
program dialect=core-functional

graph forward(%x: f32[8]{1} cpu, %y: f32[8]{1} cpu):
  %add: f32[8]{1} cpu = aten::add.Tensor(%x, 1)
  %mul: f32[8]{1} cpu = aten::mul.Tensor(%y, 2)
  return (%mul, %add)  [user_output, mutated_input x]
"""


def _run() -> ProgramCallable:
    program = parse_program(ADD_)
    program.untrusted_origin = None  # text this test wrote
    return ProgramCallable(compile_program(program, {"strict": True}))


def test_address_ranges_meet_only_where_tensors_share_bytes() -> None:
    base = torch.zeros(16)
    assert not _any_overlap([base[:8], base[8:], torch.zeros(8), 3, None])
    assert _any_overlap([base[:9], base[8:]])
    assert _any_overlap([base[::2], base[1::2]])  # interleaved: the ranges meet
    assert not _any_overlap([base[:4].expand(3, 4), base[4:]])  # stride 0: 4 elements
    assert _any_overlap([base, base])
    assert not _any_overlap([torch.zeros(0), torch.zeros(0)])


def test_disjoint_views_of_one_storage_run() -> None:
    run = _run()
    base = torch.arange(16.0)
    (out,) = run([base[:8], base[8:]])  # one storage, disjoint bytes
    torch.testing.assert_close(base[:8], torch.arange(8.0) + 1)
    torch.testing.assert_close(out, torch.arange(8.0, 16.0) * 2)


def test_an_overlapping_written_input_is_refused() -> None:
    run = _run()
    base = torch.zeros(12)
    with pytest.raises(RuntimeError, match="input 'y' shares memory with input 'x'"):
        run([base[:8], base[4:]])
    x = torch.zeros(8)
    with pytest.raises(RuntimeError, match="input 'y' shares memory with input 'x'"):
        run([x, x])
