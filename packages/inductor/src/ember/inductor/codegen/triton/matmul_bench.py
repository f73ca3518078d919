"""A plain matmul template kernel on given operands: what the autotuner times for a
template candidate (``matmul_choice``), and what tests and benchmarks run to compare a
config with the extern."""

from __future__ import annotations

from collections.abc import Callable

import torch
from ember.inductor.buffers import MatmulBuffer, loop_vars
from ember.inductor.codegen.backend import MatmulProblem
from ember.inductor.codegen.triton.matmul_write import write_matmul_template
from ember.inductor.loop_ir import Buffer, Kernel, MatmulTemplate, Var
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.values import Stored
from ember.runtime.compiled.triton_launcher import load_kernel
from ember.runtime.ir.contracts import KernelEntry, launch_meta_from_json


def plain_template_kernel(op: str, a: torch.Tensor, b: torch.Tensor, config: str,
                          allow_tf32: bool = False) -> Kernel:
    """The template kernel ``out = a @ b`` (2-d, or 3-d batched) under ``config``, over
    the operands' static sizes and strides."""
    batched = a.dim() == 3
    *lead, m, k = a.shape
    n = b.shape[-1]
    sa = Stored("a", a.dtype, tuple(a.shape), tuple(a.stride()))
    sb = Stored("b", b.dtype, tuple(b.shape), tuple(b.stride()))
    outer = (*lead, m, n)
    node = MatmulBuffer("out", a.dtype, tuple(outer), k, sa.element, sb.element,
                        MatmulTemplate(op, batched, config, allow_tf32))
    builder = BodyBuilder()
    xs, rs = loop_vars(node.outer_sizes, "x"), loop_vars((k,), "r")
    node.emit(builder, xs, rs)
    buffers = (Buffer("a", a.dtype, tuple(a.shape), tuple(a.stride())),
               Buffer("b", b.dtype, tuple(b.shape), tuple(b.stride())),
               Buffer("out", a.dtype, node.sizes, node.strides))
    return Kernel(f"{op}_candidate", tuple(v for v in xs if isinstance(v, Var)),
                  tuple(v for v in rs if isinstance(v, Var)), builder.finish(), buffers,
                  template=node.template)


def plain_template_launch(problem: MatmulProblem, config: str, a: torch.Tensor,
                          b: torch.Tensor) -> Callable[[], None]:
    """Generate and load the plain template for ``a @ b`` and run it once; returns a
    callable that runs it again."""
    kernel = plain_template_kernel(problem.op, a, b, config, problem.allow_tf32)
    code = write_matmul_template(kernel)
    path = "kernel.py"
    meta = launch_meta_from_json("triton", code.meta(), f"kernel {kernel.name!r}")
    launch = load_kernel(KernelEntry(kernel.name, "triton", code.name, path, meta),
                         {path: code.source.encode("utf-8")})
    out = torch.empty(kernel.buffers[-1].sizes, dtype=a.dtype, device=a.device)

    def run() -> None:
        launch(a, b, out)
    run()
    return run


__all__ = ["plain_template_kernel", "plain_template_launch"]
