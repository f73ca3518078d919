"""The host time of a training step, on the CPU: a BERT whose kernels take no time.

    python tools/host_step.py [--layers 12] [--steps 50] [--compilers eager,torch,ember]
    python tools/host_step.py --compilers torch,ember,ember_views_as_strided

On the GPU machine the zoo's HF training steps are host-bound (``docs/benchmarks.md``,
sessions 26 and 28): the GPU waits for the Python that launches its kernels, so a step's
time is its wrappers', the autograd engine's and the launches' Python. This measures
that part on the CPU machine. The model is a BERT of ``--layers`` layers, 8 wide, 8
tokens, trained with SGD. Its kernels are so small that a step's time is almost all host
work, by the same wrappers, extern calls, views and autograd glue as on the GPU. Kernel
launches differ: C++ through ctypes here, Triton there.

A compiler named after a variant of ``tools/ab_cpu.py`` (``ember_...``) is Ember
compiled inside that variant (the program caches off), so two versions of Ember's host
path are timed side by side. Each compiler's step is built in this one process and
warmed up five times. The compilers
are then timed round-robin, one step each per round, ``--steps`` rounds, with one thread
(``torch.set_num_threads(1)``). The report gives each compiler's median and minimum step
in milliseconds.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--compilers", default="eager,torch,ember")
    args = parser.parse_args()

    import torch
    import transformers
    from ab_cpu import VARIANTS
    from benchlib.runner import make_step
    from ember.runtime.config import patch
    from zoo.hf import FieldOf
    from zoo.registry import build, seeded_tokens

    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = transformers.BertConfig(
        num_hidden_layers=args.layers, hidden_size=8, num_attention_heads=2,
        intermediate_size=16, vocab_size=64, max_position_embeddings=8,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    device = torch.device("cpu")
    steps = {}
    for name in args.compilers.split(","):
        module = build(lambda: FieldOf(transformers.BertModel(config), "last_hidden_state"),
                       device, torch.float32)
        inputs = (seeded_tokens(1, 8, vocab=64, device=device, seed=31),)
        variant = VARIANTS.get(name)
        with contextlib.ExitStack() as inside:
            if variant is not None:  # Ember inside the variant, compiled afresh
                inside.enter_context(variant())
                inside.enter_context(patch(program_cache=False, capture_cache=False))
            steps[name] = make_step("ember" if variant else name, module, inputs, True,
                                    "inductor")
            for _ in range(5):
                steps[name]()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.steps):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    print(f"BERT, {args.layers} layers, training step on the CPU, one thread, "
          f"{args.steps} rounds")
    for name, ts in times.items():
        print(f"  {name:8s} median {statistics.median(ts) * 1e3:7.3f} ms   "
              f"min {min(ts) * 1e3:7.3f} ms")


if __name__ == "__main__":
    main()
