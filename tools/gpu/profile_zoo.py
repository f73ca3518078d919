"""Top CUDA kernels of Ember and torch.compile on zoo models (H200 diagnosis).

    python tools/gpu/profile_zoo.py hf_gpt2,hf_bert bfloat16 > $OUT/profile.txt
    python tools/gpu/profile_zoo.py tv_resnet18 bfloat16 train   # forward + backward
    python tools/gpu/profile_zoo.py resnet bfloat16 dynamic      # static beside dynamic=True
    PROFILE_ROWS=80 python tools/gpu/profile_zoo.py hf_gpt2 bfloat16  # more kernels a table

Under each Ember table, the ops each listed generated kernel came from
(``benchlib/kernel_origins.py``, from the programs the first calls wrote to a temporary
``EMBER_DEBUG_DIR``): ``bwd_kernel23: mm_74, permute_131, view_200``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ember.frontend as ef
import zoo
from benchlib.accuracy import training_inputs
from benchlib.kernel_origins import kernel_origins, origin_of
from ember.runtime.config import patch
from torch.profiler import ProfilerActivity, profile


def main() -> None:
    names, dtype = sys.argv[1].split(","), getattr(torch, sys.argv[2])
    flags = set(sys.argv[3:])
    unknown = flags - {"train", "dynamic"}
    if unknown:
        raise SystemExit(f"profile_zoo.py: unknown flags {sorted(unknown)} (expected train, dynamic)")
    train = "train" in flags
    # With `dynamic`, each compiler is profiled twice: static, then dynamic=True.
    modes = (False, True) if "dynamic" in flags else (False,)

    def step(fn, inputs) -> None:  # type: ignore[no-untyped-def]
        if train:
            fn(*inputs).float().mean().backward()
        else:
            with torch.no_grad():
                fn(*inputs)

    for name in names:
        model, inputs = zoo.get(name).make("cuda", dtype, "full")
        if train:
            model.train()  # training-mode batch norm, dropout: what bench.py --train times
            inputs = training_inputs(inputs)  # as the bench: floating inputs require grad
        compiled = []
        for dynamic in modes:
            suffix = " dynamic=True" if dynamic else ""
            compiled.append(("ember" + suffix, ef.compile(model, backend="inductor", dynamic=dynamic)))
            compiled.append(("torch" + suffix, torch.compile(model, dynamic=dynamic)))
        for label, fn in compiled:
            programs = Path(tempfile.mkdtemp(prefix="ember-profile-"))
            ember = label.startswith("ember")
            # the first calls compile: Ember writes its programs for kernel_origins
            with patch(debug_dir=programs, program_cache=False) if ember \
                    else contextlib.nullcontext():
                for _ in range(3):
                    step(fn, inputs)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    step(fn, inputs)
                torch.cuda.synchronize()
            print(f"===== {name} {sys.argv[2]} {label}", flush=True)
            rows = int(os.environ.get("PROFILE_ROWS", "18"))
            print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=rows,
                                            max_name_column_width=90))
            if ember:
                origins = kernel_origins(programs)
                top = sorted(prof.key_averages(), key=lambda e: -e.self_device_time_total)
                for event in top[:rows]:
                    if origin_of(event.key, origins):
                        print(f"  {event.key}: {origin_of(event.key, origins)}")


if __name__ == "__main__":
    main()
