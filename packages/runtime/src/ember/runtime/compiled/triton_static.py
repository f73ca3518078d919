"""Triton binaries launched through torch's C++ launcher (``EMBER_TORCH_LAUNCHER``, on by
default).

Triton's own C launcher, given a tensor, calls its ``data_ptr`` method and then asks the
driver for the pointer's attributes, for each pointer of each launch, after parsing a
format string of every argument. torch ships a launcher of its own for Triton binaries
(``torch._C._StaticCudaLauncher``, the one torch.compile's wrappers call): it loads a
cubin and launches it from a string of argument kinds (``"O"``: a pointer, a tensor or
None; ``"i"``/``"l"``/``"K"``: 32- and 64-bit integers; ``"f"``/``"d"``: floats).

:func:`static_launch` makes a binary's launch through it, from what the binary itself
says (:func:`launch_plan`):

* its parameters are the runtime ones of its source signature, less those Triton made
  constants (an integer argument of 1 is specialized away), then one null pointer per
  scratch area Triton's metadata names (``global_scratch_size``,
  ``profile_scratch_size``: this Triton adds a parameter for each); a binary that needs
  scratch memory, more than one CTA, cooperative or PDL launches, or tensor descriptors
  keeps Triton's launcher;
* where the binary comes with its PTX, the number of parameters of its ``.entry`` is
  checked against that list, and a difference keeps Triton's launcher.

The launch keeps the calling convention of a direct launch (:mod:`.triton_binary`),
``c(gx, gy, gz, stream, function, *args)`` with nothing before or after the arguments, so
the direct launch and the one-frame launch (:mod:`.triton_fast_launch`) call it unchanged
(and, while a launch hook is installed, go through Triton's runner as before). Every
refusal is logged under ``cache``.

Measured on an H100 (``docs/benchmarks.md``, session 48): training steps as fast as with
Triton's launcher (a tiny kernel's launch 5.8 us against 5.2-8.5 us), and a warm start
0.05-0.15 s shorter (a stored binary is bound without Triton's module load and launcher
module). ``EMBER_TORCH_LAUNCHER=0`` (``config.torch_launcher``) keeps Triton's launcher
for every binary.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ember.runtime.compiled._torch import static_cuda_launcher
from ember.runtime.config import config
from ember.runtime.compiled.private_cache import process_dir
from ember.runtime.logs import log

__all__ = ["LaunchPlan", "NotStatic", "StaticLaunch", "launch_plan",
           "static_launch"]

#: Triton's scalar types -> the launcher's argument kinds
_KINDS = {"i1": "i", "i8": "b", "i16": "h", "i32": "i", "i64": "l", "u1": "I", "u8": "B",
          "u16": "H", "u32": "I", "u64": "K", "fp16": "f", "bf16": "f", "fp32": "f",
          "f32": "f", "fp64": "d"}
_SCRATCH = ("global_scratch_size", "profile_scratch_size")
_ENTRY = re.compile(r"\.entry\s+[\w$]+\s*\((.*?)\)", re.S)


StaticLaunch = tuple[Callable[..., None], int]
"""``(c, function)``: a binary's launch ``c(gx, gy, gz, stream, function, *args)`` through
torch's launcher, and the handle of its loaded function."""


class NotStatic(Exception):
    """What keeps a binary on Triton's launcher."""


@dataclass(frozen=True)
class LaunchPlan:
    """A binary's launch through torch's launcher: its kernel ``name``, ``warps``,
    ``shared`` memory bytes, the runtime arguments it takes (``kept``: positions in the
    source signature's runtime arguments) with their ``kinds``, and ``scratch`` null
    pointers after them."""

    name: str
    warps: int
    shared: int
    kept: tuple[int, ...]
    kinds: str
    scratch: int

    @property
    def arg_kinds(self) -> str:
        """The kinds of every parameter the binary takes, scratch pointers included."""
        return self.kinds + "O" * self.scratch


def _position(key: Any, names: Sequence[str]) -> int:
    """A constant's key in Triton's source object (an index path, an index or a name) as
    a parameter position."""
    if isinstance(key, tuple):
        if len(key) != 1:
            raise NotStatic(f"a constant inside a tuple argument ({key})")
        key = key[0]
    return names.index(key) if isinstance(key, str) else int(key)


