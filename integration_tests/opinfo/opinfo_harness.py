"""The OpInfo sweep: PyTorch's own op database run through Ember's default backend.

Every OpInfo of ``torch.testing._internal.common_methods_invocations.op_db`` with CPU
samples is run on at most ``max_samples`` samples per (dtype, kind):

* ``forward`` in float32, and in bfloat16 and int64 where the op's CPU dtypes allow;
* ``grad`` in float32 for differentiable ops (the gradients of every floating input
  that OpInfo marks ``requires_grad``, for fixed random cotangents).

The tensors of a sample (its input, args and kwargs, lists included) are graph INPUTS:
the compiled function closes over the non-tensor arguments only. Each sample is captured
(``ember.frontend.trace``), compiled by the ``aot`` then the ``inductor`` stage and run;
it is then classified (:data:`CATEGORIES`):

``lowered``     every op of the captured graph reached inductor as it was, no fallback
``decomposed``  the aot stage decomposed some op; no fallback
``fallback``    correct, but some op ran as an extern call to eager ATen (counted in
                ``metadata["fallbacks"]``: a non-Core op without decomposition, an op
                without lowering, or a lowering rule that raised)
``mismatch``    a result differs from eager beyond tolerance (see :func:`compare`)
``crash``       Ember raised where eager did not, or inductor gave up on a whole graph
                (``InductorFallbackWarning``: the graph ran eagerly after an internal error)

A sample eager itself raises on is ``skipped`` (not counted), as is one with a sparse
input (Ember compiles strided tensors only). A sample that cannot be traced (an op whose
output depends on data: ``.item()``, ``nonzero``, a tensor read as Python numbers) is
compiled with the default strict capture instead, where it is a graph break
(``fallback``, if then correct). Ops that return
uninitialized memory (``empty*``) and those OpInfo marks as not comparable compare in
shapes and dtypes only. Random ops (two eager runs with different seeds differ) are
compiled with ``eager_random`` so that, seeded alike, the compiled run draws eager's
numbers; a random op that OpInfo seeds inside the sample (``wrapper_set_seed``: the
traced program does not replay that seeding) compares in shapes and dtypes only.
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

CATEGORIES = ("lowered", "decomposed", "fallback", "mismatch", "crash")
CORRECT = ("lowered", "decomposed", "fallback")
FORWARD_DTYPES = (torch.float32, torch.bfloat16, torch.int64)

# Comparison against eager: (atol, rtol) per dtype; a result outside them still passes
# when it is no farther from a float64 reference than ``_REFERENCE_FACTOR`` times eager
# is (fusion and reassociation change the rounding, not the accuracy).
_TOLERANCES = {torch.float32: (1e-5, 1.3e-6), torch.bfloat16: (1e-5, 1.6e-2),
               torch.float16: (1e-5, 1e-3), torch.float64: (1e-7, 1e-7)}
_REFERENCE_FACTOR = 4.0
_REFERENCE_SLACK = {torch.float32: 1e-5, torch.bfloat16: 8e-3, torch.float16: 1e-3}


@dataclass(frozen=True)
class SampleResult:
    """What one sample did: its OpInfo, dtype, kind, index, category and details."""

    op: str
    dtype: str
    kind: str
    index: int
    category: str
    detail: str = ""
    fallbacks: tuple[str, ...] = ()
    seconds: float = 0.0

    def row(self) -> dict[str, Any]:
        """The result as a flat CSV/JSON row (fallbacks joined by ``;``)."""
        out = asdict(self)
        out["fallbacks"] = ";".join(self.fallbacks)
        return out

    @staticmethod
    def from_row(row: dict[str, Any]) -> SampleResult:
        """Inverse of :meth:`row`."""
        fallbacks = tuple(f for f in str(row.get("fallbacks", "")).split(";") if f)
        return SampleResult(str(row["op"]), str(row["dtype"]), str(row["kind"]),
                            int(row["index"]), str(row["category"]), str(row.get("detail", "")),
                            fallbacks, float(row.get("seconds", 0.0)))


def op_database() -> list[Any]:
    """torch's OpInfo list (importing it takes seconds: torch's test utilities)."""
    from torch.testing._internal.common_methods_invocations import op_db

    return list(op_db)


def op_label(opinfo: Any) -> str:
    """``name`` or ``name.variant`` (OpInfo names are unique only with the variant)."""
    return f"{opinfo.name}.{opinfo.variant_test_name}" if opinfo.variant_test_name else opinfo.name


def select_ops(names: Sequence[str] | None = None, exact: bool = False) -> list[Any]:
    """The OpInfos named (by :func:`op_label`, or, unless ``exact``, by bare name for
    every variant), or all.

    Raises:
        ValueError: a name matches no OpInfo.
    """
    ops = op_database()
    if not names:
        return ops
    chosen = [o for o in ops if op_label(o) in names or (not exact and o.name in names)]
    missing = [n for n in names if not any(
        op_label(o) == n or (not exact and o.name == n) for o in chosen)]
    if missing:
        raise ValueError(f"no OpInfo named {', '.join(missing)}")
    return chosen


@dataclass(frozen=True)
class Plan:
    """One (dtype, kind) of an OpInfo to run."""

    dtype: torch.dtype
    kind: str  # "forward" | "grad"


def plans(opinfo: Any, dtypes: Sequence[torch.dtype] = FORWARD_DTYPES,
          grad: bool = True) -> list[Plan]:
    """The (dtype, kind) pairs the sweep runs for ``opinfo`` on CPU."""
    supported = opinfo.supported_dtypes("cpu")
    out = [Plan(d, "forward") for d in dtypes if d in supported]
    if (grad and opinfo.supports_autograd and torch.float32 in dtypes
            and torch.float32 in opinfo.supported_backward_dtypes("cpu")):
        out.append(Plan(torch.float32, "grad"))
    return out


def run_opinfo(opinfo: Any, max_samples: int, dtypes: Sequence[torch.dtype] = FORWARD_DTYPES,
               grad: bool = True) -> Iterator[SampleResult]:
    """Run the first ``max_samples`` CPU samples of ``opinfo`` for each of its plans."""
    for plan in plans(opinfo, dtypes, grad):
        try:
            samples = list(_first(opinfo.sample_inputs(
                "cpu", plan.dtype, requires_grad=plan.kind == "grad"), max_samples))
        except Exception as e:  # noqa: BLE001 - OpInfo's own sample generator failed
            yield SampleResult(op_label(opinfo), _dtype_name(plan.dtype), plan.kind, -1,
                               "skipped", f"sample_inputs raised {type(e).__name__}: {e}")
            continue
        for index, sample in enumerate(samples):
            yield run_sample(opinfo, sample, plan, index)


def _first(samples: Any, n: int) -> Iterator[Any]:
    for i, s in enumerate(samples):
        if i >= n:
            return
        yield s


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass
class _Sample:
    """A sample as a function of its tensors: ``call(*tensors)``."""

    call: Callable[..., Any]
    tensors: list[torch.Tensor]
    grad_inputs: list[int] = field(default_factory=list)


def _as_function(opinfo: Any, sample: Any) -> _Sample:
    leaves, spec = tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    constants = [None if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
    op = opinfo.op

    def call(*tensors: torch.Tensor) -> Any:
        values = list(constants)
        for position, t in zip(positions, tensors):
            values[position] = t
        inp, args, kwargs = tree_unflatten(values, spec)
        return op(inp, *args, **kwargs)

    tensors = [leaves[i] for i in positions]
    grad_inputs = [k for k, t in enumerate(tensors) if t.requires_grad]
    return _Sample(call, [t.detach() for t in tensors], grad_inputs)


def _fresh(sample: _Sample, dtype: torch.dtype | None = None) -> list[torch.Tensor]:
    out = []
    for k, t in enumerate(sample.tensors):
        c = t.clone()
        if dtype is not None and c.is_floating_point():
            c = c.to(dtype)
        if k in sample.grad_inputs:
            c.requires_grad_(True)
        out.append(c)
    return out


def _results(sample: _Sample, run: Callable[..., Any], kind: str,
             cotangent_seed: int = 0, dtype: torch.dtype | None = None) -> list[Any]:
    """The output leaves of ``run(*inputs)`` (forward), or the gradients of the inputs
    that require grad for fixed cotangents (grad)."""
    inputs = _fresh(sample, dtype)
    outputs, _ = tree_flatten(run(*inputs))
    if kind == "forward":
        return [o.detach() if isinstance(o, torch.Tensor) else o for o in outputs]
    diff = [o for o in outputs if isinstance(o, torch.Tensor) and o.requires_grad]
    wrt = [inputs[k] for k in sample.grad_inputs]
    if not diff or not wrt:
        return []
    generator = torch.Generator().manual_seed(cotangent_seed)
    cotangents = [torch.randn(o.shape, generator=generator, dtype=torch.float64).to(o.dtype)
                  for o in diff]
    grads = torch.autograd.grad(diff, wrt, cotangents, allow_unused=True)
    return [g if g is not None else None for g in grads]


def _is_random(sample: _Sample, kind: str) -> bool:
    """Whether two eager runs under different seeds differ (a random op)."""
    def seeded(seed: int) -> list[Any]:
        torch.manual_seed(seed)
        return _results(sample, sample.call, kind)
    try:
        return compare(seeded(1), seeded(2), None) is not None
    except Exception:  # noqa: BLE001 - a comparison that fails at all means "differs"
        return True


class _FallbackLog(logging.Handler):
    """Collects the ``ember.fallbacks`` log records of one compile."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _fallback_log() -> Iterator[_FallbackLog]:
    from ember.runtime.config import config, patch

    handler = _FallbackLog()
    logger = logging.getLogger("ember.fallbacks")
    logger.addHandler(handler)
    old_propagate = logger.propagate
    logger.propagate = False
    try:
        with patch(logs=config.logs | {"fallbacks"}):
            yield handler
    finally:
        logger.propagate = old_propagate
        logger.removeHandler(handler)


