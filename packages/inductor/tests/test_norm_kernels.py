"""Normalisation training kernels (issue 19 items 2-3): the Triton kernels of an
RMSNorm, a softmax+LayerNorm and a BatchNorm training step (forward and backward of
``out.float().sum()``), printed at full size for CUDA without a GPU (captured on the
meta device, retargeted to cuda, code generated, nothing built), the column-tile rules,
and numerics through Triton's interpreter at small shapes."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
from ember.inductor.codegen.triton.heuristics import LaunchConfig, choose_config
from ember.inductor.codegen.triton.reduction_layout import column_element_bytes
from ember.inductor.loop_ir import Buffer, Kernel, Load, Var, add, mul
from torch import nn

pytest.importorskip("ember.aot")
pytest.importorskip("ember.frontend")


class RMSNorm(nn.Module):
    """The zoo's ``rms_norm``: written out, no fused op."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.float().pow(2).mean(dim=-1, keepdim=True)
        return (x.float() * torch.rsqrt(variance + 1e-6)).to(x.dtype) * self.weight


class SoftmaxLayerNorm(nn.Module):
    """The zoo's ``softmax_layernorm``."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.norm(torch.softmax(x * 2.0, dim=-1))
        return out


class BatchNormReLU(nn.Module):
    def __init__(self, channels: int, dims: int) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(channels) if dims == 2 else nn.BatchNorm1d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(x))


class Loss(nn.Module):
    """The bench's training objective: ``model(x).float().sum()``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.model(x)
        return out.float().sum()


def _on_cuda(value: Any) -> Any:
    from ember.runtime.ir import TensorMeta

    cuda = torch.device("cuda")
    if isinstance(value, TensorMeta):
        return dataclasses.replace(value, device=cuda) if value.device.type == "meta" else value
    if isinstance(value, torch.device):
        return cuda if value.type == "meta" else value
    if isinstance(value, (tuple, list)):
        return type(value)(_on_cuda(v) for v in value)
    if isinstance(value, dict):
        return {k: _on_cuda(v) for k, v in value.items()}
    return value


def cuda_training_sources(model: nn.Module, shape: tuple[int, ...],
                          memory_format: torch.memory_format = torch.contiguous_format
                          ) -> list[tuple[str, Kernel, Any]]:
    """(graph, kernel, its ``KernelSource``) of every kernel of ``model``'s bf16 training
    step on an input of ``shape`` (in ``memory_format``), generated for CUDA on this
    machine (nothing built)."""
    from ember.aot.config import AotConfig
    from ember.aot.pipeline import aot_compile
    from ember.frontend import capture
    from ember.inductor.compile import compile_graph
    from ember.inductor.passes import run_passes

    model = Loss(model).to(device="meta", dtype=torch.bfloat16)
    x = torch.empty(shape, dtype=torch.bfloat16, device="meta").contiguous(
        memory_format=memory_format).requires_grad_(True)
    program = aot_compile(capture(model, x), AotConfig(training=True))
    for graph in program.graphs.values():
        for node in graph.nodes:
            node.meta, node.args, node.kwargs = (
                _on_cuda(node.meta), _on_cuda(node.args), _on_cuda(node.kwargs))
    program = run_passes(program)
    return [(name, kernel, source)
            for name in ("forward", "backward")
            for kernel, source in compile_graph(program, name, torch.device("cuda")).kernels]


def cuda_training_kernels(model: nn.Module, shape: tuple[int, ...],
                          memory_format: torch.memory_format = torch.contiguous_format
                          ) -> str:
    """The launch summary of every Triton kernel of ``model``'s bf16 training step on
    ``shape`` (:func:`cuda_training_sources`): one line a kernel (its grid, blocks and
    warps; a split reduction's partial launch first)."""
    return "\n".join(f"{graph} {kernel.name}: {_launch(source.meta)}"
                     for graph, kernel, source in cuda_training_sources(model, shape,
                                                                        memory_format))


def _launch(meta: Any) -> str:
    def one(grid: Any, constexprs: dict[str, int], warps: Any = None) -> str:
        blocks = " ".join(f"{k}={v}" for k, v in constexprs.items())
        return f"grid {tuple(grid)} {blocks}" + (f" w{warps}" if warps else "")

    text = one(meta["grid"], meta["constexprs"], meta["num_warps"])
    split = meta.get("split")
    if split:
        return f"split {one(split['grid'], split['constexprs'])} -> {text}"
    return text


