"""Diagnose two dynamic-shape programs on the GPU: ``item`` (an ``.item()`` used as a
size, through the inductor: each output against eager, and the output code) and ``qkv``
(the batch sweep of qkv heads: the compiles and, with ``TORCH_LOGS=+dynamic``, where
torch's shape environment specialised the batch). ``python3 tools/gpu/debug_dynamic.py
item|qkv``."""

from __future__ import annotations

import sys
from typing import Any

import ember.frontend
import torch
from ember.runtime.config import patch


def sizes_from_item(x: torch.Tensor, n: torch.Tensor) -> tuple[torch.Tensor, ...]:
    k: Any = n.item()
    return x[:k] * 2, torch.zeros(k) + 1, x.view(k, -1).sum(1)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scores = torch.softmax(q @ k.transpose(-1, -2), -1)
    return scores @ v + q.sum(-1, keepdim=True)


def item() -> None:
    with patch(logs=frozenset({"output_code"})):
        fast = ember.frontend.compile(sizes_from_item)
        for value in (2, 5, 12):
            x, n = torch.randn(24, 5, device="cuda"), torch.tensor(value, device="cuda")
            for i, (got, want) in enumerate(zip(fast(x, n), sizes_from_item(x, n), strict=True)):
                ok = got.shape == want.shape and torch.allclose(got, want)
                print(f"n={value} output {i}: {'ok' if ok else 'WRONG'} {tuple(got.shape)} "
                      f"{got.flatten()[:6].tolist()} want {want.flatten()[:6].tolist()}")


def qkv() -> None:
    fast = ember.frontend.compile(attend)
    for batch in (2, 3, 5):
        t = torch.randn(batch, 16, 96, device="cuda")
        args = t[..., :32], t[..., 32:64], t[..., 64:]
        torch.testing.assert_close(fast(*args), attend(*args))
    print("compiles", fast.stats.compiles)


if __name__ == "__main__":
    {"item": item, "qkv": qkv}[sys.argv[1]]()
