"""One compiler's generated code for one zoo model's step, on the GPU (its stderr: run
torch.compile's under ``TORCH_LOGS=output_code``, Ember's under
``EMBER_LOGS=output_code``), to read the two compilers' kernels side by side (the quick
suite keeps the compile short; the kernels are the full suite's but for their sizes):

    TORCH_LOGS=output_code python3 tools/gpu/dump_kernels.py torch pointwise bfloat16 \
        train 2> torch.txt
    EMBER_LOGS=output_code python3 tools/gpu/dump_kernels.py ember pointwise bfloat16 \
        train 2> ember.txt
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import zoo
from benchlib.runner import make_step


def main() -> None:
    compiler, name, dtype, mode = sys.argv[1], sys.argv[2], getattr(torch, sys.argv[3]), \
        sys.argv[4]
    suite = sys.argv[5] if len(sys.argv) > 5 else "quick"
    model, inputs = zoo.get(name).make(torch.device("cuda"), dtype, suite)
    make_step(compiler, model, inputs, mode == "train", "inductor")()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
