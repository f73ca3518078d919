"""The accumulators of a C++ kernel's reductions: their types, initial values, the
update each element makes, and the result (a mixin of
:class:`~.kernel.CppKernelWriter`, which provides ``line``, ``dtypes`` and
``fast_minmax``).

Float32 sums and products accumulate in double. ``argmax``/``argmin`` keep the index of
the best value beside it (``idx_``); a fast float max/min keeps a NaN flag (``nan_``).
``m2`` (the sum of squared deviations from the mean) keeps Welford's running mean and
count beside it (``mean_``, ``n_``, doubles) and updates them once an element; the
inductor emits it for devices whose variances reduce in one pass
(``lowering/reductions.VARIANCE_FORMS``).
"""

from __future__ import annotations

import torch
from ember.inductor.codegen.cpp import ops
from ember.inductor.loop_ir import Reduce


class Accumulators:
    """Reduction accumulators of one C++ kernel (module doc)."""

    dtypes: dict[str, torch.dtype]
    fast_minmax: bool

    def line(self, text: str) -> None:
        raise NotImplementedError  # the kernel writer's

    def acc_type(self, r: Reduce) -> str:
        if r.op in ("sum", "prod", "m2") and r.dtype == torch.float32:
            return "double"
        return ops.ctype(r.dtype)

    def reduce_init_value(self, r: Reduce) -> str:
        return ops.reduction_init(r.op, r.dtype, self.acc_type(r))

    def reduce_acc_ctype(self, r: Reduce) -> str:
        if r.op in ("argmax", "argmin"):
            return ops.ctype(self.dtypes[r.arg])
        return self.acc_type(r)

    def is_fast_minmax(self, r: Reduce) -> bool:
        return self.fast_minmax and r.op in ("max", "min") and r.dtype.is_floating_point

    def reduce_init(self, r: Reduce) -> None:
        self.line(f"{self.reduce_acc_ctype(r)} acc_{r.name} = {self.reduce_init_value(r)};")
        if self.is_fast_minmax(r):
            self.line(f"int nan_{r.name} = 0;")
        if r.op in ("argmax", "argmin"):
            self.line(f"int64_t idx_{r.name} = -1;")
        if r.op == "m2":
            self.line(f"double mean_{r.name} = 0, n_{r.name} = 0;")

    def reduce_update(self, r: Reduce, rlin: str, sub: str = "") -> None:
        a, acc, idx = r.arg, f"acc_{r.name}{sub}", f"idx_{r.name}{sub}"
        if r.op == "sum":
            self.line(f"{acc} += {a};")
        elif r.op == "prod":
            self.line(f"{acc} *= {a};")
        elif self.is_fast_minmax(r):
            cmp = ">" if r.op == "max" else "<"
            self.line(f"{acc} = ({a} {cmp} {acc}) ? {a} : {acc};")
            self.line(f"nan_{r.name} |= ({a} != {a});")
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
        elif r.op == "m2":  # Welford's update, in double
            mean, n = f"mean_{r.name}{sub}", f"n_{r.name}{sub}"
            self.line(f"{{ {n} += 1; const double d = {a} - {mean}; {mean} += d / {n}; "
                      f"{acc} += d * ({a} - {mean}); }}")
        else:
            better = ">" if r.op == "argmax" else "<"
            nan = f" || ({a} != {a} && {acc} == {acc})" if self.dtypes[a].is_floating_point \
                else ""
            self.line(f"if ({idx} < 0 || {a} {better} {acc}{nan}) "
                      f"{{ {acc} = {a}; {idx} = {rlin}; }}")

    def reduce_result(self, r: Reduce, sub: str = "") -> None:
        self.dtypes[r.name] = r.dtype
        t = ops.ctype(r.dtype)
        if r.op in ("argmax", "argmin"):
            self.line(f"const {t} {r.name} = idx_{r.name}{sub};")
        elif self.is_fast_minmax(r):
            self.line(f"const {t} {r.name} = nan_{r.name} ? "
                      f"std::numeric_limits<{t}>::quiet_NaN() : acc_{r.name};")
        else:
            self.line(f"const {t} {r.name} = static_cast<{t}>(acc_{r.name}{sub});")

    def single_reduce(self, r: Reduce) -> None:
        """A Reduce in a kernel without reduction ranges reduces one element."""
        self.dtypes[r.name] = r.dtype
        t = ops.ctype(r.dtype)
        value = "0" if r.op in ("argmax", "argmin") else r.arg
        if r.op == "m2":  # one element's deviation: 0 (NaN for a NaN or an infinity)
            value = f"({r.arg} - {r.arg}) * ({r.arg} - {r.arg})"
        self.line(f"const {t} {r.name} = static_cast<{t}>({value});")


__all__ = ["Accumulators"]
