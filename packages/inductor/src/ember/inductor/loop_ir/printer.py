"""A readable text form of loop-IR kernels, for logs, comments and golden tests."""

from __future__ import annotations

import torch
from ember.inductor.loop_ir.body import Compute, IndexValue, Literal, Load, Reduce, Stmt, Store
from ember.inductor.loop_ir.index import IndexExpr, render, render_size
from ember.inductor.loop_ir.kernel import Kernel


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``float32``."""
    return str(dtype).removeprefix("torch.")


def _ix(x: IndexExpr) -> str:
    return render(x, lambda v: v.name, lambda n: n, div="//")


def format_stmt(s: Stmt) -> str:
    """One statement as a line of text."""
    if isinstance(s, Load):
        mask = f", mask={s.mask}, other={s.other!r}" if s.mask is not None else ""
        return f"{s.name}: {dtype_name(s.dtype)} = load {s.buffer}[{_ix(s.index)}]{mask}"
    if isinstance(s, Literal):
        return f"{s.name}: {dtype_name(s.dtype)} = {s.value!r}"
    if isinstance(s, IndexValue):
        return f"{s.name}: {dtype_name(s.dtype)} = index {_ix(s.index)}"
    if isinstance(s, Compute):
        return f"{s.name}: {dtype_name(s.dtype)} = {s.op}({', '.join(s.args)})"
    if isinstance(s, Reduce):
        across = "_across" if s.across else ""
        return f"{s.name}: {dtype_name(s.dtype)} = reduce_{s.op}{across}({s.arg})"
    assert isinstance(s, Store)
    op = "+=" if s.mode == "add" else "="
    mask = f", mask={s.mask}" if s.mask is not None else ""
    return f"store {s.buffer}[{_ix(s.index)}] {op} {s.value}{mask}"


def format_kernel(kernel: Kernel) -> str:
    """The kernel as text: header with ranges and buffers, then one statement a line."""
    ranges = ", ".join(f"{v.name}<{render_size(v.size, '//')}" for v in kernel.ranges)
    rranges = ", ".join(f"{v.name}<{render_size(v.size, '//')}"
                        for v in kernel.reduction_ranges)
    bufs = ", ".join(
        f"{b.name}: {dtype_name(b.dtype)}[{', '.join(render_size(s, '//') for s in b.sizes)}]"
        for b in kernel.buffers)
    sizes = "".join(f", {name}: int64" for name in kernel.size_args)
    head = f"kernel {kernel.name}({bufs}{sizes}) over [{ranges}]"
    if rranges:
        head += f" reduce [{rranges}]"
    if kernel.template is not None:
        head += f" ({kernel.template.describe()})"
    return "\n".join([head + ":"] + ["    " + format_stmt(s) for s in kernel.body])