@dataclass
class Compiled:
    """A sample compiled by Ember: the callable and what the stages reported."""

    run: Callable[..., Any]
    decomposed: bool
    fallbacks: dict[str, int]
    graph_eager: str | None
    random_ops: list[str]


def compile_sample(sample: _Sample, eager_random: bool) -> Compiled:
    """Capture ``sample.call`` on its tensors, run aot then inductor, and wrap the
    compiled program as a function of the tensors."""
    from ember.frontend.trace import trace_capture
    from ember.inductor.compile import InductorFallbackWarning
    from ember.runtime.callable import ProgramCallable
    from ember.runtime.pipeline import run_eagerly, run_stages
    from ember.runtime.stages import StageDeclined, load_stage

    inputs = _fresh(sample)
    captured = trace_capture(sample.call, None, tuple(inputs), {})
    options: dict[str, Any] = {"eager_random": eager_random}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", InductorFallbackWarning)
        try:
            functional = run_stages(captured.program, [load_stage("aot")], options)
            compiled = run_stages(functional, [load_stage("inductor")], options)
        except StageDeclined as e:  # counted in metadata["fallbacks"], as compile_program does
            functional = compiled = run_eagerly(captured.program, str(e))
    graph_eager = next((str(w.message) for w in caught
                        if issubclass(w.category, InductorFallbackWarning)), None)
    program = ProgramCallable(compiled)
    before = _call_targets(captured.program)
    after = _call_targets(functional)
    fallbacks = compiled.metadata.get("fallbacks")
    counts = {str(k): int(v) for k, v in fallbacks.items()} if isinstance(fallbacks, dict) else {}

    def run(*tensors: torch.Tensor) -> Any:
        return captured.output.rebuild(program(captured.arguments.gather(list(tensors))))

    return Compiled(run, not before <= after, counts, graph_eager,
                    sorted(t for t in before if _is_random_op(t)))


