"""What capture and the aot stage leave in ``Program.metadata``.

``metadata["input_aliases"]`` (:class:`InputAliases`, written by the recorder,
:mod:`ember.runtime.tracing`): the inputs that share memory with an earlier input.
``metadata["aot"]`` (:class:`AotMetadata`, written by ``ember-aot``): how the runtime
rebuilds aliased outputs, which outputs take a tangent, the partitioner's choice and
the extern ops. Readers: the aot stage (``functionalize``), the runtime's
``ProgramCallable`` and ``TrainingRunner``, and the core-functional verifier.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import torch
from ember.runtime.ir.contracts.fields import (
    JSON,
    MetadataError,
    at,
    describe,
    program_where,
    read_bool,
    read_int,
    read_ints,
    read_list,
    read_mapping,
    read_object,
    read_str,
    read_strs,
    read_symint,
    read_symints,
)
from ember.runtime.ir.graph import Program, SymInt
from ember.runtime.ir.torch_names import DTYPES, dtype_name

INPUT_ALIASES_KEY = "input_aliases"
AOT_KEY = "aot"


@dataclass(frozen=True)
class InputAlias:
    """An input captured as a view of the earlier input ``base`` (one storage): its
    sizes, strides and absolute storage offset at capture."""

    base: str
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    storage_offset: int

    def to_json(self) -> dict[str, JSON]:
        """The JSON object (inverse of :meth:`from_json`)."""
        return {"base": self.base, "sizes": list(self.sizes), "strides": list(self.strides),
                "storage_offset": self.storage_offset}

    @staticmethod
    def from_json(value: JSON, where: str = "input alias") -> InputAlias:
        """Decode :meth:`to_json`'s object.

        Raises:
            MetadataError: naming ``where`` and the missing, unknown or mistyped key.
        """
        d = read_object(value, where, ("base", "sizes", "strides", "storage_offset"))
        return InputAlias(read_str(d["base"], at(where, "base")),
                          read_ints(d["sizes"], at(where, "sizes")),
                          read_ints(d["strides"], at(where, "strides")),
                          read_int(d["storage_offset"], at(where, "storage_offset"), 0))


@dataclass(frozen=True)
class InputAliases:
    """``metadata["input_aliases"]``: input name -> :class:`InputAlias`."""

    by_input: Mapping[str, InputAlias] = field(default_factory=dict)

    def to_json(self) -> dict[str, JSON]:
        """The JSON object (inverse of :meth:`from_json`)."""
        return {name: alias.to_json() for name, alias in self.by_input.items()}

    @staticmethod
    def from_json(value: JSON, where: str = f"metadata[{INPUT_ALIASES_KEY!r}]") -> InputAliases:
        """Decode :meth:`to_json`'s object.

        Raises:
            MetadataError: naming the input and the bad key.
        """
        return InputAliases({name: InputAlias.from_json(v, at(where, name))
                             for name, v in read_mapping(value, where).items()})

    @staticmethod
    def from_program(program: Program) -> InputAliases:
        """``program``'s input aliases (none when the key is absent).

        Raises:
            MetadataError: the key holds something else.
        """
        value = program.metadata.get(INPUT_ALIASES_KEY)
        if value is None:
            return InputAliases()
        return InputAliases.from_json(value, program_where(program, INPUT_ALIASES_KEY))


def reinterpreted(base: torch.dtype, view: torch.dtype) -> int | None:
    """How many ``view`` elements one ``base`` element holds, where a ``base`` tensor can
    be read as ``view`` (:attr:`AliasedOutput.dtype`): the real dtype of a complex one
    (2, ``view_as_real``), or one of the same size (1, ``Tensor.view(dtype)``)."""
    if base.is_complex and view == base.to_real():
        return 2
    if base.itemsize == view.itemsize and not base.is_complex and not view.is_complex:
        return 1
    return None


@dataclass(frozen=True)
class AliasedOutput:
    """How the runtime rebuilds forward output ``output`` (an ``ALIASED_OUTPUT``) as a
    view of its base: of the forward placeholder named ``base`` (``kind == "input"``)
    or of output number ``int(base)`` (``kind == "output"``), with the sizes, strides
    and storage offset (relative to the base's own offset) eager torch gives it.
    ``identity``: the output is the input itself; ``base_strides``: the base's strides
    at trace time (a base with other strides gets the computed value instead). In a
    symbolic program the sizes, strides and offsets may be expressions over the forward
    graph's size symbols, evaluated for each call's input sizes."""

    output: int
    kind: Literal["input", "output"]
    base: str
    identity: bool
    sizes: tuple[SymInt, ...]
    strides: tuple[SymInt, ...]
    storage_offset: SymInt
    base_strides: tuple[SymInt, ...]
    #: the view's dtype where it reinterprets its base's (``a.real`` of a complex input,
    #: ``x.view(torch.int32)``): the base is read as that dtype first, and ``sizes``,
    #: ``strides`` and ``storage_offset`` count its elements; None: the base's dtype
    dtype: torch.dtype | None = None

    @property
    def base_output(self) -> int | None:
        """The index of the base output (``kind == "output"``), else None."""
        return int(self.base) if self.kind == "output" else None

    def to_json(self) -> dict[str, JSON]:
        """The JSON object (inverse of :meth:`from_json`)."""
        return {"output": self.output, "kind": self.kind, "base": self.base,
                "identity": self.identity, "sizes": list(self.sizes),
                "strides": list(self.strides), "storage_offset": self.storage_offset,
                "base_strides": list(self.base_strides),
                # NOTE: only where the dtype changes, so other entries read as before
                **({} if self.dtype is None else {"dtype": dtype_name(self.dtype)})}

    @staticmethod
    def from_json(value: JSON, where: str = "aliased output") -> AliasedOutput:
        """Decode :meth:`to_json`'s object.

        Raises:
            MetadataError: naming ``where`` and the missing, unknown or mistyped key.
        """
        d = read_object(value, where, ("output", "kind", "base", "identity", "sizes",
                                       "strides", "storage_offset", "base_strides"),
                        ("dtype",))
        dtype = None
        if "dtype" in d:
            name = read_str(d["dtype"], at(where, "dtype"))
            if name not in DTYPES:
                raise MetadataError(f"{at(where, 'dtype')}: not a dtype name: {name!r}")
            dtype = DTYPES[name]
        kind = read_str(d["kind"], at(where, "kind"))
        base = read_str(d["base"], at(where, "base"))
        if kind not in ("input", "output"):
            raise MetadataError(f"{at(where, 'kind')}: expected 'input' or 'output', "
                                f"got {kind!r}")
        if kind == "output" and not base.isdecimal():
            raise MetadataError(f"{at(where, 'base')}: an output base is the output's "
                                f"index, got {base!r}")
        return AliasedOutput(
            output=read_int(d["output"], at(where, "output"), 0),
            kind="input" if kind == "input" else "output",
            base=base,
            identity=read_bool(d["identity"], at(where, "identity")),
            sizes=read_symints(d["sizes"], at(where, "sizes")),
            strides=read_symints(d["strides"], at(where, "strides")),
            storage_offset=read_symint(d["storage_offset"], at(where, "storage_offset")),
            base_strides=read_symints(d["base_strides"], at(where, "base_strides")),
            dtype=dtype,
        )


@dataclass(frozen=True)
class PartitionSummary:
    """The min-cut partitioner's choice, in a training program's ``metadata["aot"]``:
    bytes the forward saves, the values recomputed in the backward, and whether
    ``aot.save_everything`` was set. ``saved_bytes`` is an expression over the
    forward graph's size symbols when a saved value's size is symbolic."""

    saved_bytes: SymInt
    recomputed: tuple[str, ...]
    save_everything: bool


_PARTITION_KEYS = ("saved_bytes", "recomputed", "save_everything")


def _saved_bytes(value: JSON, where: str) -> SymInt:
    return read_symint(value, where) if isinstance(value, str) else read_int(value, where, 0)


def _extern_ops(value: JSON, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise MetadataError(f"{where} must be a list of qualified operator names, got "
                            f"{describe(value)}")
    return tuple(value)


@dataclass(frozen=True)
class AotMetadata:
    """``metadata["aot"]``, written by the aot stage.

    Attributes:
        aliased_outputs: how to rebuild each ``ALIASED_OUTPUT`` of the forward graph.
        differentiable_outputs: forward output indices that take a tangent (empty for an
            inference program).
        extern_ops: non-Core ATen ops left whole (see ``ember.aot.extern_ops``); a file
            of ember-aot 0.1.0 has no such key, read as none.
        partition: the partitioner's choice (training programs only; the keys
            ``saved_bytes``, ``recomputed`` and ``save_everything``, all or none).
    """

    aliased_outputs: tuple[AliasedOutput, ...] = ()
    differentiable_outputs: tuple[int, ...] = ()
    extern_ops: tuple[str, ...] = ()
    partition: PartitionSummary | None = None

    def to_json(self) -> dict[str, JSON]:
        """The JSON object (inverse of :meth:`from_json`)."""
        out: dict[str, JSON] = {
            "aliased_outputs": [a.to_json() for a in self.aliased_outputs],
            "differentiable_outputs": list(self.differentiable_outputs),
        }
        if self.partition is not None:
            out["saved_bytes"] = self.partition.saved_bytes
            out["recomputed"] = list(self.partition.recomputed)
            out["save_everything"] = self.partition.save_everything
        out["extern_ops"] = list(self.extern_ops)
        return out

    @staticmethod
    def from_json(value: JSON, where: str = f"metadata[{AOT_KEY!r}]") -> AotMetadata:
        """Decode :meth:`to_json`'s object.

        Raises:
            MetadataError: naming ``where`` and the missing, unknown or mistyped key.
        """
        d = read_object(value, where, ("aliased_outputs", "differentiable_outputs"),
                        ("extern_ops", *_PARTITION_KEYS))
        present = [k for k in _PARTITION_KEYS if k in d]
        partition = None
        if present:
            if len(present) != len(_PARTITION_KEYS):
                missing = [k for k in _PARTITION_KEYS if k not in d]
                raise MetadataError(f"{where}: has {', '.join(map(repr, present))} but not "
                                    f"{', '.join(map(repr, missing))} (the partitioner "
                                    "writes all three)")
            partition = PartitionSummary(
                _saved_bytes(d["saved_bytes"], at(where, "saved_bytes")),
                read_strs(d["recomputed"], at(where, "recomputed")),
                read_bool(d["save_everything"], at(where, "save_everything")))
        aliased = at(where, "aliased_outputs")
        return AotMetadata(
            aliased_outputs=tuple(AliasedOutput.from_json(v, at(aliased, i))
                                  for i, v in enumerate(read_list(d["aliased_outputs"],
                                                                  aliased))),
            differentiable_outputs=read_ints(d["differentiable_outputs"],
                                             at(where, "differentiable_outputs"), minimum=0),
            extern_ops=_extern_ops(d.get("extern_ops", []), at(where, "extern_ops")),
            partition=partition,
        )

    @staticmethod
    def from_program(program: Program) -> AotMetadata | None:
        """``program``'s ``metadata["aot"]``, or None for a program the aot stage did not
        produce (no such key).

        Raises:
            MetadataError: the key holds something else.
        """
        value = program.metadata.get(AOT_KEY)
        if value is None:
            return None
        return AotMetadata.from_json(value, program_where(program, AOT_KEY))

    def write_to(self, program: Program) -> None:
        """Store this as ``program.metadata["aot"]``."""
        program.metadata[AOT_KEY] = self.to_json()