def test_rms_norm_training_kernels_at_full_size() -> None:
    got = cuda_training_kernels(RMSNorm(4096), (16384, 4096))
    assert got == """\
forward kernel0: grid (16384, 1, 1) XBLOCK=1 RBLOCK=4096 w4
forward kernel1: split grid (1, 256, 1) XBLOCK=1 RBLOCK=4096 -> grid (1, 1, 1) XBLOCK=1 SBLOCK=256 w16
backward kernel0: split grid (261, 1, 1) XBLOCK=1 RBLOCK=4096 -> grid (128, 1, 1) XBLOCK=1 RBLOCK=32 SBLOCK=64 w4"""


def test_layer_norm_and_batch_norm_training_kernels_at_full_size() -> None:
    """The LayerNorm's weight and bias gradients are summed by its ``dx`` kernel (512
    programs of 32 rows, ``mixed_writer.py``), then combined by 128 programs of 32
    columns. BatchNorm1d's per-feature statistics are split column reductions of
    64-wide bf16 tiles: 1024 programs, not 4096 programs each walking one strided
    column. The statistics are one pass (the sum and the ``m2`` in one kernel); the
    second forward split is the loss's sum."""
    got = cuda_training_kernels(SoftmaxLayerNorm(4096), (16384, 4096))
    assert got == """\
forward kernel0: grid (16384, 1, 1) XBLOCK=1 RBLOCK=4096 w4
forward kernel1: split grid (1, 256, 1) XBLOCK=1 RBLOCK=4096 -> grid (1, 1, 1) XBLOCK=1 SBLOCK=256 w16
backward kernel0: split grid (261, 1, 1) XBLOCK=1 RBLOCK=4096 -> grid (128, 1, 1) XBLOCK=1 RBLOCK=32 SBLOCK=64 w4"""
    got = cuda_training_kernels(BatchNormReLU(4096, 1), (16384, 4096))
    assert got == """\
forward kernel0: split grid (64, 16, 1) XBLOCK=64 RBLOCK=64 -> grid (64, 1, 1) XBLOCK=64 SBLOCK=16 w8
forward kernel1: split grid (1, 256, 1) XBLOCK=1 RBLOCK=4096 -> grid (1, 1, 1) XBLOCK=1 SBLOCK=256 w16
backward kernel0: split grid (64, 16, 1) XBLOCK=64 RBLOCK=64 -> grid (64, 1, 1) XBLOCK=64 SBLOCK=16 w8
backward kernel1: grid (65536, 1, 1) XBLOCK=1024 w4"""


def test_batch_norm_2d_training_kernels_at_resnet_size() -> None:
    """BatchNorm2d over 32x64x56x56: per-channel statistics are row reductions of
    N*H*W (contiguous within each image plane), split 4 ways a channel, in one pass (the
    sum and the ``m2``: one kernel where two passes took two)."""
    got = cuda_training_kernels(BatchNormReLU(64, 2), (32, 64, 56, 56))
    assert got == """\
forward kernel0: split grid (64, 4, 1) XBLOCK=1 RBLOCK=4096 -> grid (1, 1, 1) XBLOCK=64 SBLOCK=4 w16
forward kernel1: split grid (1, 256, 1) XBLOCK=1 RBLOCK=4096 -> grid (1, 1, 1) XBLOCK=1 SBLOCK=256 w16
backward kernel0: split grid (64, 4, 1) XBLOCK=1 RBLOCK=4096 -> grid (1, 1, 1) XBLOCK=64 SBLOCK=4 w16
backward kernel1: grid (6272, 1, 1) XBLOCK=1024 w4"""


def test_channels_last_batch_norm_statistics_fill_the_gpu() -> None:
    """Channels-last BatchNorm2d (the layout plan's choice in conv stacks): per-channel
    statistics are column reductions over N*H*W rows, split into 256 chunks a 64-channel
    tile (before: 98 programs for 132 multiprocessors)."""
    got = cuda_training_kernels(BatchNormReLU(64, 2), (32, 64, 56, 56), torch.channels_last)
    assert got == """\
forward kernel0: split grid (1, 256, 1) XBLOCK=64 RBLOCK=64 -> grid (1, 1, 1) XBLOCK=64 SBLOCK=256 w8
forward kernel1: split grid (1, 256, 1) XBLOCK=1 RBLOCK=4096 -> grid (1, 1, 1) XBLOCK=1 SBLOCK=256 w16
backward kernel0: split grid (1, 256, 1) XBLOCK=64 RBLOCK=64 -> grid (1, 1, 1) XBLOCK=64 SBLOCK=256 w8
backward kernel1: grid (6272, 1, 1) XBLOCK=1024 w4"""


