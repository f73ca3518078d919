"""The torchvision sweep: model families beyond the zoo's classifiers (video, segmentation,
optical flow, windowed vision transformers) through Ember, against eager.

    python tools/tv_sweep.py [--models r3d_18,raft_small] [--modes infer,train]
        [--backend inductor] [--reference torch]

Needs ``torchvision`` (not a dev requirement; put it on ``PYTHONPATH``). Each model is
built untrained at a small input, with dropout and stochastic depth set to 0, and run in
eval mode under ``no_grad`` (``infer``) or in train mode with the gradient of a weighted
sum of its outputs (``train``: fixed random weights, so that no gradient is
analytically zero). A row gives the outputs' largest difference from eager relative to
eager's largest magnitude, the same for each parameter's gradient (the worst
parameter), and the compile counters. With ``--reference torch``, torch.compile's worst
gradient difference is printed beside Ember's: a parameter whose gradient is zero in
exact arithmetic (a bias before a normalisation) differs by rounding noise in every
compiler, and the comparison tells such noise from a bug.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from benchlib.accuracy import flatten_tensors

Factory = Callable[[], tuple[torch.nn.Module, tuple[Any, ...]]]


def _models() -> dict[str, Factory]:
    import torchvision.models as m
    from torchvision.models import optical_flow, segmentation, video

    def image(size: int, batch: int = 2) -> tuple[Any, ...]:
        return (torch.randn(batch, 3, size, size),)

    return {
        "r3d_18": lambda: (video.r3d_18(num_classes=10), (torch.randn(1, 3, 4, 32, 32),)),
        "r2plus1d_18": lambda: (video.r2plus1d_18(num_classes=10),
                                (torch.randn(1, 3, 4, 32, 32),)),
        "lraspp": lambda: (segmentation.lraspp_mobilenet_v3_large(
            num_classes=5, weights_backbone=None), image(64)),
        "deeplab_mnv3": lambda: (segmentation.deeplabv3_mobilenet_v3_large(
            num_classes=5, weights_backbone=None), image(64)),
        "raft_small": lambda: (optical_flow.raft_small(),
                               (torch.randn(1, 3, 128, 128), torch.randn(1, 3, 128, 128), 2)),
        "swin_t": lambda: (m.swin_t(num_classes=10), image(64, 1)),
        "maxvit_t": lambda: (m.maxvit_t(num_classes=10), image(224, 1)),
    }


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max() / (b.float().abs().max() + 1e-12))


def _run(factory: Factory, compiler: Callable[[torch.nn.Module], Any] | None, train: bool
         ) -> tuple[list[torch.Tensor], dict[str, torch.Tensor], Any]:
    torch.manual_seed(0)
    model, inputs = factory()
    model.train(train)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout) or type(module).__name__ == "StochasticDepth":
            module.p = 0.0
    call = model if compiler is None else compiler(model)
    with torch.set_grad_enabled(train):
        outs = flatten_tensors(call(*inputs))
    grads: dict[str, torch.Tensor] = {}
    if train:
        weights = [torch.randn(o.shape, generator=torch.Generator().manual_seed(5))
                   for o in outs]
        sum((o.float() * w).sum() for o, w in zip(outs, weights, strict=True)).backward()
        grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    return [o.detach() for o in outs], grads, call


def _worst(grads: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> tuple[float, str]:
    if not ref:
        return 0.0, "-"
    return max((_relative(grads[k], ref[k]), k) for k in ref if k in grads)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="")
    parser.add_argument("--modes", default="infer,train")
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--reference", choices=("none", "torch"), default="none")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    import ember.frontend as ef

    models = _models()
    names = [n for n in args.models.split(",") if n] or list(models)
    unknown = sorted(set(names) - set(models))
    if unknown:
        parser.error(f"unknown models {unknown}; models: {', '.join(models)}")
    for name in names:
        for mode in args.modes.split(","):
            train = mode == "train"
            start = time.perf_counter()
            try:
                want, want_grads, _ = _run(models[name], None, train)
                got, grads, compiled = _run(
                    models[name], lambda m: ef.compile(m, backend=args.backend), train)
                out_err = max(_relative(a, b) for a, b in zip(got, want, strict=True))
                grad_err, where = _worst(grads, want_grads)
                stats = compiled.stats
                row = (f"out {out_err:.1e}  grad {grad_err:.1e} ({where})  graphs={stats.graphs} "
                       f"breaks={stats.graph_breaks} fallbacks={stats.fallbacks}")
                if train and args.reference == "torch":
                    _, ref_grads, _ = _run(models[name], torch.compile, train)
                    ref_err, ref_where = _worst(ref_grads, want_grads)
                    row += f"  torch.compile grad {ref_err:.1e} ({ref_where})"
            except Exception as e:  # noqa: BLE001 - a failure is a row
                row = f"ERROR {type(e).__name__}: {str(e)[:200]}"
            print(f"{name:14s} {mode:5s} {time.perf_counter() - start:6.1f}s  {row}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
