"""User Triton kernels for ``test_user_triton_kernels.py`` (a corpus of our own kernels).

The test imports this file twice under two module names: once while Triton's
interpreter is on (CPU tensors, CI) and once as ordinary JIT kernels (CUDA, the H200).
Which one it is decides the autotuning configs: the interpreter cannot benchmark, so it
gets one config per kernel.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl


def interpreting() -> bool:
    """Whether ``@triton.jit`` makes interpreted kernels in this import."""
    knobs = getattr(triton, "knobs", None)
    if knobs is not None:
        return bool(knobs.runtime.interpret)
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


INTERPRETED = interpreting()


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * out_stride + cols, num / tl.sum(num, axis=0), mask=mask)


@triton.jit
def layer_norm_fwd_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, stride, n_cols,
                          eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n_cols
    diff = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(diff * diff, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(y_ptr + row * stride + cols, diff * rstd * w + b, mask=mask)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def layer_norm_bwd_kernel(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_ptr, db_ptr,
                          stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    dy = tl.load(dy_ptr + row * stride + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    xhat = tl.where(mask, (x - tl.load(mean_ptr + row)) * tl.load(rstd_ptr + row), 0.0)
    wdy = w * dy
    c1 = tl.sum(xhat * wdy, axis=0) / n_cols
    c2 = tl.sum(wdy, axis=0) / n_cols
    dx = (wdy - (xhat * c1 + c2)) * tl.load(rstd_ptr + row)
    tl.store(dx_ptr + row * stride + cols, dx, mask=mask)
    tl.atomic_add(dw_ptr + cols, dy * xhat, mask=mask)
    tl.atomic_add(db_ptr + cols, dy, mask=mask)


def _matmul_configs() -> list[triton.Config]:
    if INTERPRETED:
        return [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16})]
    return [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}, num_warps=4),
            triton.Config({"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 32}, num_warps=4)]


@triton.autotune(configs=_matmul_configs(), key=["M", "N", "K"])
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                  stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(tl.cdiv(K, BLOCK_K)):
        left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < left) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def dropout_kernel(x_ptr, out_ptr, n, p, seed, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    keep = tl.rand(seed, offs) > p
    tl.store(out_ptr + offs, tl.where(keep, x / (1 - p), 0.0), mask=mask)


@triton.jit
def scale_shift_inplace_kernel(x_ptr, n, scale, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    ptrs = x_ptr + offs  # written through a local alias of the argument
    tl.store(ptrs, tl.load(ptrs, mask=mask) * scale + shift, mask=mask)


@triton.jit
def store_then_reload_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.full((BLOCK,), 1.0, tl.float32), mask=mask)
    tl.debug_barrier()
    # reads what it just stored when x and out are one tensor
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)


@triton.jit
def sincos_kernel(x_ptr, sin_ptr, cos_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(sin_ptr + offs, tl.sin(x), mask=mask)
    tl.store(cos_ptr + offs, tl.cos(x), mask=mask)


@triton.jit
def _sigmoid_gate(x):
    return x * tl.sigmoid(1.702 * x)


@triton.jit
def bias_gelu_kernel(x_ptr, b_ptr, out_ptr, n, n_cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask) + tl.load(b_ptr + offs % n_cols, mask=mask)
    tl.store(out_ptr + offs, _sigmoid_gate(x), mask=mask)


@triton.heuristics({"BLOCK": lambda args: triton.next_power_of_2(args["n_cols"])})
@triton.jit
def row_sum_kernel(x_ptr, out_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(x, axis=0))


@triton.jit
def gather_rows_kernel(idx_ptr, table_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    src = tl.load(idx_ptr + row)  # an index loaded through idx_ptr: idx_ptr is only read
    mask = cols < n_cols
    tl.store(out_ptr + row * n_cols + cols, tl.load(table_ptr + src * n_cols + cols,
                                                    mask=mask), mask=mask)


@triton.jit
def relu_fwd_kernel(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.where(x > 0, x * scale, 0.0), mask=mask)


@triton.jit
def relu_bwd_kernel(x_ptr, dy_ptr, dx_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    dy = tl.load(dy_ptr + offs, mask=mask)
    tl.store(dx_ptr + offs, tl.where(x > 0, dy * scale, 0.0), mask=mask)


def register_scaled_relu(namespace: str) -> object:
    """The operator ``<namespace>::scaled_relu`` (x, scale): a Triton forward and
    backward registered with ``ember.frontend.triton_op`` and autograd."""
    from ember.frontend import triton_op, wrap_triton

    def launch_grid(n: int) -> tuple[int]:
        return (triton.cdiv(n, 64),)

    @triton_op(f"{namespace}::scaled_relu", mutates_args=())
    def scaled_relu(x: torch.Tensor, scale: float) -> torch.Tensor:
        out = torch.empty_like(x)
        wrap_triton(relu_fwd_kernel)[launch_grid(x.numel())](x, out, x.numel(), scale,
                                                             BLOCK=64)
        return out

    @triton_op(f"{namespace}::scaled_relu_backward", mutates_args=())
    def scaled_relu_backward(x: torch.Tensor, dy: torch.Tensor, scale: float) -> torch.Tensor:
        dx = torch.empty_like(x)
        wrap_triton(relu_bwd_kernel)[launch_grid(x.numel())](x, dy, dx, x.numel(), scale,
                                                             BLOCK=64)
        return dx

    def setup_context(ctx: object, inputs: tuple[object, ...], output: object) -> None:
        x, scale = inputs
        ctx.save_for_backward(x)  # type: ignore[attr-defined]
        ctx.scale = scale  # type: ignore[attr-defined]

    def backward(ctx: object, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (x,) = ctx.saved_tensors  # type: ignore[attr-defined]
        # NOTE: the gradient of a sum is an expanded scalar: the kernel wants memory
        dx = scaled_relu_backward(x, grad.contiguous(), ctx.scale)  # type: ignore[attr-defined]
        return dx, None

    scaled_relu.register_autograd(backward, setup_context=setup_context)
    return scaled_relu