#: (outer, reduced, element bytes) -> the column tiling (heuristics.COLUMN_XBLOCKS)
COLUMN_CONFIGS = [
    ((4096, 16384, 2), LaunchConfig(64, 64, False, 8, 1, 16)),
    ((4096, 16384, 4), LaunchConfig(32, 64, False, 8, 1, 8)),
    ((4096, 16384, 8), LaunchConfig(32, 64, False, 8, 1, 8)),
    ((4096, 32768, 2), LaunchConfig(64, 64, False, 8, 1, 16)),
    ((48, 300, 2), LaunchConfig(64, 64, False, 8, 1, 1)),
    # channels-last BatchNorm statistics: channels x N*H*W (batch 32)
    ((64, 32 * 56 * 56, 2), LaunchConfig(64, 64, False, 8, 1, 256)),
    ((128, 32 * 28 * 28, 2), LaunchConfig(64, 64, False, 8, 1, 196)),
    ((256, 32 * 14 * 14, 2), LaunchConfig(64, 64, False, 8, 1, 49)),
    ((512, 32 * 7 * 7, 2), LaunchConfig(64, 64, False, 8, 1, 13)),
    ((64, 32 * 56 * 56, 4), LaunchConfig(32, 64, False, 8, 1, 256)),
    ((16, 32, 2), LaunchConfig(16, 32, True, 2, 1, 1)),
]


@pytest.mark.parametrize("sizes,want", COLUMN_CONFIGS)
def test_column_tiles_by_element_size(sizes: tuple[int, int, int], want: LaunchConfig
                                      ) -> None:
    numel, rnumel, element_bytes = sizes
    assert choose_config(numel, rnumel, columns=True, element_bytes=element_bytes) == want


def _kernel(*loads: tuple[Any, torch.dtype]) -> Kernel:
    r0, x0 = Var("r0", 16384), Var("x0", 4096)
    body = tuple(Load(f"v{i}", f"a{i}", index(r0, x0), dtype)
                 for i, (index, dtype) in enumerate(loads))
    buffers = tuple(Buffer(f"a{i}", dtype, (16384, 4096), (4096, 1))
                    for i, (_, dtype) in enumerate(loads))
    return Kernel("k", (x0,), (r0,), body, buffers)


def test_per_row_loads_do_not_make_a_weight_gradient_a_row_reduction() -> None:
    """dw = sum_rows(x[r, c] * rstd[r]): ``rstd[r0]`` is unit-stride along the reduction
    but one value a row; the tensor-sized ``x`` decides (before: a row reduction of
    4096 programs each reading a column with stride 4096)."""
    x_col = (lambda r, x: add(mul(r, 4096), x), torch.bfloat16)
    rstd = (lambda r, x: r, torch.float32)
    x_row = (lambda r, x: add(mul(x, 16384), r), torch.bfloat16)
    assert column_element_bytes(_kernel(x_col, rstd)) == 2
    assert column_element_bytes(_kernel(x_col, (x_col[0], torch.float32))) == 2
    assert column_element_bytes(_kernel((x_col[0], torch.float32), rstd)) == 4
    assert column_element_bytes(_kernel(x_row, rstd)) == 0
    assert column_element_bytes(_kernel(x_col, x_row)) == 0  # a transposed operand: rows
    assert column_element_bytes(_kernel(rstd)) == 0  # only per-row loads: rows


