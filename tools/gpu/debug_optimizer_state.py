"""Where a compiled optimizer step puts its new state on the GPU: one AdamW (foreach)
step compiled with Ember on CUDA parameters, with the output code of the first step
(the step that makes the state) and each state entry's device beside eager's (eager
keeps ``step`` on the CPU unless ``capturable``). ``python3 tools/gpu/debug_optimizer_state.py``."""

from __future__ import annotations

import ember.frontend
import torch
from ember.runtime.config import patch
from torch import nn


def model() -> nn.Module:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 8)).cuda()
    for p in m.parameters():
        p.grad = torch.randn_like(p)
    return m


def main() -> None:
    eager_model, ember_model = model(), model()
    eager = torch.optim.AdamW(eager_model.parameters(), lr=1e-2, foreach=True)
    opt = torch.optim.AdamW(ember_model.parameters(), lr=1e-2, foreach=True)
    step = ember.frontend.compile(opt.step)
    eager.step()
    with patch(logs=frozenset({"output_code", "fallbacks", "graphs"})):
        step()
    for name, (a, b) in enumerate(zip(eager.state.values(), opt.state.values())):
        for key in a:
            print(f"param {name} {key}: eager {a[key].device}, ember {b[key].device}")


if __name__ == "__main__":
    main()