def _call_targets(program: Any) -> set[str]:
    return {n.target for g in program.graphs.values() for n in g.nodes if n.op == "call"}


def _is_random_op(target: str) -> bool:
    from ember.runtime.ir import IRFormatError, resolve_op

    try:
        return torch.Tag.nondeterministic_seeded in resolve_op(target).tags
    except IRFormatError:
        return False


def run_sample(opinfo: Any, sample: Any, plan: Plan, index: int) -> SampleResult:
    """Run one sample eagerly and through Ember, compare, and classify it."""
    label, dtype_name = op_label(opinfo), _dtype_name(plan.dtype)
    start = time.perf_counter()

    def result(category: str, detail: str = "", fallbacks: tuple[str, ...] = ()) -> SampleResult:
        return SampleResult(label, dtype_name, plan.kind, index, category, detail[:300],
                            fallbacks, round(time.perf_counter() - start, 3))

    as_fn = _as_function(opinfo, sample)
    if any(t.layout != torch.strided for t in as_fn.tensors):
        return result("skipped", "sparse input: Ember compiles strided tensors only")
    if plan.kind == "grad" and not as_fn.grad_inputs:
        return result("skipped", "no input requires grad")
    try:
        torch.manual_seed(0)
        expected = _results(as_fn, as_fn.call, plan.kind)
    except Exception as e:  # noqa: BLE001 - eager itself rejects the sample
        return result("skipped", f"eager raised {type(e).__name__}: {e}")
    if plan.kind == "grad" and not expected:
        return result("skipped", "no differentiable output")
    random = _is_random(as_fn, plan.kind)
    try:
        with _fallback_log() as log:
            compiled = compile_sample(as_fn, random)
            torch.manual_seed(0)
            actual = _results(as_fn, compiled.run, plan.kind)
    except Exception as e:  # noqa: BLE001 - the sweep records every failure
        data_dependent = _data_dependent_op(e)
        if data_dependent is None:
            return result("crash", f"{type(e).__name__}: {e}")
        return _with_graph_break(as_fn, plan, expected, data_dependent, result)
    if compiled.graph_eager is not None:
        return result("crash", compiled.graph_eager)
    fallbacks = tuple(sorted(compiled.fallbacks))
    if opinfo.name in _UNINITIALIZED or opinfo.skip_correctness_check_compile_vs_eager:
        problem = compare_metadata(actual, expected)
        if problem is not None:
            return result("mismatch", problem, fallbacks)
        return result(_correct_category(compiled, fallbacks),
                      "uninitialized or unreproducible values: not compared", fallbacks)
    problem = compare(actual, expected, _reference(as_fn, plan) if not random else None)
    if problem is not None and compiled.random_ops and not random:
        # NOTE: OpInfo's random samples seed torch inside the op (wrapper_set_seed);
        # the traced program draws without that reseeding, so only metadata compares.
        problem = compare_metadata(actual, expected)
        if problem is None:
            return result(_correct_category(compiled, fallbacks),
                          "random op seeded inside the sample: values not compared", fallbacks)
    if problem is not None:
        return result("mismatch", problem, fallbacks)
    reasons = [m for m in log.messages if "runs eagerly:" in m and "no lowering" not in m]
    return result(_correct_category(compiled, fallbacks), "; ".join(reasons), fallbacks)


