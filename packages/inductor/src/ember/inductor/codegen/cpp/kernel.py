"""C++ source for one loop-IR kernel.

Layout of a generated function::

    extern "C" void kernel0(const float* __restrict__ arg0, float* __restrict__ buf1) {
        #pragma omp parallel for collapse(2) if (numel >= threshold)
        for (int64_t x0 = 0; x0 < 4; x0++) for (int64_t x1 ...) {
            <outer statements>
            // pass 0 over the reduction ranges
            double acc_v1 = 0;
            for (int64_t r0 = 0; r0 < 8; r0++) { <inner statements>; acc_v1 += v0; }
            float v1 = acc_v1;
            <statements that needed pass 0>
            ...
        }
    }

Every value is a typed ``const`` local; float16/bfloat16 values are 16-bit patterns
converted with the prelude's helpers.
"""

from __future__ import annotations

import torch
from ember.inductor.codegen.cpp import ops
from ember.inductor.loop_ir import (
    Compute,
    IndexExpr,
    IndexValue,
    Kernel,
    Literal,
    Load,
    Reduce,
    Stmt,
    Store,
    Var,
    reduction_phases,
    render,
)

# Parallelize the outer loops only when there is enough work per call.
PARALLEL_THRESHOLD = 32768


class CppKernelWriter:
    """Writes the C++ function of one kernel."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.dtypes: dict[str, torch.dtype] = {}
        self.lines: list[str] = []
        self.indent = 1

    def line(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    def index(self, x: IndexExpr) -> str:
        return render(x, lambda v: v.name, lambda n: f"static_cast<int64_t>({n})")

    # -- statements ---------------------------------------------------------------------
    def stmt(self, s: Stmt) -> None:
        if isinstance(s, Store):
            buf = self.kernel.buffer(s.buffer)
            value = ops.cast(s.value, self.dtypes[s.value], buf.dtype)
            self.line(f"{s.buffer}[{self.index(s.index)}] = {value};")
            return
        assert not isinstance(s, Reduce), "reductions are emitted by the pass loops"
        self.dtypes[s.name] = s.dtype
        t = ops.ctype(s.dtype)
        if isinstance(s, Load):
            read = f"{s.buffer}[{self.index(s.index)}]"
            if s.mask is not None:
                read = f"({s.mask} ? {read} : {ops.literal(s.other, s.dtype)})"
            expr = read
        elif isinstance(s, Literal):
            expr = ops.literal(s.value, s.dtype)
        elif isinstance(s, IndexValue):
            expr = self.index(s.index)
        else:
            assert isinstance(s, Compute)
            expr = self.compute(s)
        self.line(f"const {t} {s.name} = {expr};")

    def compute(self, s: Compute) -> str:
        if s.op == "cast":
            return ops.cast(s.args[0], self.dtypes[s.args[0]], s.dtype)
        arg_dtype = self.dtypes[s.args[-1]]
        if arg_dtype in ops.LOWP and s.op != "where":
            raise NotImplementedError(f"{s.op} on {arg_dtype} (lowering must upcast)")
        return ops.compute(s.op, list(s.args), arg_dtype, s.dtype)

    # -- reductions ---------------------------------------------------------------------
    def acc_type(self, r: Reduce) -> str:
        if r.op in ("sum", "prod") and r.dtype == torch.float32:
            return "double"
        return ops.ctype(r.dtype)

    def reduce_init(self, r: Reduce) -> None:
        t = self.acc_type(r)
        vt = self.dtypes[r.arg]
        if r.op == "sum":
            init = "0"
        elif r.op == "prod":
            init = "1"
        elif r.op in ("max", "min"):
            init = (f"-std::numeric_limits<{t}>::infinity()" if r.op == "max" else
                    f"std::numeric_limits<{t}>::infinity()") if r.dtype.is_floating_point else (
                    f"std::numeric_limits<{t}>::lowest()" if r.op == "max" else
                    f"std::numeric_limits<{t}>::max()")
            if r.dtype == torch.bool:
                init = "false" if r.op == "max" else "true"
        elif r.op == "any":
            init = "false"
        elif r.op == "all":
            init = "true"
        else:  # argmax / argmin
            self.line(f"{ops.ctype(vt)} acc_{r.name} = 0;")
            self.line(f"int64_t idx_{r.name} = -1;")
            return
        self.line(f"{t} acc_{r.name} = {init};")

    def reduce_update(self, r: Reduce, rlin: str) -> None:
        a, acc = r.arg, f"acc_{r.name}"
        if r.op == "sum":
            self.line(f"{acc} += {a};")
        elif r.op == "prod":
            self.line(f"{acc} *= {a};")
        elif r.op in ("max", "min"):
            fn = "ember_max" if r.op == "max" else "ember_min"
            if r.dtype == torch.bool:
                self.line(f"{acc} = {acc} {'||' if r.op == 'max' else '&&'} {a};")
            else:
                self.line(f"{acc} = {fn}<{ops.ctype(r.dtype)}>({acc}, {a});")
        elif r.op == "any":
            self.line(f"{acc} = {acc} || {a};")
        elif r.op == "all":
            self.line(f"{acc} = {acc} && {a};")
        else:
            better = ">" if r.op == "argmax" else "<"
            nan = f" || ({a} != {a} && {acc} == {acc})" if self.dtypes[a].is_floating_point \
                else ""
            self.line(f"if (idx_{r.name} < 0 || {a} {better} {acc}{nan}) "
                      f"{{ {acc} = {a}; idx_{r.name} = {rlin}; }}")

    def reduce_result(self, r: Reduce) -> None:
        self.dtypes[r.name] = r.dtype
        t = ops.ctype(r.dtype)
        if r.op in ("argmax", "argmin"):
            self.line(f"const {t} {r.name} = idx_{r.name};")
        else:
            self.line(f"const {t} {r.name} = static_cast<{t}>(acc_{r.name});")

    def single_reduce(self, r: Reduce) -> None:
        """A Reduce in a kernel without reduction ranges reduces one element."""
        self.dtypes[r.name] = r.dtype
        t = ops.ctype(r.dtype)
        value = "0" if r.op in ("argmax", "argmin") else r.arg
        self.line(f"const {t} {r.name} = static_cast<{t}>({value});")

    # -- loops --------------------------------------------------------------------------
    def open_loops(self, vars_: tuple[Var, ...]) -> None:
        for v in vars_:
            self.line(f"for (int64_t {v.name} = 0; {v.name} < {v.size}; {v.name}++) {{")
            self.indent += 1

    def close_loops(self, n: int) -> None:
        for _ in range(n):
            self.indent -= 1
            self.line("}")

    def body(self) -> None:
        k = self.kernel
        before, phases = reduction_phases(k)
        for s in before:
            if isinstance(s, Reduce):
                self.single_reduce(s)
            else:
                self.stmt(s)
        rvars = k.reduction_ranges
        rlin = " + ".join(
            f"{v.name}*{_prod([w.size for w in rvars[i + 1:]])}" for i, v in enumerate(rvars)
        ) or "0"
        for p, phase in enumerate(phases):
            self.line(f"// pass {p} over the reduction ranges")
            reduces = [s for s in phase.inner if isinstance(s, Reduce)]
            for r in reduces:
                self.dtypes.setdefault(r.arg, torch.float32)
            # accumulators need the value dtypes: declare after a dry run of dtypes
            for s in phase.inner:
                if not isinstance(s, (Reduce, Store)):
                    self.dtypes[s.name] = s.dtype
            for r in reduces:
                self.reduce_init(r)
            self.open_loops(rvars)
            saved = dict(self.dtypes)
            for s in phase.inner:
                if isinstance(s, Reduce):
                    self.reduce_update(s, rlin)
                else:
                    self.stmt(s)
            self.dtypes = saved
            self.close_loops(len(rvars))
            for r in reduces:
                self.reduce_result(r)
            for s in phase.after:
                self.stmt(s)

    def write(self) -> str:
        k = self.kernel
        loaded = set(k.loaded_buffers())
        stored = set(k.stored_buffers())
        params = []
        for b in k.buffers:
            const = "const " if b.name in loaded and b.name not in stored else ""
            params.append(f"{const}{ops.ctype(b.dtype)}* __restrict__ {b.name}")
        head = f'extern "C" void {k.name}({", ".join(params)}) {{'
        self.lines = []
        self.indent = 1
        n = len(k.ranges)
        work = k.numel * max(k.reduction_numel, 1)
        if n:
            collapse = f" collapse({n})" if n > 1 else ""
            self.line(f"#pragma omp parallel for{collapse} if ({work} >= {PARALLEL_THRESHOLD})")
        self.open_loops(k.ranges)
        self.body()
        self.close_loops(n)
        comment = f"// fused from: {', '.join(k.origins)}" if k.origins else ""
        return "\n".join([comment, head] + self.lines + ["}"]).lstrip("\n")


def _prod(xs: list[int]) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


def generate_function(kernel: Kernel) -> str:
    """The C++ function (without prelude) for ``kernel``."""
    return CppKernelWriter(kernel).write()
