"""Outputs over unbacked sizes (``nonzero``, a boolean mask, ``.item()``) that are 0 at
run time: right sizes and values, and torch's strides for an empty dense tensor (a size
n counts as ``Max(1, n)``: ``[2, 0]`` is ``(1, 1)``, never ``(0, 1)``)."""

from __future__ import annotations

import torch
from ember.inductor.compile import compile_program
from ember.runtime.compiled import load_executor
from ember.runtime.ir import parse_program

PROGRAM = """program dialect=core-functional
metadata {"aot": {"aliased_outputs": [], "differentiable_outputs": [], "extern_ops": []}}

graph forward(%x: f32[5, 3]{3,1} cpu, %n: i64[]{} cpu):
  symbols u0 in [0, 15], u1 in [0, 5], u2 in [0, inf]
  %nonzero: i64[u0, 2]{1,u0} cpu = aten::nonzero.default(%x)
  %permute: i64[2, u0]{u0,1} cpu = aten::permute.default(%nonzero, [1, 0])
  %add: i64[2, u0]{"Max(1, u0)",1} cpu = aten::add.Tensor(%permute, 1)
  %select: f32[5]{3} cpu = aten::select.int(%x, 1, 0)
  %gt: bool[5]{1} cpu = aten::gt.Scalar(%select, 0)
  %index: f32[u1, 3]{3,1} cpu = aten::index.Tensor(%x, [%gt])
  %unsqueeze: f32[1, u1, 3]{3*u1,3,1} cpu = aten::unsqueeze.default(%index, 0)
  %exp: f32[1, u1, 3]{"3*Max(1, u1)",3,1} cpu = aten::exp.default(%unsqueeze)
  %permute_1: f32[3, 1, u1]{1,"3*Max(1, u1)",3} cpu = aten::permute.default(%exp, [2, 0, 1])
  %_local_scalar_dense: int(u2) = aten::_local_scalar_dense.default(%n)
  %full: f32[2, u2, 3]{"3*Max(1, u2)",3,1} cpu = aten::full.default([2, sym(u2), 3], 0, dtype=torch.float32, layout=torch.strided, device=device("cpu"), pin_memory=False)
  %add_1: f32[2, u2, 3]{"3*Max(1, u2)",3,1} cpu = aten::add.Tensor(%full, 1)
  return (%add, %permute_1, %add_1)  [user_output, user_output, user_output]
"""


def eager(x: torch.Tensor, n: torch.Tensor) -> list[torch.Tensor]:
    rows = x[x[:, 0] > 0]
    return [torch.nonzero(x).t() + 1, rows.unsqueeze(0).exp().permute(2, 0, 1),
            torch.zeros(2, int(n.item()), 3) + 1]


def test_empty_outputs_over_unbacked_sizes_have_torchs_strides() -> None:
    program = parse_program(PROGRAM)
    program.untrusted_origin = None
    compiled = compile_program(program, {"strict": True})
    wrapper = compiled.files["forward/wrapper.py"].decode()
    assert "max(1, u2)" in wrapper  # the allocation's strides, as torch's
    run = load_executor(compiled)
    for k in (0, 1, 4):
        x = torch.zeros(5, 3)
        x[:k, 0] = torch.arange(1.0, k + 1)
        n = torch.tensor(k)
        got, want = run([x, n]), eager(x, n)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            torch.testing.assert_close(g, w)
        u = (k, k, k)
        row = max(1, u[0])
        assert got[0].stride() == (row, 1)                  # [2, 0]: (1, 1), as eager
        assert got[1].stride() == (1, 3 * max(1, u[1]), 3)
        assert got[2].stride() == (3 * max(1, u[2]), 3, 1)  # [2, 0, 3]: (3, 3, 1)
        if k == 0:
            assert [g.stride() for g in got] == [w.stride() for w in want]