def _correct_category(compiled: Compiled, fallbacks: tuple[str, ...]) -> str:
    if fallbacks:
        return "fallback"
    return "decomposed" if compiled.decomposed else "lowered"


def compare_metadata(actual: list[Any], expected: list[Any]) -> str | None:
    """None when the results agree in number, shapes and dtypes (for random ops)."""
    if len(actual) != len(expected):
        return f"{len(actual)} results, eager gives {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        if isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor):
            if a.shape != e.shape or a.dtype != e.dtype:
                return (f"result {i}: {a.dtype} {list(a.shape)}, eager gives "
                        f"{e.dtype} {list(e.shape)}")
        elif type(a) is not type(e):
            return f"result {i}: {a!r} vs eager {e!r}"
    return None


# Ops whose results are uninitialized memory: only shapes and dtypes compare.
_UNINITIALIZED = frozenset({"empty", "empty_like", "new_empty", "new_empty_strided",
                            "empty_strided", "empty_permuted"})
_DATA_DEPENDENT = ("DataDependentOutputException", "DynamicOutputShapeException")


def _data_dependent_op(error: BaseException) -> str | None:
    """What a tracing failure depends on (the op whose output depends on data, for
    ``.item()``, ``nonzero``, ...; else the error), or None for another failure."""
    from ember.frontend.trace import CaptureError

    if not isinstance(error, CaptureError):
        return None
    cause = error.__cause__
    if cause is not None and type(cause).__name__ in _DATA_DEPENDENT:
        return str(cause) or type(cause).__name__
    first_line = str(cause).splitlines()[0] if cause is not None and str(cause) else ""
    return f"{type(cause).__name__}: {first_line}"[:120]


def _with_graph_break(sample: _Sample, plan: Plan, expected: list[Any], op: str,
                      result: Callable[..., SampleResult]) -> SampleResult:
    """A data-dependent op cannot be traced: compile with the default (strict) capture,
    where it is a graph break that runs eagerly, and check that result."""
    import ember.frontend

    try:
        compiled = ember.frontend.compile(sample.call)
        torch.manual_seed(0)
        actual = _results(sample, compiled, plan.kind)
    except Exception as e:  # noqa: BLE001 - the sweep records every failure
        return result("crash", f"strict capture after {op}: {type(e).__name__}: {e}")
    problem = compare(actual, expected, None)
    if problem is not None:
        return result("mismatch", problem)
    return result("fallback", f"graph break on {op}", (f"graph break: {op}",))


