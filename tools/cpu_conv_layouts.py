"""CPU convolution layouts: eager, torch.compile and Ember under both convolution
policies, side by side in one process (``layout_plan_rules.CONVOLUTION_ANCHORS``).

    OMP_NUM_THREADS=1 python tools/cpu_conv_layouts.py [--models resnet18,mobilenet_v2]
        [--train resnet18,mobilenet_v2] [--batch 8] [--size 96] [--threads 1]
        [--policies grouped,all] [--clock cpu|wall]

Models are torchvision's (untrained, 10 classes; the script needs torchvision), or the
zoo's as ``zoo:NAME`` (``--models zoo:resnet --train zoo:resnet``: its quick-suite input,
``--batch``/``--size`` unused). Each
row: the median time of a call (inference under ``no_grad``, or a training step:
forward and ``out.sum().backward()``), the callables timed round-robin after three
warm-up calls each. ``--clock cpu`` (the default) times the process's CPU time, which
other jobs on a shared machine disturb less than the wall clock (one thread: the same
work). ``Ember grouped`` is the CPU's policy (only grouped convolutions ask for
channels-last), ``Ember all`` the GPU's (every convolution does).
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Callable

import torch


def _timed(calls: dict[str, Callable[[], object]], rounds: int,
           clock: Callable[[], float]) -> dict[str, float]:
    for fn in calls.values():
        for _ in range(3):
            fn()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, fn in calls.items():
            start = clock()
            fn()
            times[name].append(clock() - start)
    return {name: sorted(t)[len(t) // 2] * 1e3 for name, t in times.items()}


def _model(name: str, train: bool, batch: int, size: int) -> tuple[torch.nn.Module,
                                                                   torch.Tensor]:
    """torchvision's ``name`` on a ``[batch, 3, size, size]`` image, or the zoo's model
    for ``zoo:NAME`` with its quick-suite input."""
    torch.manual_seed(0)
    if name.startswith("zoo:"):
        import zoo

        module, inputs = zoo.get(name.removeprefix("zoo:")).make("cpu", torch.float32,
                                                                  "quick")
        return module.train(train), inputs[0]
    import torchvision.models as tvm

    module = getattr(tvm, name)(num_classes=10).train(train)
    return module, torch.randn(batch, 3, size, size)


def _row(name: str, train: bool, batch: int, size: int, rounds: int,
         policies: list[str], clock: Callable[[], float]) -> str:
    import ember.frontend
    from ember.inductor.lowering import layout_plan_rules
    from ember.runtime.config import patch

    module, x = _model(name, train, batch, size)
    variants = {"eager": module, "torch.compile": torch.compile(copy.deepcopy(module))}
    for policy in policies:
        # compiled at its first call, which must see the policy; the caches off (their
        # keys do not hold the policy: a hit would give the other policy's program)
        layout_plan_rules.CONVOLUTION_ANCHORS["cpu"] = policy
        ember_module = ember.frontend.compile(copy.deepcopy(module))
        with patch(program_cache=False, capture_cache=False):
            if train:
                ember_module(x).sum().backward()
            else:
                with torch.no_grad():
                    ember_module(x)
        variants[f"Ember {policy}"] = ember_module
    layout_plan_rules.CONVOLUTION_ANCHORS["cpu"] = "grouped"

    def call(m: torch.nn.Module) -> Callable[[], object]:
        if train:
            return lambda: m(x).sum().backward()

        def infer() -> object:
            with torch.no_grad():
                return m(x)
        return infer

    ms = _timed({k: call(m) for k, m in variants.items()}, rounds, clock)
    cells = " | ".join(f"{ms[k]:.1f} ms" for k in variants)
    return f"| {name} | {'training' if train else 'inference'} | {cells} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet18,resnet50,mobilenet_v2,efficientnet_b0,"
                        "shufflenet_v2_x1_0,squeezenet1_0")
    parser.add_argument("--train", default="resnet18,mobilenet_v2,shufflenet_v2_x1_0,"
                        "squeezenet1_0")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=96)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--policies", default="grouped,all")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    policies = [p for p in args.policies.split(",") if p]
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    heads = " | ".join(f"Ember {p}" for p in policies)
    print(f"| model | mode | eager | torch.compile | {heads} |")
    print("|---|---|---|---|" + "---|" * len(policies))
    for train, names in ((False, args.models), (True, args.train)):
        for name in filter(None, names.split(",")):
            print(_row(name, train, args.batch, args.size, args.rounds, policies, clock),
                  flush=True)


if __name__ == "__main__":
    main()
