"""What code generation returns for one kernel (:class:`TritonKernelCode`: the module and
its launch data) and the small source helpers the writers share."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch
from ember.inductor.codegen.triton.dtypes import scalar_literal, tl_type
from ember.inductor.codegen.triton.ops import to_half
from ember.inductor.loop_ir import Literal


@dataclass(frozen=True)
class SplitLaunch:
    """The first kernel of a split reduction: ``name`` runs over ``grid`` and writes
    partial results into workspaces (one per reduction, ``workspace_numel`` elements of
    ``workspace_dtypes[i]``) that the main kernel combines."""

    name: str
    constexprs: dict[str, int]
    grid: tuple[int | str, int | str, int | str]
    workspace_dtypes: list[str]
    workspace_numel: int | str


@dataclass(frozen=True)
class TritonKernelCode:
    """The generated module of one kernel and what launching it needs: the signature
    (pointers, then the size arguments as ``i64``), constexprs (block sizes) and the
    grid (ints, or size-expression texts over the size arguments, evaluated by the
    launcher at each launch)."""

    name: str
    source: str
    signature: dict[str, str]
    constexprs: dict[str, int]
    grid: tuple[int | str, int | str, int | str]
    num_warps: int
    num_stages: int
    split: SplitLaunch | None = None

    def meta(self) -> dict[str, object]:
        """The launch metadata stored with the source in the compiled artifact (read by
        ``ember.runtime.compiled.triton_launcher``)."""
        meta: dict[str, object] = {
            "signature": dict(self.signature),
            "constexprs": dict(self.constexprs),
            "grid": list(self.grid),
            "num_warps": self.num_warps,
            "num_stages": self.num_stages,
        }
        if self.split is not None:
            meta["split"] = {
                "entry": self.split.name,
                "constexprs": dict(self.split.constexprs),
                "grid": list(self.split.grid),
                "workspace_dtypes": list(self.split.workspace_dtypes),
                "workspace_numel": self.split.workspace_numel,
            }
        return meta


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def identifier(name: str) -> str:
    ident = re.sub(r"\W", "_", name)
    if not ident or ident[0].isdigit():
        ident = "_" + ident
    return ident


# float dtype -> (the bits of -0. as a signed integer, that integer's Triton type)
NEGATIVE_ZERO_BITS = {torch.float32: (-2**31, "tl.int32"), torch.float64: (-2**63, "tl.int64")}


def literal_source(s: Literal) -> str:
    """A 0-d Triton tensor holding the literal ``s``."""
    if s.dtype.is_floating_point and s.value == 0 and math.copysign(1.0, float(s.value)) < 0:
        # NOTE: Triton folds the constant -0. into 0.: built from its bits
        bits, ity = NEGATIVE_ZERO_BITS[torch.float64 if s.dtype == torch.float64
                                       else torch.float32]
        dtype = torch.float64 if s.dtype == torch.float64 else torch.float32
        text = f"tl.full([], {bits}, {ity}).to({tl_type(dtype)}, bitcast=True)"
        return text if s.dtype == dtype else to_half(text, s.dtype)
    if s.dtype in (torch.float16, torch.bfloat16):
        # NOTE: built in float32 and converted: older Triton interpreters (3.6) cannot
        # make 16-bit float constants.
        return to_half(f"tl.full([], {scalar_literal(s.value, s.dtype)}, tl.float32)", s.dtype)
    return f"tl.full([], {scalar_literal(s.value, s.dtype)}, {tl_type(s.dtype)})"