def _reference(sample: _Sample, plan: Plan) -> Callable[[], list[Any]] | None:
    """A float64 run of the sample (floating inputs upcast), computed on demand."""
    if plan.dtype not in _REFERENCE_SLACK:
        return None

    def reference() -> list[Any]:
        torch.manual_seed(0)
        return _results(sample, sample.call, plan.kind, dtype=torch.float64)
    return reference


def compare(actual: list[Any], expected: list[Any],
            reference: Callable[[], list[Any]] | None) -> str | None:
    """None when ``actual`` matches ``expected`` leaf by leaf, else what differs.

    Tensors must agree in shape and dtype; values pass ``torch.testing.assert_close``
    with the dtype's default tolerances (NaN equal to NaN), or else are no farther from
    the float64 ``reference`` than ``_REFERENCE_FACTOR`` times eager's result is (plus a
    per-dtype slack). Non-tensor leaves must be equal.
    """
    if len(actual) != len(expected):
        return f"{len(actual)} results, eager gives {len(expected)}"
    references: list[Any] | None = None
    for i, (a, e) in enumerate(zip(actual, expected)):
        if not isinstance(e, torch.Tensor) or not isinstance(a, torch.Tensor):
            if isinstance(e, torch.Tensor) or isinstance(a, torch.Tensor) or a != e:
                if not (a is None and e is None):
                    return f"result {i}: {a!r} vs eager {e!r}"
            continue
        if a.shape != e.shape or a.dtype != e.dtype:
            return (f"result {i}: {a.dtype} {list(a.shape)}, eager gives "
                    f"{e.dtype} {list(e.shape)}")
        atol, rtol = _TOLERANCES.get(e.dtype, (0.0, 0.0))
        try:
            torch.testing.assert_close(a, e, atol=atol, rtol=rtol, equal_nan=True,
                                       check_device=False)
            continue
        except AssertionError as err:
            message = " ".join(str(err).split())
        if reference is None or not e.is_floating_point():
            return f"result {i}: {message}"
        if references is None:
            try:
                references = reference()
            except Exception:  # noqa: BLE001 - no float64 kernel: eager is the reference
                return f"result {i}: {message}"
        ref = references[i]
        if not isinstance(ref, torch.Tensor) or ref.shape != e.shape:
            return f"result {i}: {message}"
        close = _as_close_as_eager(a, e, ref)
        if not close:
            return f"result {i}: {message} (and farther from float64 than eager)"
    return None


def _as_close_as_eager(actual: torch.Tensor, eager: torch.Tensor, ref: torch.Tensor) -> bool:
    a, e, r = actual.double(), eager.double(), ref.double()
    finite = torch.isfinite(r)
    if not torch.equal(torch.isnan(a), torch.isnan(r) | torch.isnan(e)) and not torch.equal(
            torch.isnan(a), torch.isnan(e)):
        return False
    if not torch.equal(a[~finite & ~torch.isnan(r)], r[~finite & ~torch.isnan(r)]):
        return False
    slack = _REFERENCE_SLACK.get(eager.dtype, 0.0)
    error = (a - r)[finite].abs()
    eager_error = (e - r)[finite].abs()
    scale = r[finite].abs() + 1.0
    return bool((error <= _REFERENCE_FACTOR * eager_error + slack * scale).all())


@dataclass
class Summary:
    """Per-category counts of a sweep and the fallback ops."""

    counts: dict[str, int]
    fallback_ops: dict[str, int]
    skipped: int

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def correct_fraction(self) -> float:
        return sum(self.counts[c] for c in CORRECT) / self.total if self.total else 1.0


def summarize(results: Sequence[SampleResult]) -> Summary:
    """Count the categories (skipped samples apart) and the fallback ops over samples."""
    counts = dict.fromkeys(CATEGORIES, 0)
    fallback_ops: dict[str, int] = {}
    skipped = 0
    for r in results:
        if r.category == "skipped":
            skipped += 1
            continue
        counts[r.category] += 1
        for f in r.fallbacks:
            fallback_ops[f] = fallback_ops.get(f, 0) + 1
    return Summary(counts, dict(sorted(fallback_ops.items(), key=lambda kv: -kv[1])), skipped)


def failures(results: Sequence[SampleResult]) -> list[SampleResult]:
    """The samples that are not correct (mismatch or crash)."""
    return [r for r in results if r.category in ("mismatch", "crash")]
