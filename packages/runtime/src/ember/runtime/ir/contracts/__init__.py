"""Typed stage contracts: what one stage leaves for another in ``Program.metadata``.

``Program.metadata`` is JSON (it is saved as is in ``program.json``). The keys below are
written by a stage and read by another; each has a frozen dataclass with ``to_json()``
and ``from_json(value, where)``, and readers go through the dataclass, never through
``dict.get``. Decoding is strict: a missing, unknown or mistyped field raises
:class:`MetadataError` (an ``IRFormatError`` and a ``ValueError``) naming the key's path
and, for a program read from a file, the file. Dtype and device names decode only
through :mod:`ember.runtime.ir.torch_names`. Other top-level keys are the producer's own
(capture may add any JSON) and are left alone.

=====================  ==================  ===================  =====================
key                    written by          read by              dataclass
=====================  ==================  ===================  =====================
``input_aliases``      recorder (capture)  aot, runtime         :class:`InputAliases`
``aot``                aot                 runtime, verifier    :class:`AotMetadata`
``compiled``           inductor            runtime loader       :class:`CompiledMetadata`
``kernels``            inductor            frontend stats, CLI  :class:`CompileReport`
``fallbacks``          inductor, pipeline  frontend stats, CLI  :class:`CompileReport`
=====================  ==================  ===================  =====================

The on-disk form is the one of artifact format 1 (``COMPILED_FORMAT``); ``extern_ops``
is optional in ``metadata["aot"]`` only because ember-aot 0.1.0 did not write it.
"""

from ember.runtime.ir.contracts.aot import (
    AOT_KEY,
    INPUT_ALIASES_KEY,
    AliasedOutput,
    AotMetadata,
    InputAlias,
    InputAliases,
    PartitionSummary,
    reinterpreted,
)
from ember.runtime.ir.contracts.compiled import (
    COMPILED_FORMAT,
    COMPILED_KEY,
    KERNEL_LANGS,
    CompiledGraphEntry,
    CompiledMetadata,
    CppLaunchMeta,
    KernelEntry,
    LaunchMeta,
    TritonLaunchMeta,
    TritonSplitMeta,
    launch_meta_from_json,
)
from ember.runtime.ir.contracts.fields import MetadataError
from ember.runtime.ir.contracts.report import (
    FALLBACKS_KEY,
    KERNELS_KEY,
    MEMORY_KEY,
    CompileReport,
)

StageContract = InputAliases | AotMetadata | CompiledMetadata | CompileReport
"""The dataclass of one top-level ``Program.metadata`` key."""

METADATA_KEYS: dict[str, type[StageContract]] = {
    INPUT_ALIASES_KEY: InputAliases,
    AOT_KEY: AotMetadata,
    COMPILED_KEY: CompiledMetadata,
    KERNELS_KEY: CompileReport,
    FALLBACKS_KEY: CompileReport,
    MEMORY_KEY: CompileReport,
}
"""Every ``Program.metadata`` key a stage writes -> the dataclass that reads it."""

__all__ = [
    "AOT_KEY", "COMPILED_FORMAT", "COMPILED_KEY", "FALLBACKS_KEY", "INPUT_ALIASES_KEY",
    "KERNELS_KEY", "KERNEL_LANGS", "MEMORY_KEY", "METADATA_KEYS", "AliasedOutput", "AotMetadata",
    "CompileReport", "CompiledGraphEntry", "CompiledMetadata", "CppLaunchMeta",
    "InputAlias", "InputAliases", "KernelEntry", "LaunchMeta", "MetadataError",
    "PartitionSummary", "StageContract", "TritonLaunchMeta", "TritonSplitMeta", "launch_meta_from_json",
    "reinterpreted",
]
