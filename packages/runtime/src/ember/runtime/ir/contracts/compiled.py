"""What the inductor leaves in a ``compiled`` program's ``metadata["compiled"]``, read by
the runtime's loader and kernel launchers (layout: ``ember/runtime/compiled/README.md``).

:class:`CompiledMetadata` holds one :class:`CompiledGraphEntry` per graph (wrapper file,
kernels, constants, device); each :class:`KernelEntry` carries the launch data of its
language: :class:`CppLaunchMeta` or :class:`TritonLaunchMeta` (with a
:class:`TritonSplitMeta` for a split reduction).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from ember.runtime.ir import symbolic
from ember.runtime.ir.contracts.fields import (
    JSON,
    describe,
    MetadataError,
    at,
    dtype_names,
    program_where,
    read_device,
    read_dtypes,
    read_from,
    read_int,
    read_list,
    read_mapping,
    read_object,
    read_str,
    read_str_map,
)
from ember.runtime.ir.errors import IRFormatError
from ember.runtime.ir.graph import Program

COMPILED_KEY = "compiled"
COMPILED_FORMAT = 1
"""The artifact format this runtime reads and the inductor writes (``metadata["compiled"]
["format"]``); another number is refused by name."""

KERNEL_LANGS: tuple[str, ...] = ("cpp", "triton")


def _identifier(value: JSON, where: str) -> str:
    name = read_str(value, where)
    if not name.isidentifier():
        raise MetadataError(f"{where}: expected an identifier (a C or Python function "
                            f"name), got {name!r}")
    return name


def _launch_size(value: JSON, where: str) -> int | str:
    """A grid dimension or workspace size: a non-negative int, or the text of a size
    expression (contract grammar, ``ember.runtime.ir.symbolic``) over the kernel's integer
    parameters (at least one), evaluated by the launcher at each launch."""
    if not isinstance(value, str):
        return read_int(value, where, 0)
    try:
        names = symbolic.free_symbols(value)
    except IRFormatError as e:
        raise MetadataError(f"{where}: expected an integer or a size expression, got "
                            f"{describe(value)}: {e}") from None
    if not names:  # a constant is written as an int
        raise MetadataError(f"{where}: expected an integer, got {describe(value)}")
    return value


def _launch_sizes(value: JSON, where: str, length: int) -> tuple[int | str, ...]:
    items = read_list(value, where)
    if len(items) != length:
        raise MetadataError(f"{where}: expected {length} sizes, got {describe(value)}")
    return tuple(_launch_size(v, at(where, i)) for i, v in enumerate(items))


def _check_size_names(size: int | str, signature: Mapping[str, str], where: str) -> None:
    """Every symbol of a symbolic launch size is an integer parameter of the kernel."""
    if isinstance(size, int):
        return
    ints = {name for name, ty in signature.items() if ty in ("i32", "i64")}
    unknown = sorted(symbolic.free_symbols(size) - ints)
    if unknown:
        raise MetadataError(f"{where}: {size!r} uses {', '.join(unknown)}, which is not "
                            "an integer parameter of the kernel")


def _constexprs(value: JSON, where: str) -> dict[str, int | bool]:
    out: dict[str, int | bool] = {}
    for name, v in read_mapping(value, where).items():
        if not isinstance(v, int):
            raise MetadataError(f"{at(where, name)}: expected an integer or a bool, got "
                                f"{v!r}")
        out[name] = v
    return out


@dataclass(frozen=True)
class CppLaunchMeta:
    """A C++ kernel's launch data: the dtype of each pointer argument, in order, and the
    size symbols it takes as ``int64_t`` arguments after them (a kernel over symbolic
    sizes; the wrapper passes their values)."""

    arg_dtypes: tuple[torch.dtype, ...]
    size_args: tuple[str, ...] = ()

    def to_json(self) -> dict[str, JSON]:
        """The JSON object (inverse of :meth:`from_json`)."""
        out: dict[str, JSON] = {"arg_dtypes": dtype_names(self.arg_dtypes)}
        if self.size_args:
            out["size_args"] = list(self.size_args)
        return out

    @staticmethod
    def from_json(value: JSON, where: str = "C++ launch metadata") -> CppLaunchMeta:
        """Decode :meth:`to_json`'s object.

        Raises:
            MetadataError: naming ``where`` and the bad key (an unknown dtype name too).
        """
        d = read_object(value, where, ("arg_dtypes",), ("size_args",))
        size_args = tuple(
            _identifier(v, at(at(where, "size_args"), i))
            for i, v in enumerate(read_list(d.get("size_args", []), at(where, "size_args"))))
        return CppLaunchMeta(read_dtypes(d["arg_dtypes"], at(where, "arg_dtypes")), size_args)


@dataclass(frozen=True)
class TritonSplitMeta:
    """The first kernel of a split reduction: function ``entry`` of the same module runs
    over ``grid`` and writes partial results into workspaces the launcher allocates
    (``workspace_numel`` elements of each of ``workspace_dtypes``). With symbolic sizes,
    grid dimensions and ``workspace_numel`` are size-expression texts over the kernel's
    integer parameters (see :class:`TritonLaunchMeta`)."""

    entry: str
    constexprs: Mapping[str, int | bool]
    grid: tuple[int | str, int | str, int | str]
    workspace_dtypes: tuple[torch.dtype, ...]
    workspace_numel: int | str

    def to_json(self) -> dict[str, JSON]:
        """The JSON object (inverse of :meth:`from_json`)."""
        return {"entry": self.entry, "constexprs": dict(self.constexprs),
                "grid": list(self.grid), "workspace_dtypes": dtype_names(self.workspace_dtypes),
                "workspace_numel": self.workspace_numel}

    @staticmethod
    def from_json(value: JSON, where: str = "Triton split metadata") -> TritonSplitMeta:
        """Decode :meth:`to_json`'s object.

        Raises:
            MetadataError: naming ``where`` and the bad key (an unknown dtype name too).
        """
        d = read_object(value, where, ("entry", "constexprs", "grid", "workspace_dtypes",
                                       "workspace_numel"))
        x, y, z = _launch_sizes(d["grid"], at(where, "grid"), 3)
        return TritonSplitMeta(
            entry=_identifier(d["entry"], at(where, "entry")),
            constexprs=_constexprs(d["constexprs"], at(where, "constexprs")),
            grid=(x, y, z),
            workspace_dtypes=read_dtypes(d["workspace_dtypes"], at(where, "workspace_dtypes")),
            workspace_numel=_launch_size(d["workspace_numel"], at(where, "workspace_numel")),
        )


@dataclass(frozen=True)
class TritonLaunchMeta:
    """A Triton kernel's launch data: the runtime parameters' Triton types (``*fp32``,
    ``i32``) in the order the wrapper passes them, the ``tl.constexpr`` values, the
    grid, warps and pipelining stages, and the split-reduction stage if any.

    A kernel over symbolic sizes takes the size symbols as integer parameters (``"i64"``
    in the signature, after the pointers); a grid dimension is then the text of a size
    expression over them (``"(s0*64+1023)//1024"``), which the launcher evaluates at
    each launch. Static kernels have int grids."""

    signature: Mapping[str, str]
    constexprs: Mapping[str, int | bool]
    grid: tuple[int | str, int | str, int | str]
    num_warps: int
    num_stages: int
    split: TritonSplitMeta | None = None

    def to_json(self) -> dict[str, JSON]:
        """The JSON object (inverse of :meth:`from_json`)."""
        out: dict[str, JSON] = {"signature": dict(self.signature),
                                "constexprs": dict(self.constexprs), "grid": list(self.grid),
                                "num_warps": self.num_warps, "num_stages": self.num_stages}
        if self.split is not None:
            out["split"] = self.split.to_json()
        return out

    @staticmethod
    def from_json(value: JSON, where: str = "Triton launch metadata") -> TritonLaunchMeta:
        """Decode :meth:`to_json`'s object.

        Raises:
            MetadataError: naming ``where`` and the bad key.
        """
        d = read_object(value, where, ("signature", "constexprs", "grid", "num_warps",
                                       "num_stages"), ("split",))
        x, y, z = _launch_sizes(d["grid"], at(where, "grid"), 3)
        signature = read_str_map(d["signature"], at(where, "signature"))
        for i, size in enumerate((x, y, z)):
            _check_size_names(size, signature, at(at(where, "grid"), i))
        split = None
        if d.get("split") is not None:
            split_where = at(where, "split")
            split = TritonSplitMeta.from_json(d["split"], split_where)
            for i, size in enumerate(split.grid):
                _check_size_names(size, signature, at(at(split_where, "grid"), i))
            _check_size_names(split.workspace_numel, signature,
                              at(split_where, "workspace_numel"))
        return TritonLaunchMeta(
            signature=signature,
            constexprs=_constexprs(d["constexprs"], at(where, "constexprs")),
            grid=(x, y, z),
            num_warps=read_int(d["num_warps"], at(where, "num_warps"), 1),
            num_stages=read_int(d["num_stages"], at(where, "num_stages"), 1),
            split=split,
        )


LaunchMeta = CppLaunchMeta | TritonLaunchMeta

_LAUNCH_META: dict[str, type[CppLaunchMeta | TritonLaunchMeta]] = {
    "cpp": CppLaunchMeta, "triton": TritonLaunchMeta}


def launch_meta_from_json(lang: str, value: JSON, where: str) -> LaunchMeta:
    """The launch data of a kernel in language ``lang`` (one of :data:`KERNEL_LANGS`).

    Raises:
        MetadataError: an unknown language, or malformed data (named by ``where``).
    """
    kind = _LAUNCH_META.get(lang)
    if kind is None:
        raise MetadataError(f"{where}: unknown language {lang!r}; known: "
                            f"{', '.join(KERNEL_LANGS)}")
    return kind.from_json(value, where)


@dataclass(frozen=True)
class KernelEntry:
    """One kernel of a compiled graph: the wrapper's name for it, its language, the
    function to call in its source (``entry``), the source's path in ``Program.files``
    and its launch data."""

    name: str
    lang: str
    entry: str
    source: str
    meta: LaunchMeta

    def to_json(self) -> dict[str, JSON]:
        """The JSON object (inverse of :meth:`from_json`)."""
        return {"name": self.name, "lang": self.lang, "entry": self.entry,
                "source": self.source, "meta": self.meta.to_json()}

    @staticmethod
    def from_json(value: JSON, where: str = "kernel entry") -> KernelEntry:
        """Decode :meth:`to_json`'s object.

        Raises:
            MetadataError: naming ``where``, the kernel and the bad key.
        """
        d = read_object(value, where, ("name", "lang", "entry", "source", "meta"))
        name = _identifier(d["name"], at(where, "name"))
        label = f"{where} (kernel {name!r})"
        lang = read_str(d["lang"], at(label, "lang"))
        if lang not in KERNEL_LANGS:
            raise MetadataError(f"{where}: kernel {name!r}: unknown language {lang!r}; "
                                f"known: {', '.join(KERNEL_LANGS)}")
        meta = d["meta"]
        if not isinstance(meta, dict):
            raise MetadataError(f"{label}: kernel {name!r} has no launch metadata ('meta' "
                                f"is {meta!r}, not an object)")
        return KernelEntry(name=name, lang=lang,
                           entry=_identifier(d["entry"], at(label, "entry")),
                           source=read_str(d["source"], at(label, "source")),
                           meta=launch_meta_from_json(lang, meta, at(label, "meta")))


@dataclass(frozen=True)
class CompiledGraphEntry:
    """The generated code of one graph: the wrapper's path in ``Program.files``, its
    kernels, the wrapper's constants (variable -> name in ``Program.tensors``) and the
    device the code runs on."""

    wrapper: str
    kernels: tuple[KernelEntry, ...]
    constants: Mapping[str, str]
    device: torch.device

    def to_json(self) -> dict[str, JSON]:
        """The JSON object (inverse of :meth:`from_json`)."""
        return {"wrapper": self.wrapper, "kernels": [k.to_json() for k in self.kernels],
                "constants": dict(self.constants), "device": str(self.device)}

    @staticmethod
    def from_json(value: JSON, where: str = "compiled graph entry") -> CompiledGraphEntry:
        """Decode :meth:`to_json`'s object.

        Raises:
            MetadataError: naming ``where`` and the bad key (an unknown device too).
        """
        d = read_object(value, where, ("wrapper", "kernels", "constants", "device"))
        kernels = at(where, "kernels")
        return CompiledGraphEntry(
            wrapper=read_str(d["wrapper"], at(where, "wrapper")),
            kernels=tuple(KernelEntry.from_json(k, at(kernels, i))
                          for i, k in enumerate(read_list(d["kernels"], kernels))),
            constants=read_str_map(d["constants"], at(where, "constants")),
            device=read_device(d["device"], at(where, "device")),
        )


@dataclass(frozen=True)
class CompiledMetadata:
    """``metadata["compiled"]``: the artifact format and each graph's entry."""

    graphs: Mapping[str, CompiledGraphEntry] = field(default_factory=dict)
    format: int = COMPILED_FORMAT

    def to_json(self) -> dict[str, JSON]:
        """The JSON object (inverse of :meth:`from_json`)."""
        return {"format": self.format,
                "graphs": {name: g.to_json() for name, g in self.graphs.items()}}

    @staticmethod
    def from_json(value: JSON,
                  where: str = f"metadata[{COMPILED_KEY!r}]") -> CompiledMetadata:
        """Decode :meth:`to_json`'s object.

        Raises:
            MetadataError: naming ``where`` and the bad key; another ``format`` than
                :data:`COMPILED_FORMAT`.
        """
        d = read_object(value, where, ("format", "graphs"))
        fmt = read_int(d["format"], at(where, "format"))
        if fmt != COMPILED_FORMAT:
            raise MetadataError(f"{at(where, 'format')}: artifact format {fmt} is not the "
                                f"one this ember-runtime reads ({COMPILED_FORMAT})")
        graphs = at(where, "graphs")
        return CompiledMetadata(
            {name: CompiledGraphEntry.from_json(g, at(graphs, name))
             for name, g in read_mapping(d["graphs"], graphs).items()}, fmt)

    @staticmethod
    def from_program(program: Program) -> CompiledMetadata:
        """``program.metadata["compiled"]``.

        Raises:
            MetadataError: the key is missing or malformed (named, with the program's file
                when it was read from one).
        """
        if COMPILED_KEY not in program.metadata:
            raise MetadataError(f"compiled program has no metadata['compiled']"
                                f"{read_from(program)}")
        return CompiledMetadata.from_json(program.metadata[COMPILED_KEY],
                                          program_where(program, COMPILED_KEY))

    def write_to(self, program: Program) -> None:
        """Store this as ``program.metadata["compiled"]``."""
        program.metadata[COMPILED_KEY] = self.to_json()
