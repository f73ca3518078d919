"""The custom operators of the corpus (``test_custom_ops_corpus.py``): Python
``torch.library.custom_op`` operators and a C++ ``TORCH_LIBRARY`` extension built with
``torch.utils.cpp_extension.load_inline``.

The C++ build takes tens of seconds; it is cached in the temporary directory under a
name derived from the source, so a machine builds it once (later sessions load the
shared library).
"""

from __future__ import annotations

import hashlib
import inspect
import shutil
import tempfile
from pathlib import Path

import torch


# -- Python operators ---------------------------------------------------------------------
@torch.library.custom_op("ember_corpus::fused_gelu", mutates_args=())
def fused_gelu(x: torch.Tensor) -> torch.Tensor:
    """GELU (tanh form) in one opaque call."""
    return torch.nn.functional.gelu(x, approximate="tanh")


@fused_gelu.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("ember_corpus::scale_", mutates_args=("x",))
def scale_(x: torch.Tensor, k: float) -> None:
    """Multiplies ``x`` by ``k`` in place."""
    x.mul_(k)


@scale_.register_fake
def _(x: torch.Tensor, k: float) -> None:
    return None


@torch.library.custom_op("ember_corpus::ema_", mutates_args=("avg",))
def ema_(avg: torch.Tensor, x: torch.Tensor, momentum: float) -> None:
    """``avg = (1 - momentum) * avg + momentum * x`` in place (a running average)."""
    avg.mul_(1 - momentum).add_(x, alpha=momentum)


@ema_.register_fake
def _(avg: torch.Tensor, x: torch.Tensor, momentum: float) -> None:
    return None


@torch.library.custom_op("ember_corpus::unfaked", mutates_args=())
def unfaked(x: torch.Tensor) -> torch.Tensor:
    """An operator nobody registered a fake kernel for."""
    return x + 1


@torch.library.custom_op("ember_corpus::split_sign", mutates_args=())
def split_sign(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The positive and the negative part of ``x`` (two results)."""
    return x.clamp(min=0), x.clamp(max=0)


@split_sign.register_fake
def _(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), torch.empty_like(x)


@torch.library.custom_op("ember_corpus::poly", mutates_args=())
def poly(x: torch.Tensor, coeffs: list[float], degree: int, flip: bool,
         mode: str) -> torch.Tensor:
    """``sum(coeffs[i] * x**i for i <= degree)``, negated if ``flip``, then ``tanh`` or
    ``sigmoid`` by ``mode`` (non-tensor arguments of every kind)."""
    out = torch.zeros_like(x)
    for i, c in enumerate(coeffs[:degree + 1]):
        out = out + c * x ** i
    out = -out if flip else out
    return torch.tanh(out) if mode == "tanh" else torch.sigmoid(out)


@poly.register_fake
def _(x: torch.Tensor, coeffs: list[float], degree: int, flip: bool,
      mode: str) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("ember_corpus::swish", mutates_args=())
def swish(x: torch.Tensor, beta: float) -> torch.Tensor:
    """``x * sigmoid(beta * x)`` with a registered backward formula."""
    return x * torch.sigmoid(beta * x)


@swish.register_fake
def _(x: torch.Tensor, beta: float) -> torch.Tensor:
    return torch.empty_like(x)


def _swish_setup(ctx: torch.autograd.function.FunctionCtx, inputs: tuple[object, ...],
                 output: torch.Tensor) -> None:
    x, beta = inputs
    ctx.save_for_backward(x)  # type: ignore[attr-defined]
    ctx.beta = beta  # type: ignore[attr-defined]


def _swish_backward(ctx: torch.autograd.function.FunctionCtx,
                    grad: torch.Tensor) -> tuple[torch.Tensor, None]:
    (x,) = ctx.saved_tensors  # type: ignore[attr-defined]
    s = torch.sigmoid(ctx.beta * x)  # type: ignore[attr-defined]
    return grad * (s + ctx.beta * x * s * (1 - s)), None  # type: ignore[attr-defined]


swish.register_autograd(_swish_backward, setup_context=_swish_setup)


# -- a C++ extension ----------------------------------------------------------------------
CPP_NAMESPACE = "ember_corpus_cpp"

CPP_SOURCE = r"""
#include <torch/library.h>

// x + alpha * y, as ATen computes it
at::Tensor scaled_add(const at::Tensor& x, const at::Tensor& y, double alpha) {
  return x.add(y, alpha);
}

// clamps x into [lo, hi] in place
void clamp_inplace(at::Tensor& x, double lo, double hi) { x.clamp_(lo, hi); }

TORCH_LIBRARY(ember_corpus_cpp, m) {
  m.def("scaled_add(Tensor x, Tensor y, float alpha) -> Tensor");
  m.def("clamp_(Tensor(a!) x, float lo, float hi) -> ()");
}

TORCH_LIBRARY_IMPL(ember_corpus_cpp, CPU, m) {
  m.impl("scaled_add", &scaled_add);
  m.impl("clamp_", &clamp_inplace);
}
"""


def build_cpp_operators() -> None:
    """Build (or load the cached build of) the C++ extension and register Python fake
    kernels for its operators. Idempotent.

    Raises:
        RuntimeError: no C++ compiler on the machine (callers skip on it).
    """
    if hasattr(torch.ops, CPP_NAMESPACE) and hasattr(getattr(torch.ops, CPP_NAMESPACE),
                                                     "scaled_add"):
        return
    if shutil.which("c++") is None and shutil.which("g++") is None:
        raise RuntimeError("no C++ compiler (c++ or g++) on PATH")
    from torch.utils.cpp_extension import load_inline

    digest = hashlib.sha256((CPP_SOURCE + torch.__version__).encode()).hexdigest()[:16]
    name = f"ember_corpus_cpp_{digest}"
    build = Path(tempfile.gettempdir()) / name
    build.mkdir(exist_ok=True)
    options: dict[str, object] = {}
    if "no_implicit_headers" in inspect.signature(load_inline).parameters:
        options["no_implicit_headers"] = True  # torch/library.h alone builds 5x faster
    load_inline(name, cpp_sources=[CPP_SOURCE], is_python_module=False,
                build_directory=str(build), extra_cflags=["-O1"], **options)

    @torch.library.register_fake(f"{CPP_NAMESPACE}::scaled_add")
    def _(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
        return torch.empty_like(x)

    @torch.library.register_fake(f"{CPP_NAMESPACE}::clamp_")
    def _(x: torch.Tensor, lo: float, hi: float) -> None:
        return None
