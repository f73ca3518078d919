"""Where a compiled optimizer step puts its new state on the GPU, and what it copies: one
AdamW (foreach) step compiled with Ember on CUDA parameters, with the output code of the
first step (the step that makes the state) and of the second (the steady state), each
``aten::copy_`` of the later steps with its destination and source (device, shape,
dtype), and each state entry's device beside eager's (eager keeps ``step`` on the CPU
unless ``capturable``). ``python3 tools/gpu/debug_optimizer_state.py``."""

from __future__ import annotations

from typing import Any

import ember.frontend
import torch
from ember.runtime.config import patch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode  # a debug tool, not a package


def model() -> nn.Module:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8)).cuda()
    for p in m.parameters():
        p.grad = torch.randn_like(p)
    return m


def _meta(t: Any) -> str:
    if isinstance(t, torch.Tensor):
        return f"{t.device} {t.dtype} {tuple(t.shape)}"
    return repr(t)


class _Copies(TorchDispatchMode):  # type: ignore[misc]
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in (torch.ops.aten.copy_.default, torch.ops.aten._to_copy.default,
                    torch.ops.aten._copy_from.default):
            print(f"  {func}: {' <- '.join(_meta(a) for a in args[:2])}")
        return func(*args, **(kwargs or {}))


def main() -> None:
    eager_model, ember_model = model(), model()
    eager = torch.optim.AdamW(eager_model.parameters(), lr=1e-2, foreach=True)
    opt = torch.optim.AdamW(ember_model.parameters(), lr=1e-2, foreach=True)
    step = ember.frontend.compile(opt.step)
    eager.step()
    with patch(logs=frozenset({"output_code", "fallbacks", "graphs", "recompiles"})):
        print("===== step 1 (makes the state)")
        step()
        eager.step()
        print("===== step 2")
        step()
    for n in (3, 4):
        eager.step()
        print(f"===== step {n}: copies")
        with _Copies():
            step()
    torch.cuda.synchronize()
    for name, (a, b) in enumerate(zip(eager.state.values(), opt.state.values())):
        for key in a:
            print(f"param {name} {key}: eager {a[key].device}, ember {b[key].device}")


if __name__ == "__main__":
    main()