def _train_step(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    x = x.detach().requires_grad_(True)
    loss = Loss(model)(x)
    loss.backward()
    assert x.grad is not None
    grads = [x.grad] + [p.grad for p in model.parameters() if p.grad is not None]
    return loss.detach(), grads


@pytest.mark.parametrize("name", ["rms_norm", "layer_norm", "batch_norm_1d"])
def test_column_split_training_matches_eager_in_the_interpreter(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """256 rows of 64 features (fp32; 4-row column steps so that the sizes split): the
    weight/bias gradients run in the ``dx`` kernel as sums across its rows (RMSNorm,
    LayerNorm; ``mixed_writer.py``: 16 programs of 16 rows), BatchNorm1d's (and its
    statistics) as split column reductions, through Triton's interpreter, and match
    eager."""
    import copy

    import ember.frontend
    from ember.inductor.codegen.triton import heuristics, mixed_writer
    from ember.inductor.codegen.triton.mixed_writer import MixedReductionWriter
    from ember.inductor.codegen.triton.split_writer import SplitReductionWriter
    from ember.inductor.codegen.triton.testing import triton_for_cpu

    columns: list[int] = []
    mixed: list[int] = []
    write = SplitReductionWriter.write
    write_mixed = MixedReductionWriter.write

    def spy(self: SplitReductionWriter) -> Any:
        columns.append(column_element_bytes(self.kernel))
        return write(self)

    def spy_mixed(self: MixedReductionWriter) -> Any:
        mixed.append(self.programs()[0])
        return write_mixed(self)

    monkeypatch.setattr(SplitReductionWriter, "write", spy)
    monkeypatch.setattr(MixedReductionWriter, "write", spy_mixed)
    monkeypatch.setattr(mixed_writer, "MIXED_PROGRAMS", 16)
    monkeypatch.setattr(mixed_writer, "MIXED_TILE", 1)  # the row kernel's row blocks
    monkeypatch.setattr(mixed_writer, "COMBINE_ROWS", 4)
    monkeypatch.setattr(heuristics, "COLUMN_RBLOCK", 4)
    monkeypatch.setattr(heuristics, "COLUMN_MIN_ROWS", 64)
    torch.manual_seed(0)
    model: nn.Module
    if name == "rms_norm":
        model = RMSNorm(64)
    elif name == "layer_norm":
        model = nn.LayerNorm(64)
        with torch.no_grad():
            model.weight.normal_(1.0, 0.1)
    else:
        model = BatchNormReLU(64, 1)
    eager = copy.deepcopy(model)
    x = torch.randn(256, 64)
    with triton_for_cpu():
        compiled = ember.frontend.compile(model, backend="inductor", options={"strict": True})
        got, got_grads = _train_step(compiled, x)
    want, want_grads = _train_step(eager, x)
    if name == "batch_norm_1d":
        assert 4 in columns, columns  # a split column reduction ran
    else:
        assert mixed == [16], mixed  # one dx kernel summed the columns (16 programs)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-2)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("case", ["rms_norm", "batch_norm_channels_last"])
def test_norm_backward_kernels_compile_for_sm90(case: str) -> None:
    """The 64-wide bf16 column tiles (partial and combining functions; BatchNorm's 256
    chunks a channel) and the dx kernels pass the real compiler for sm_90 (no GPU)."""
    from ember.runtime.compiled.triton_aot import compile_for_target
    from ember.runtime.compiled.triton_kernel import TritonKernelSpec
    from ember.runtime.compiled.triton_launcher import split_from_entry
    from ember.runtime.ir.contracts import TritonSplitMeta

    specs = []
    if case == "rms_norm":
        sources = cuda_training_sources(RMSNorm(4096), (16384, 4096))
    else:
        sources = cuda_training_sources(BatchNormReLU(64, 2), (32, 64, 56, 56),
                                        torch.channels_last)
    for graph, _, source in sources:
        if graph != "backward":
            continue
        meta = source.meta
        spec = TritonKernelSpec(name=source.entry, source=source.source,
                                signature=dict(meta["signature"]),
                                constexprs=dict(meta["constexprs"]),
                                num_warps=meta["num_warps"], num_stages=meta["num_stages"])
        specs.append(spec)
        if "split" in meta:
            split = TritonSplitMeta.from_json(meta["split"], "split")
            specs.append(split_from_entry(spec, split).spec)
    want = (["bwd_kernel0", "bwd_kernel0_partial"] if case == "rms_norm" else
            ["bwd_kernel0", "bwd_kernel0_partial", "bwd_kernel1"])
    assert [s.name for s in specs] == want, specs
    for spec in specs:
        assert ".target sm_90" in compile_for_target(spec).asm["ptx"]


@pytest.mark.parametrize("rnumel,warps", [(1024, 2), (1500, 4), (2048, 4), (4096, 4)])
def test_wide_rows_one_a_program_with_the_tables_warps(rnumel: int, warps: int) -> None:
    assert choose_config(16384, rnumel) == LaunchConfig(1, 1 << (rnumel - 1).bit_length(),
                                                         True, warps)
