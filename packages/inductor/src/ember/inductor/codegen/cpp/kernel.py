"""C++ source for one loop-IR kernel.

Layout of a generated function::

    extern "C" void kernel0(const float* __restrict__ arg0, float* __restrict__ buf1) {
        EmberTeam ember_team(numel, threshold, 4*n1);  // threads for this call: threads.py
        #pragma omp parallel num_threads(ember_team.size) if (ember_team.size > 1)
        {
        EmberTeamMember ember_member(ember_team);  // stamps this thread's finish time
        #pragma omp for collapse(2) nowait
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
    }

Every value is a typed ``const`` local; float16 values are ``_Float16``, bfloat16 values 16-bit patterns
converted with the prelude's helpers.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from ember.inductor.codegen.cpp import ops
from ember.inductor.codegen.cpp.accumulators import Accumulators
from ember.inductor.codegen.cpp.loop_split import interval_splits
from ember.inductor.codegen.cpp.loop_shapes import (
    above,
    column_tiled,
    lanes_never_collide,
    linear_position,
    size_text,
)
from ember.inductor.loop_ir import (
    COSTLY_OPS,
    Compute,
    IndexExpr,
    IndexValue,
    Kernel,
    Literal,
    Load,
    Phase,
    Reduce,
    Size,
    Stmt,
    Store,
    Var,
    reduction_phases,
    render,
)

# Parallelize the outer loops only when there is enough work per call; how many threads
# a call uses is threads.py's policy.
PARALLEL_THRESHOLD = 32768
# SIMD_LOOPS: innermost loops without a (non-simd) reduction are marked `omp simd`. GCC 12
# at -O3 completely unrolls a short innermost loop (`for x1 < 6`) and vectorizes the loop
# around it; a select whose operand load only some paths need (`where(relu(x) <= 0, c, g)`)
# then becomes a group of interleaved *masked* loads, which GCC 12 miscompiles on x86
# AVX/AVX-512 (wrong values; seen as garbage conv + BatchNorm gradients). A loop marked
# `omp simd` is vectorized itself, never unrolled into its parent. Every iteration of an
# Ember loop writes its own elements, so the hint never changes results.

# Outer points reduced together when the reduction is strided in memory (x.sum(0)).
TILE = 16
# ROW_CACHE: a costly inner value (exp, log, tanh, ...) that several passes over the
# reduction ranges need (softmax's exp: in the sum pass and again in the output pass;
# three times more when a layer_norm follows) is computed once, in the first pass, into
# a per-row array on the stack, and later passes read it back. Only for rows of at most
# ROW_CACHE_BYTES of cached values in all (the array stays in L1/L2).
ROW_CACHE_OPS = COSTLY_OPS  # the loop IR's costly pointwise ops
ROW_CACHE_BYTES = 32768
# MATH_SELECTS: a float/double `where` whose value flows into a costly math call (one of
# ROW_CACHE_OPS: exp, log, tanh, ...) is written as integer bit selects (ember_select):
# GCC 12 leaves a float select feeding a libmvec call unvectorized on AVX2 (a masked
# softmax's exp was a scalar libm loop, 0.57x of eager). Other selects stay `c ? a : b`,
# which GCC turns into one blend (measured ~3% faster on a Llama's rotary kernels).
# SUM_BLOCK: float32 sums accumulate in float over blocks of SUM_BLOCK elements of the
# innermost reduction range (in the vector lanes, so each lane adds a few values), and the
# block sums in double. A float accumulator keeps the loop vectorized whatever it calls
# (with a double one, GCC 12 gives up on loops calling ember_exp), at about the accuracy
# of a double sum.
SUM_BLOCK = 256


class CppKernelWriter(Accumulators):
    """Writes the C++ function of one kernel (its reductions' accumulators:
    :class:`~.accumulators.Accumulators`)."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        # float max/min as a vectorizable select plus a NaN flag (not in tiled bodies)
        self.fast_minmax = True
        # inside a loop over the reduction ranges that updates accumulators
        self.in_reduction_loop = False
        # ROW_CACHE: cached value name -> the pass that computes it; the pass being written
        self.row_cache: dict[str, int] = {}
        self.row_cache_guard = ""  # a symbolic row length: the cache is used where it fits
        self.pass_index = -1
        self.rlin = "0"
        self.dtypes: dict[str, torch.dtype] = {}
        self.lines: list[str] = []
        self.indent = 1
        self.math_selects = _feeding_math(kernel)  # see MATH_SELECTS
        # comparisons with a known value in the loop being written (loop_split.py)
        self.known: dict[str, bool] = {}

    def line(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    def index(self, x: IndexExpr) -> str:
        return render(x, lambda v: v.name, lambda n: f"static_cast<int64_t>({n})")

    # -- statements ---------------------------------------------------------------------
    def stmt(self, s: Stmt) -> None:
        if isinstance(s, Store):
            self.store(s)
            return
        assert not isinstance(s, Reduce), "reductions are emitted by the pass loops"
        self.dtypes[s.name] = s.dtype
        t = ops.ctype(s.dtype)
        if s.name in self.known:  # constant in this interval of the loop (loop_split.py)
            self.line(f"const {t} {s.name} = {'true' if self.known[s.name] else 'false'};")
            return
        first = self.row_cache.get(s.name)
        if first is not None and self.pass_index > first:
            read = f"cache_{s.name}[{self.rlin}]"
            if self.row_cache_guard and isinstance(s, Compute):  # a run-time row length
                read = f"{self.row_cache_guard} ? {read} : {self.compute(s)}"
            self.line(f"const {t} {s.name} = {read};")
            return
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
        if first is not None and self.pass_index == first:
            guard = f"if ({self.row_cache_guard}) " if self.row_cache_guard else ""
            self.line(f"{guard}cache_{s.name}[{self.rlin}] = {s.name};")

    def store(self, s: Store) -> None:
        buf = self.kernel.buffer(s.buffer)
        target = f"{s.buffer}[{self.index(s.index)}]"
        value = ops.cast(s.value, self.dtypes[s.value], buf.dtype)
        if s.mode == "add" and buf.dtype in ops.LOWP:
            total = f"{ops.cast(target, buf.dtype, torch.float32)} + " \
                    f"{ops.cast(s.value, self.dtypes[s.value], torch.float32)}"
            text = f"{target} = {ops.cast(total, torch.float32, buf.dtype)};"
        elif s.mode == "add":
            text = f"{target} += {value};"
        else:
            text = f"{target} = {value};"
        self.line(f"if ({s.mask}) {text}" if s.mask is not None else text)

    def plan_row_cache(self, phases: list[Phase]) -> None:
        """Choose the values to compute once per row (see ``ROW_CACHE`` above) and declare
        their arrays."""
        seen: dict[str, int] = {}
        reused: dict[str, Compute] = {}
        for p, phase in enumerate(phases):
            for s in phase.inner:
                if not isinstance(s, Compute) or s.op not in ROW_CACHE_OPS:
                    continue
                if s.name in seen and seen[s.name] != p:
                    reused[s.name] = s
                seen.setdefault(s.name, p)
        n = self.kernel.reduction_numel
        if not isinstance(n, int):
            self.plan_symbolic_row_cache(reused, seen, n)
            return
        budget = ROW_CACHE_BYTES
        for name, s in reused.items():
            size = n * torch.empty((), dtype=s.dtype).element_size()
            if size > budget:
                continue
            budget -= size
            self.row_cache[name] = seen[name]
            self.line(f"{ops.ctype(s.dtype)} cache_{name}[{n}];  // see ROW_CACHE")

    def plan_symbolic_row_cache(self, reused: dict[str, Compute], seen: dict[str, int],
                                n: Size) -> None:
        """ROW_CACHE for a run-time row length ``n``: arrays of a fixed capacity (the
        budget shared by the cached values), used only by rows that fit
        (``row_cached``); longer rows recompute the values in each pass."""
        if not reused:
            return
        per_row = sum(torch.empty((), dtype=s.dtype).element_size() for s in reused.values())
        capacity = ROW_CACHE_BYTES // per_row
        self.row_cache_guard = "row_cached"
        self.line(f"const bool row_cached = {size_text(n)} <= {capacity};  // see ROW_CACHE")
        for name, s in reused.items():
            self.row_cache[name] = seen[name]
            self.line(f"{ops.ctype(s.dtype)} cache_{name}[{capacity}];")

    def compute(self, s: Compute) -> str:
        if s.op == "cast":
            return ops.compute("cast", list(s.args), self.dtypes[s.args[0]], s.dtype)
        arg_dtype = self.dtypes[s.args[-1]]
        if arg_dtype in ops.LOWP and s.op != "where":
            raise NotImplementedError(f"{s.op} on {arg_dtype} (lowering must upcast)")
        if s.op == "exp" and s.dtype == torch.float32 and not self.in_reduction_loop:
            # NOTE: not inside reduction loops with a double accumulator: there the extra
            # select stops GCC 12 from vectorizing the loop (see SUM_BLOCK)
            return f"ember_exp({s.args[0]})"
        if (s.op == "where" and s.name in self.math_selects
                and s.dtype in (torch.float32, torch.float64)):
            return ops.bit_select(list(s.args), s.dtype)
        return ops.compute(s.op, list(s.args), arg_dtype, s.dtype)

    # -- loops --------------------------------------------------------------------------
    def open_loops(self, vars_: tuple[Var, ...]) -> None:
        for v in vars_:
            self.line(f"for (int64_t {v.name} = 0; {v.name} < {size_text(v.size)}; {v.name}++) {{")
            self.indent += 1

    def simd_hint(self, reduces: list[Reduce], blocked: frozenset[str] = frozenset()) -> None:
        """Let the compiler vectorize a pass whose reductions are all sums (reassociating
        them, as eager's vectorized kernels do); other reductions keep their order. A
        pass without reductions is marked ``omp simd`` as well (see ``SIMD_LOOPS`` above)."""
        if not reduces:
            self.line("#pragma omp simd")
            return
        if not all(
                r.dtype.is_floating_point and (r.op == "sum" or self.is_fast_minmax(r))
                for r in reduces):
            return
        clauses = []
        for op, kind in (("sum", "+"), ("max", "max"), ("min", "min")):
            accs = [f"{'bacc' if r.name in blocked else 'acc'}_{r.name}"
                    for r in reduces if r.op == op]
            if accs:
                clauses.append(f"reduction({kind}:{', '.join(accs)})")
        nans = [f"nan_{r.name}" for r in reduces if r.op in ("max", "min")]
        if nans:
            clauses.append(f"reduction(|:{', '.join(nans)})")
        self.line(f"#pragma omp simd {' '.join(clauses)}")

    def blocked_sums(self, reduces: list[Reduce]) -> frozenset[str]:
        """The float32 sums of a vectorized pass, accumulated in blocks (see SUM_BLOCK)."""
        if not reduces or not all(
                r.dtype.is_floating_point and (r.op == "sum" or self.is_fast_minmax(r))
                for r in reduces):
            return frozenset()
        return frozenset(r.name for r in reduces
                         if r.op == "sum" and r.dtype == torch.float32
                         and self.dtypes.get(r.arg) == torch.float32)

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
        rlin = linear_position(rvars) or "0"
        self.rlin = rlin
        self.plan_row_cache(phases)
        for p, phase in enumerate(phases):
            self.pass_index = p
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
            self.open_loops(rvars[:-1])
            blocked = self.blocked_sums(reduces)
            blocks, loop = self.block_loop(rvars[-1], bool(blocked))
            # NOTE: in the reductions' order, not the set's (which varies with the hash
            # seed: the source, and so its build cache key, differed between processes)
            in_order = [r.name for r in reduces if r.name in blocked]
            for name in in_order:
                self.line(f"float bacc_{name} = 0;")
            self.simd_hint(reduces, blocked)
            self.line(loop)
            self.indent += 1
            saved = dict(self.dtypes)
            self.in_reduction_loop = any(
                r.name not in blocked and self.acc_type(r) == "double" for r in reduces)
            for s in phase.inner:
                if isinstance(s, Reduce) and s.name in blocked:
                    self.line(f"bacc_{s.name} += {s.arg};")
                elif isinstance(s, Reduce):
                    self.reduce_update(s, rlin)
                else:
                    self.stmt(s)
            self.in_reduction_loop = False
            self.dtypes = saved
            self.close_loops(1)
            for name in in_order:
                self.line(f"acc_{name} += bacc_{name};")
            if blocks:
                self.close_loops(1)
            self.close_loops(len(rvars) - 1)
            for r in reduces:
                self.reduce_result(r)
            self.pass_index = -1
            for s in phase.after:
                self.stmt(s)

    # -- reductions along a non-contiguous dim: tile the innermost outer range ----------
    def wants_tiling(self) -> bool:
        """:func:`.loop_shapes.column_tiled`: the kernel walks the reduction with a tile
        of outer points in the innermost loop (see :meth:`body_tiled`)."""
        return column_tiled(self.kernel)

    def body_tiled(self) -> None:
        """Like :meth:`body`, for ``TILE`` consecutive values of the last outer variable
        at once: outer values and accumulators live in ``[TILE]`` arrays, and every loop
        over the reduction ranges has the tile as its innermost (contiguous) loop."""
        k = self.kernel
        xl = k.ranges[-1]
        self.fast_minmax = False
        before, phases = reduction_phases(k)
        self.line(f"const int64_t xn = std::min<int64_t>({TILE}, {size_text(xl.size)} - xt);")
        for s in k.body:
            if not isinstance(s, Store):
                self.dtypes[s.name] = s.dtype
        outer_stmts = list(before) + [s for p in phases for s in p.after]
        outer_stmts += [s for p in phases for s in p.inner if isinstance(s, Reduce)]
        for s in outer_stmts:
            if isinstance(s, Store):
                continue
            self.line(f"{ops.ctype(s.dtype)} {s.name}_t[{TILE}];")
            if isinstance(s, Reduce):
                self.line(f"{self.reduce_acc_ctype(s)} acc_{s.name}[{TILE}];")
                if s.op in ("argmax", "argmin"):
                    self.line(f"int64_t idx_{s.name}[{TILE}];")
                if s.op == "m2":
                    self.line(f"double mean_{s.name}[{TILE}], n_{s.name}[{TILE}];")
        known: list[str] = []

        def open_tile() -> None:
            self.line("for (int64_t xi = 0; xi < xn; xi++) {")
            self.indent += 1
            self.line(f"const int64_t {xl.name} = xt + xi;")
            for name in known:
                self.line(f"const {ops.ctype(self.dtypes[name])} {name} = {name}_t[xi];")

        def outer(stmts: tuple[Stmt, ...] | list[Stmt]) -> None:
            for s in stmts:
                if isinstance(s, Reduce):
                    self.single_reduce(s)
                else:
                    self.stmt(s)
                if not isinstance(s, Store):
                    self.line(f"{s.name}_t[xi] = {s.name};")

        open_tile()
        outer(before)
        self.close_loops(1)
        known.extend(s.name for s in before if not isinstance(s, Store))
        rvars = k.reduction_ranges
        rlin = linear_position(rvars)
        for p, phase in enumerate(phases):
            self.line(f"// pass {p} over the reduction ranges, {TILE} outer points at a time")
            reduces = [s for s in phase.inner if isinstance(s, Reduce)]
            self.line("for (int64_t xi = 0; xi < xn; xi++) {")
            self.indent += 1
            for r in reduces:
                self.line(f"acc_{r.name}[xi] = {self.reduce_init_value(r)};")
                if r.op in ("argmax", "argmin"):
                    self.line(f"idx_{r.name}[xi] = -1;")
                if r.op == "m2":
                    self.line(f"mean_{r.name}[xi] = n_{r.name}[xi] = 0;")
            self.close_loops(1)
            blocked = self.blocked_sums(reduces)
            if blocked and len(blocked) == len(reduces):
                self.tiled_block_pass(phase, reduces, open_tile)
            else:
                self.open_loops(rvars)
                open_tile()
                self.in_reduction_loop = bool(reduces)
                for s in phase.inner:
                    if isinstance(s, Reduce):
                        self.reduce_update(s, rlin, "[xi]")
                    else:
                        self.stmt(s)
                self.in_reduction_loop = False
                self.close_loops(1 + len(rvars))
            open_tile()
            for r in reduces:
                self.reduce_result(r, "[xi]")
                self.line(f"{r.name}_t[xi] = {r.name};")
            outer(phase.after)
            self.close_loops(1)
            known.extend(r.name for r in reduces)
            known.extend(s.name for s in phase.after if not isinstance(s, Store))

    def block_loop(self, rl: Var, blocked: bool) -> tuple[bool, str]:
        """The loop over the innermost reduction range ``rl`` (its header line), opening
        a loop over blocks of SUM_BLOCK elements first where ``blocked`` sums need it."""
        name, size = rl.name, size_text(rl.size)
        if not (blocked and above(rl.size, SUM_BLOCK)):
            return False, f"for (int64_t {name} = 0; {name} < {size}; {name}++) {{"
        self.line(f"for (int64_t {name}b = 0; {name}b < {size}; {name}b += {SUM_BLOCK}) {{")
        self.indent += 1
        return True, (f"for (int64_t {name} = {name}b; {name} < std::min<int64_t>"
                      f"({name}b + {SUM_BLOCK}, {size}); {name}++) {{")

    def tiled_block_pass(self, phase: Phase, reduces: list[Reduce],
                         open_tile: Callable[[], None]) -> None:
        """A pass of :meth:`body_tiled` whose reductions are all float32 sums: the tile
        sums blocks of the innermost reduction range in float (a vectorized tile loop;
        with double accumulators GCC 12 left a loop calling ``exp`` scalar: EfficientNet's
        squeeze-excitation means), then adds them into the double accumulators."""
        rvars = self.kernel.reduction_ranges
        names = [r.name for r in reduces]
        for name in names:
            self.line(f"float bacc_{name}[{TILE}];")
        self.open_loops(rvars[:-1])
        blocks, loop = self.block_loop(rvars[-1], True)
        self.line("for (int64_t xi = 0; xi < xn; xi++) {")
        self.indent += 1
        for name in names:
            self.line(f"bacc_{name}[xi] = 0;")
        self.close_loops(1)
        self.line(loop)
        self.indent += 1
        self.line("#pragma omp simd")
        open_tile()
        for s in phase.inner:
            if isinstance(s, Reduce):
                self.line(f"bacc_{s.name}[xi] += {s.arg};")
            else:
                self.stmt(s)
        self.close_loops(2)
        self.line("for (int64_t xi = 0; xi < xn; xi++) {")
        self.indent += 1
        for name in names:
            self.line(f"acc_{name}[xi] += bacc_{name}[xi];")
        self.close_loops(1)
        if blocks:
            self.close_loops(1)
        self.close_loops(len(rvars) - 1)

    def write(self) -> str:
        k = self.kernel
        loaded = set(k.loaded_buffers())
        stored = set(k.stored_buffers())
        params = []
        for b in k.buffers:
            const = "const " if b.name in loaded and b.name not in stored else ""
            params.append(f"{const}{ops.ctype(b.dtype)}* __restrict__ {b.name}")
        params += [f"const int64_t {name}" for name in k.size_args]
        head = f'extern "C" void {k.name}({", ".join(params)}) {{'
        self.lines = []
        self.indent = 1
        n = len(k.ranges)
        rnumel = k.reduction_numel
        work = size_text(k.numel * (max(rnumel, 1) if isinstance(rnumel, int) else rnumel))
        tiled = self.wants_tiling()
        splits: list[tuple[int, int, dict[str, bool]]] | None = None
        # NOTE: a scatter that accumulates runs sequentially, in index order like eager's
        # CPU kernel: its indexes may repeat, so threads may not split its
        # read-modify-writes; SIMD lanes only where they provably hit distinct elements
        # (see lanes_never_collide)
        serial = any(isinstance(s, Store) and s.mode == "add" for s in k.body)
        inner_simd = serial and n >= 2 and not k.is_reduction and lanes_never_collide(k)
        # NOTE: the innermost outer loop stays out of the collapse (unless it is tiled)
        # so that the compiler can vectorize it.
        depth = n if tiled or n == 1 else n - 1
        parallel = bool(n) and not serial
        if parallel:  # the team's size: see threads.py
            collapse = f" collapse({depth})" if depth > 1 else ""
            shares = [size_text(v.size) for v in k.ranges[:depth]]
            if tiled:  # the last collapsed loop steps over tiles
                shares[-1] = f"(({shares[-1]}) + {TILE - 1}) / {TILE}"
            iterations = "*".join(s if s.isdigit() or s.isidentifier() else f"({s})" for s in shares)
            self.line(f"EmberTeam ember_team({work}, {PARALLEL_THRESHOLD}, {iterations});")
            self.line("#pragma omp parallel num_threads(ember_team.size) if (ember_team.size > 1)")
            self.line("{")
            self.indent += 1
            self.line("EmberTeamMember ember_member(ember_team);")
            self.line(f"#pragma omp for{collapse} nowait")
        if tiled:
            self.open_loops(k.ranges[:-1])
            xl = k.ranges[-1]
            self.line(f"for (int64_t xt = 0; xt < {size_text(xl.size)}; xt += {TILE}) {{")
            self.indent += 1
            self.body_tiled()
        elif n >= 2 and not serial and (splits := interval_splits(k)) is not None:
            self.open_loops(k.ranges[:-1])
            last = k.ranges[-1].name
            for start, stop, known in splits:  # a concatenation's pieces
                self.known = known
                self.line(f"// {last} in [{start}, {stop}): its comparisons are constants")
                self.line("#pragma omp simd")
                self.line(f"for (int64_t {last} = {start}; {last} < {stop}; {last}++) {{")
                self.indent += 1
                self.body()
                self.close_loops(1)
            self.known = {}
        elif n >= 2 and not k.is_reduction and (not serial or inner_simd):
            self.open_loops(k.ranges[:-1])
            self.line("#pragma omp simd")  # see SIMD_LOOPS above
            self.open_loops(k.ranges[-1:])
            self.body()
        else:
            self.open_loops(k.ranges)
            self.body()
        self.close_loops(n - 1 if splits else n)  # split loops are closed already
        if parallel:
            self.close_loops(1)
        comment = f"// fused from: {', '.join(k.origins)}" if k.origins else ""
        return "\n".join([comment, head] + self.lines + ["}"]).lstrip("\n")


def _feeding_math(kernel: Kernel) -> set[str]:
    """Names of the values whose result flows into a costly math call (see MATH_SELECTS)."""
    needed: set[str] = set()
    for s in reversed(kernel.body):
        if isinstance(s, Compute) and (s.op in ROW_CACHE_OPS or s.name in needed):
            needed.update(s.args)
    return needed


def generate_function(kernel: Kernel) -> str:
    """The C++ function (without prelude) for ``kernel``."""
    return CppKernelWriter(kernel).write()
