"""Choosing per matmul: the extern (ATen / cuBLAS) call or a template config.

Default mode (no benchmarking), :func:`heuristic_choice`, at the sizes' hints:

==============================================================  ==========================
case                                                            choice
==============================================================  ==========================
float32 without TF32 allowed (cuBLAS's SGEMM beats an exact     extern
``tl.dot``)
nothing to fuse (no inlined producer, no pointwise consumer,   extern (cuBLAS wins a
no unaligned result the extern would pad; a bias alone is not   plain GEMM and adds a
fusion: ``matmul_template.BIAS_COUNTS_AS_FUSION``)              bias in its epilogue)
``M``, ``N`` or ``K`` below ``MIN_SIDE``                        extern
fewer than ``MIN_PROGRAMS`` output tiles (times split-K) with   extern (too few programs
every config of the shape's class                               to fill the GPU)
compute-bound: the template's expected deficit against cuBLAS   extern
(``1/(TEMPLATE_EFFICIENCY * wave_efficiency) - 1`` of the
GEMM's time at ``PEAK_FLOPS``, with the config below; for an
epilogue-only fusion of an aligned GEMM also its result's
store at ``EPILOGUE_BANDWIDTH`` instead of ``BANDWIDTH``)
exceeds what fusing saves (the result written and read again
at ``BANDWIDTH``, one launch; one pass and no launch where a
reduction reads the epilogue's values: ``fusion_saving``):
large ``K``, or a large result whose only fusion is an epilogue
otherwise                                                       the first config of the
                                                                shape's class with at
                                                                least ``MIN_PROGRAMS``
                                                                tiles whose last wave is
                                                                within ``WAVE_TOLERANCE``
                                                                of the fullest's
                                                                (``matmul_configs``)
==============================================================  ==========================

A template chosen for its pointwise consumers that ends up with none fused runs as the
extern call (:mod:`ember.inductor.idle_templates`).

On a Hopper device, where the persistent TMA variant applies (:mod:`.matmul_tma`'s
rules), its configs (``TMA_CONFIGS``) come first and the cost model expects
``TMA_EFFICIENCY`` of cuBLAS instead of ``TEMPLATE_EFFICIENCY``; where it does not, the
log line says which rule failed.

With autotuning on (``mode="max-autotune"``), :func:`ember.inductor.autotune.select`
times the extern and the class's configs, the TMA variant's too where it applies (kind
``"mm"``, key: op, sizes, dtype, operand strides, TF32, ``tma`` where TMA applies) and the heuristic's choice is only the default. :func:`forced_matmul`
overrides both (tests, benchmarks). Every choice is logged under
``EMBER_LOGS=autotune``; the chosen template shows in ``format_schedule`` and
``EMBER_LOGS=output_code``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from ember.inductor import autotune
from ember.inductor.codegen.backend import MatmulProblem
from ember.inductor.codegen.triton.matmul_configs import (
    TMA_CONFIGS,
    MatmulConfig,
    candidate_configs,
    dtype_class,
    shape_class,
)
from ember.inductor.codegen.triton.matmul_tma import tma_reason
from ember.inductor.codegen.triton.sizes import SizeFacts
from ember.inductor.loop_ir import MatmulTemplate
from ember.runtime.logs import log

#: the least M, N and K (hints) the heuristic writes as a template (``tl.dot`` tiles are
#: at least 16 on each side)
MIN_SIDE = 16
#: the cost model of the default heuristic (H200 estimates, not measurements: the
#: benchmark's matmul suite and ``max-autotune`` are what measure): dense peak FLOP/s per
#: dtype class, the template's expected share of cuBLAS's speed, HBM bytes per second,
#: and the time one kernel launch costs
PEAK_FLOPS = {"16-bit": 7.0e14, "float32": 3.5e14}
TEMPLATE_EFFICIENCY = 0.85
#: the persistent TMA variant's expected share of cuBLAS's speed (Hopper; an estimate)
TMA_EFFICIENCY = 0.95
BANDWIDTH = 4.8e12
LAUNCH_SECONDS = 5e-6
#: bytes per second of a template's epilogue (its loads and stores after the K loop),
#: measured: the persistent template runs its epilogue between two tiles' K loops, not
#: overlapped with them as cuBLAS's is. H100, GPT MLP training step (16384x3072x768,
#: ``tools/gpu/step_census.py``): the bias + exact GELU epilogue storing the
#: pre-activation and the activation (200 MB) added 95 us to the GEMM (2.1 TB/s); the
#: GELU-backward epilogue (100 MB loaded, 200 MB stored) 190 us (1.6 TB/s). H200,
#: inference (``tools/bench_matmul.py``, session 17): GEMM + bias + GELU at
#: 8192x3072x768 and 4096^3 took 105.3 and 220.7 us in the template against 102.7 and
#: 214.5 us for cuBLAS and a separate GELU kernel (torch.compile)
EPILOGUE_BANDWIDTH = 1.5e12
#: the fewest programs a template launches in default mode (the H200's 132 SMs): with
#: fewer tiles (a decode step's ``M = batch``, a short prefill) the template leaves most
#: of the GPU idle where cuBLAS splits the work, and each such template is one more
#: ``tl.dot`` kernel to compile per graph (HF GPT-2 generate compiled 1.8x longer)
MIN_PROGRAMS = 132
#: a config whose last wave is this much emptier than the fullest config's is passed over
#: (H200 sweep, ``tools/gpu/matmul_sweep.py``: the fc2 shape 8192x768x3072 took 67.5 us in
#: 128x128 tiles, 1.0x of cuBLAS plus its epilogue, where 128x256 tiles fill 0.73 of
#: their last wave)
WAVE_TOLERANCE = 0.05
#: the extern's candidate name (template candidates: ``triton_<op>_<config>``)
EXTERN = "extern"

_forced: str | None = None


@contextlib.contextmanager
def forced_matmul(choice: str) -> Iterator[None]:
    """Within the block every matmul the lowering offers is ``choice``: ``"extern"``,
    ``"template"`` (the first pointer-template config of the shape's class, even where
    the heuristic would call the extern), ``"tma"`` (the first TMA config of the class,
    on any device) or a config name (``"bm32_bn32_bk32_g8_s4_w4"``,
    ``"tma_bm128_bn256_bk64_g8_s3_w8"``).

    Raises:
        ValueError: ``choice`` is none of these.
    """
    global _forced
    if choice not in (EXTERN, "template", "tma"):
        MatmulConfig.parse(choice)
    saved, _forced = _forced, choice
    try:
        yield
    finally:
        _forced = saved


def _hints(problem: MatmulProblem) -> tuple[int, int, int, int]:
    facts = SizeFacts()
    batch = 1 if problem.batch is None else facts.hint(problem.batch)
    return batch, facts.hint(problem.m), facts.hint(problem.n), facts.hint(problem.k)


def tma_configs(problem: MatmulProblem) -> tuple[MatmulConfig, ...]:
    """The TMA variant's configs of the problem's class (none for the skinny class)."""
    _, m, n, k = _hints(problem)
    classes = (dtype_class(problem.dtype), shape_class(m, n, k, problem.batch is not None))
    return TMA_CONFIGS.get(classes, ())


def heuristic_choice(problem: MatmulProblem, tma: bool | None = None) -> str:
    """``"extern"`` or a config name, without timing anything (module doc); ``tma``:
    whether the TMA variant applies (None: ask :func:`.matmul_tma.tma_reason` for a
    CUDA graph)."""
    _, m, n, k = _hints(problem)
    if problem.dtype == torch.float32 and not problem.allow_tf32:
        return EXTERN
    if not problem.fuses or min(m, n, k) < MIN_SIDE:
        return EXTERN
    if tma is None:
        tma = tma_reason(problem) is None
    configs = candidate_configs(problem.dtype, m, n, k, problem.batch is not None)
    tma_candidates = tma_configs(problem) if tma else ()
    configs = (*tma_candidates, *configs)
    filling = [c for c in configs if programs(problem, c) >= MIN_PROGRAMS]
    if not filling:
        return EXTERN
    # the class's configs come fastest first: the first whose last wave is about as full
    # as the fullest's
    waves = [wave_efficiency(problem, c) for c in filling]
    pick = next(i for i, w in enumerate(waves) if w >= max(waves) - WAVE_TOLERANCE)
    config = filling[pick]
    # the TMA variant's efficiency only for one of its configs (a class may have none)
    efficiency = (TMA_EFFICIENCY if config in tma_candidates else TEMPLATE_EFFICIENCY) \
        * waves[pick]
    if template_deficit(problem, efficiency) > fusion_saving(problem):
        return EXTERN
    return config.name


def wave_efficiency(problem: MatmulProblem, config: MatmulConfig) -> float:
    """The share of the SMs' time the template's tiles keep busy: its tiles over the
    waves of ``MIN_PROGRAMS`` (one per SM) they take. 8192x768 outputs in 128x256 tiles
    are 192 tiles, 1.45 waves: 0.73 (cuBLAS balances its last wave; the template does
    not)."""
    tiles = programs(problem, config)
    return tiles / (-(-tiles // MIN_PROGRAMS) * MIN_PROGRAMS)


def programs(problem: MatmulProblem, config: MatmulConfig) -> int:
    """How many programs the template launches with ``config`` (at the hints)."""
    batch, m, n, _ = _hints(problem)
    return batch * -(-m // config.block_m) * -(-n // config.block_n) * config.split_k


def template_deficit(problem: MatmulProblem,
                     efficiency: float = TEMPLATE_EFFICIENCY) -> float:
    """Seconds the template (expected at ``efficiency`` of cuBLAS's speed) loses
    against cuBLAS on the GEMM itself, and, for an epilogue-only fusion, on storing its
    result at ``EPILOGUE_BANDWIDTH`` where cuBLAS's store overlaps its next tiles."""
    batch, m, n, k = _hints(problem)
    seconds = 2.0 * batch * m * n * k / PEAK_FLOPS[dtype_class(problem.dtype)]
    store = 0.0
    if problem.epilogue_only and cublas_aligned(problem):
        store = batch * m * n * problem.dtype.itemsize * (1 / EPILOGUE_BANDWIDTH
                                                          - 1 / BANDWIDTH)
    return seconds * (1 / efficiency - 1) + store


def cublas_aligned(problem: MatmulProblem) -> bool:
    """Whether every side of the GEMM is a 16-byte multiple (at the hints), so that
    cuBLAS runs its fastest kernels. The epilogue's measured cost
    (``EPILOGUE_BANDWIDTH``) was against those; cuBLAS on an unaligned side (Llama's
    2730-wide MLP) falls back to slower kernels, which the model does not price."""
    _, m, n, k = _hints(problem)
    return all(side * problem.dtype.itemsize % 16 == 0 for side in (m, n, k))


def fusion_saving(problem: MatmulProblem) -> float:
    """Seconds fusing saves: the result is not written and read back by a separate
    epilogue kernel, which is not launched. Where a reduction reads the epilogue's values
    (``problem.reduced``: a residual add before a norm), the extern's epilogue would run
    inside the reduction's kernel, which runs anyway: fusing then saves one pass over the
    result (its write, where the template writes the epilogue's value instead, which the
    reduction reads) and no launch."""
    batch, m, n, _ = _hints(problem)
    one_pass = batch * m * n * problem.dtype.itemsize / BANDWIDTH
    if problem.reduced and problem.epilogue_only:
        return one_pass
    return 2.0 * one_pass + LAUNCH_SECONDS


def choose_matmul(problem: MatmulProblem, device_type: str = "cuda"
                  ) -> MatmulTemplate | None:
    """The template ``problem`` (of a graph on ``device_type``) is written as, or None
    for the extern call."""
    batch, m, n, k = _hints(problem)
    batched = problem.batch is not None
    configs = candidate_configs(problem.dtype, m, n, k, batched)
    reason = tma_reason(problem, device_type)
    if reason is None:
        configs = tma_configs(problem) + configs
    default = heuristic_choice(problem, reason is None)
    if _forced is not None:
        choice = {"template": candidate_configs(problem.dtype, m, n, k, batched)[0].name,
                  "tma": _first_tma(problem)}.get(_forced, _forced)
        how = "forced"
    elif autotune.autotune_enabled():
        names = {f"triton_{problem.op}_{c.name}": c for c in configs}
        candidates = [autotune.Candidate(f"{EXTERN}_{problem.op}", _extern_runner(problem))]
        candidates += [autotune.Candidate(name, _template_runner(problem, c.name))
                       for name, c in names.items()]
        default_name = (f"{EXTERN}_{problem.op}" if default == EXTERN
                        else f"triton_{problem.op}_{default}")
        key = _key(problem)
        if reason is None:  # a decision cached before the TMA candidates is not reused
            key["tma"] = True
        picked = autotune.select("mm", key, candidates, default=default_name)
        choice = names[picked].name if picked in names else EXTERN
        how = "autotuned"
    else:
        choice, how = default, "heuristic"
    tma_note = "" if reason is None else f"; TMA variant not applicable: {reason}"
    log("autotune", f"matmul {problem.op} [{f'B={batch}, ' if batched else ''}M={m}, "
                    f"N={n}, K={k}] {problem.dtype}: {choice} ({how}){tma_note}")
    if choice == EXTERN:
        return None
    return MatmulTemplate(problem.op, batched, choice, problem.allow_tf32, forced=how == "forced")


def _first_tma(problem: MatmulProblem) -> str:
    """``forced_matmul("tma")``'s config: the first TMA config of the class (of the
    16-bit large class for a skinny shape, which has none)."""
    configs = tma_configs(problem) or TMA_CONFIGS[(dtype_class(problem.dtype), "large")]
    return configs[0].name


def _key(problem: MatmulProblem) -> dict[str, object]:
    """The autotune cache key: sizes (hints), dtype, operand layouts, TF32."""
    batch, m, n, k = _hints(problem)
    facts = SizeFacts()

    def layout(strides: tuple[object, ...] | None) -> list[int] | str:
        return "computed" if strides is None else [facts.hint(s) for s in strides]

    return {"op": problem.op, "batch": batch, "m": m, "n": n, "k": k,
            "dtype": str(problem.dtype).removeprefix("torch."),
            "a": layout(problem.a_strides), "b": layout(problem.b_strides),
            "tf32": problem.allow_tf32}


def _operands(problem: MatmulProblem, device: torch.device
              ) -> tuple[torch.Tensor, torch.Tensor]:
    batch, m, n, k = _hints(problem)
    lead = (batch,) if problem.batch is not None else ()
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn((*lead, m, k), generator=g, device=device).to(problem.dtype)
    b = torch.randn((*lead, k, n), generator=g, device=device).to(problem.dtype)
    return a, b


def _extern_runner(problem: MatmulProblem) -> Callable[[], Callable[[], None]]:
    """The extern candidate: ATen's matmul on random operands of the problem's sizes,
    then (when the problem has work to fuse) one pass reading and writing the result:
    the separate epilogue kernel the extern needs and the template does not."""
    def make() -> Callable[[], None]:
        a, b = _operands(problem, autotune.tuning_target())
        mm = torch.bmm if problem.batch is not None else torch.mm
        out = mm(a, b)
        after = torch.empty_like(out)

        def run() -> None:
            mm(a, b, out=out)
            if problem.fuses:
                torch.add(out, out, out=after)
        run()
        return run
    return make


def _template_runner(problem: MatmulProblem, config: str) -> Callable[[], Callable[[], None]]:
    """A template candidate: the plain template (no prologue or epilogue) on random
    row-major operands."""
    def make() -> Callable[[], None]:
        from ember.inductor.codegen.triton.matmul_bench import plain_template_launch

        return plain_template_launch(problem, config, *_operands(problem, autotune.tuning_target()))
    return make


__all__ = ["BANDWIDTH", "EPILOGUE_BANDWIDTH", "EXTERN", "LAUNCH_SECONDS", "MIN_PROGRAMS",
           "MIN_SIDE", "PEAK_FLOPS", "TEMPLATE_EFFICIENCY", "TMA_EFFICIENCY", "WAVE_TOLERANCE",
           "choose_matmul", "cublas_aligned", "forced_matmul", "fusion_saving",
           "heuristic_choice", "programs", "template_deficit", "tma_configs",
           "wave_efficiency"]
