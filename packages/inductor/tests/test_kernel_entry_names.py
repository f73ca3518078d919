"""A Triton kernel's function is named after its graph too (``fwd_kernel3``,
``bwd_kernel3``): GPU profilers list kernels by function name, and a training step's
forward and backward each have a ``kernel3``. The wrapper keeps calling it ``kernel3``;
C++ kernels keep their names (one library a graph)."""

from __future__ import annotations

import sys
from pathlib import Path

from torch import nn

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.codegen.cpp.backend import CppBackend
from ember.inductor.compile import entry_name, generate_named
from ember.inductor.loop_ir import Kernel
from test_norm_kernels import cuda_training_sources


def test_entry_names_tag_the_graph() -> None:
    assert entry_name("forward", "kernel3") == "fwd_kernel3"
    assert entry_name("backward", "kernel3") == "bwd_kernel3"
    assert entry_name("optimizer step", "kernel0") == "optimizer_step_kernel0"
    assert entry_name("2nd", "kernel0") == "g2nd_kernel0"  # a Python identifier


def test_a_training_steps_triton_kernels_are_named_by_graph() -> None:
    model = nn.Sequential(nn.Linear(64, 64), nn.LayerNorm(64), nn.GELU())
    sources = cuda_training_sources(model, (32, 64))
    graphs = {graph for graph, _, _ in sources}
    assert graphs == {"forward", "backward"}
    entries = set()
    for graph, kernel, source in sources:
        tag = {"forward": "fwd", "backward": "bwd"}[graph]
        assert source.name == kernel.name  # the wrapper's name
        assert source.entry == f"{tag}_{kernel.name}", source.entry
        assert f"def {source.entry}(" in source.source
        split = source.meta.get("split")
        if split:
            assert split["entry"] == f"{source.entry}_partial"
        entries.add(source.entry)
    assert len(entries) == len(sources)  # no two functions share a name


def test_cpp_kernels_keep_their_names() -> None:
    kernel = Kernel("kernel0", (), (), (), ())
    assert not CppBackend.entries_named_by_graph

    class Recording(CppBackend):
        seen: list[str] = []

        def generate(self, kernel: Kernel):  # type: ignore[no-untyped-def]
            self.seen.append(kernel.name)
            return super().generate(kernel)

    source = generate_named(Recording(), kernel, "backward")
    assert Recording.seen == ["kernel0"] and source.entry == source.name == "kernel0"