def launch_plan(compiled: Any, runtime: Sequence[str]) -> LaunchPlan:
    """How torch's launcher runs ``compiled`` (Triton's compiled kernel), whose source's
    runtime arguments are named ``runtime``, in order.

    Raises:
        NotStatic: what keeps it on Triton's launcher.
    """
    md = compiled.metadata
    if getattr(md, "num_ctas", 1) != 1:
        raise NotStatic(f"{md.num_ctas} CTAs")
    for flag in ("launch_cooperative_grid", "launch_pdl"):
        if getattr(md, flag, False):
            raise NotStatic(flag)
    if getattr(md, "tensordesc_meta", None):
        raise NotStatic("tensor descriptors")
    scratch = 0
    for field in _SCRATCH:
        if hasattr(md, field):
            if getattr(md, field):
                raise NotStatic(f"{field} {getattr(md, field)}")
            scratch += 1
    signature = dict(compiled.src.signature)
    names = list(signature)
    constants = {_position(k, names) for k in getattr(compiled.src, "constants", {})}
    kept: list[int] = []
    kinds: list[str] = []
    for i, name in enumerate(runtime):
        if name not in signature or names.index(name) != i:
            raise NotStatic(f"argument {name!r} is not parameter {i} of the source")
        ty = signature[name]
        if ty == "constexpr" or i in constants:
            continue
        kind = "O" if ty.startswith("*") else _KINDS.get(ty)
        if kind is None:
            raise NotStatic(f"argument {name!r} of type {ty}")
        kept.append(i)
        kinds.append(kind)
    plan = LaunchPlan(md.name, md.num_warps, md.shared, tuple(kept), "".join(kinds), scratch)
    ptx = getattr(compiled, "asm", {}).get("ptx")
    if ptx is not None:
        entry = _ENTRY.search(ptx if isinstance(ptx, str) else ptx.decode())
        if entry is None or entry.group(1).count(".param") != len(plan.arg_kinds):
            found = "no .entry" if entry is None else entry.group(1).count(".param")
            raise NotStatic(f"its PTX entry takes {found} parameters, the plan "
                            f"{len(plan.arg_kinds)}")
    return plan


@functools.cache
def _cubin_dir() -> Path:
    """This process's private directory of binaries for torch's launcher (made once)."""
    return process_dir("ember-cubins-")


def _cubin_file(cubin: bytes) -> Path:
    """``cubin`` written to this process's private directory (the launcher loads a path);
    a file is written once per binary and never read from a shared place."""
    path = _cubin_dir() / f"{hashlib.sha256(cubin).hexdigest()[:32]}.cubin"
    if not path.exists():
        path.write_bytes(cubin)
    return path


def launch_function(plan: LaunchPlan, launch: Callable[..., None]) -> Callable[..., None]:
    """``c(gx, gy, gz, stream, function, *args)`` over torch's ``launch``: the runtime
    arguments ``plan`` keeps, then its scratch null pointers, in one C call."""
    c: Callable[..., None] = _maker(plan.kept, plan.scratch)(launch, plan.warps, plan.shared,
                                                             plan.arg_kinds)
    return c


@functools.cache
def _maker(kept: tuple[int, ...], scratch: int) -> Callable[..., Callable[..., None]]:
    """The factory of launches passing the runtime arguments at positions ``kept``, then
    ``scratch`` null pointers: compiled once per such shape (a warm start binds a program's
    kernels one after another, most of them of a few shapes)."""
    args = "".join(f"a[{i}], " for i in kept) + "None, " * scratch
    source = (f"def make(L, W, S, T):\n"
              f"    def c(gx, gy, gz, s, f, *a):\n"
              f"        L(f, gx, gy, gz, W, S, T, ({args}), s)\n"
              f"    return c\n")
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<ember static launch {args or 'no arguments'}>", "exec"),  # noqa: S102
         namespace)
    make: Callable[..., Callable[..., None]] = namespace["make"]
    return make


def static_launch(compiled: Any, runtime: Sequence[str],
                  device_index: int) -> StaticLaunch | None:
    """``(c, function)``: the launch ``c(gx, gy, gz, stream, function, *args)`` of
    ``compiled`` through torch's launcher, with its binary loaded on CUDA device
    ``device_index``; None when ``config.torch_launcher`` is off, this torch has no such
    launcher, or the binary is one it does not take (logged under ``cache``)."""
    if not config.torch_launcher:
        return None
    launcher = static_cuda_launcher()
    if launcher is None:
        return None
    load, launch = launcher
    try:
        plan = launch_plan(compiled, runtime)
        function = load(str(_cubin_file(compiled.asm["cubin"])), plan.name, plan.shared,
                        device_index)
    except Exception as e:  # noqa: BLE001 - Triton's launcher stays
        log("cache", f"Triton kernel {getattr(compiled.metadata, 'name', '?')}: Triton's "
                     f"launcher, not torch's ({type(e).__name__}: {e})")
        return None
    return launch_function(plan, launch), function
