"""``benchlib.kernel_origins``: the ops behind each generated kernel of a program written
with ``EMBER_DEBUG_DIR``, by the entry names a profiler shows."""

from __future__ import annotations

from pathlib import Path

import ember.frontend as ef
import torch
from benchlib.kernel_origins import kernel_origins, origin_of
from ember.runtime.config import patch


def _block(x: torch.Tensor) -> torch.Tensor:
    return (x.sin() + 1).sum(-1) * (x.cos() * 3).amax(-1)


def test_origins_by_entry_name(tmp_path: Path) -> None:
    x = torch.randn(8, 32, requires_grad=True)
    with patch(debug_dir=tmp_path, program_cache=False, capture_cache=False):
        ef.compile(_block)(x).sum().backward()
    origins = kernel_origins(tmp_path)
    assert origins, list(tmp_path.iterdir())
    assert set(origins) <= {n for n in origins if n.startswith(("fwd_kernel", "bwd_kernel"))}
    fwd = [n for n in origins if n.startswith("fwd_")]
    assert fwd and all(origin_of(n, origins) for n in fwd)
    # the op lists name the traced ops; a partial kernel reads its split kernel's
    assert any("amax" in o for o in origins["fwd_kernel0"]), origins
    assert origin_of(fwd[0] + "_partial", origins) == origin_of(fwd[0], origins)
    assert origin_of("bwd_kernel999", origins) == ""
