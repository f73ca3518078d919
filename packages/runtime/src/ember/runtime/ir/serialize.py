"""``save`` / ``load``: the ``.ember`` container (docs/ir-contract.md).

A ``.ember`` file is a zip archive holding exactly:

``program.json``          the program (:mod:`ember.runtime.ir.program_json`): schema
                          version, producer, graphs, signature, tensor declarations,
                          file names, metadata;
``tensors.safetensors``   the tensor values, keyed by their names (always present,
                          possibly empty);
``files/<name>``          each file of ``Program.files``, byte for byte;
``manifest.json``         the SHA-256 of each other member (schema 1.1 on; see
                          :mod:`ember.runtime.ir.archive`).

No pickle anywhere: tensors go through ``safetensors`` and everything else is JSON, so
loading an untrusted file never runs code; anything malformed is an
:class:`IRFormatError` naming the problem. Reading is bounded
(:mod:`ember.runtime.ir.limits`): the zip's directory is checked before any member is
read, ``files/`` members that ``program.json`` does not declare are refused before they
are read, and JSON is held to a nesting depth and to int64/finite numbers.

A loaded program remembers that it came from a file (``Program.untrusted_origin``)
unless the caller passes ``trusted=True``; running it then refuses operators with
effects outside its tensors and ``compiled`` code (:mod:`ember.runtime.ir.effects`).

Tensors are stored as contiguous CPU copies: strides and sharing between tensors (tied
weights) are not kept, and ``load`` puts each tensor back on the device it was saved
from (or on ``map_location``) with its ``requires_grad`` flag. Dtypes safetensors lacks
(``complex128``, ...) are stored as their raw bytes (a 1-D ``uint8`` tensor) and
reinterpreted on load.
"""

from __future__ import annotations

import json
import os
from typing import IO, Union

import safetensors.torch
import torch
from ember.runtime.ir import torch_names
from ember.runtime.ir.archive import (
    FILES_PREFIX,
    MANIFEST_MEMBER,
    PROGRAM_MEMBER,
    TENSORS_MEMBER,
    ArchiveReader,
    check_file_name,
    write_archive,
)
from ember.runtime.ir.errors import IRFormatError
from ember.runtime.ir.gc_pause import collector_paused
from ember.runtime.ir.graph import Program
from ember.runtime.ir.json_codec import expect_dict, expect_list, expect_str, parse_json
from ember.runtime.ir.limits import DEFAULT_LIMITS, LoadLimits
from ember.runtime.ir.program_json import (
    TensorDecl,
    decode_tensor_decl,
    program_from_json,
    program_to_json,
    read_header,
    upgraded,
)

PathOrFile = Union[str, "os.PathLike[str]", IO[bytes]]

__all__ = ["FILES_PREFIX", "MANIFEST_MEMBER", "PROGRAM_MEMBER", "TENSORS_MEMBER", "load",
           "save"]

# Schema from which every file carries manifest.json.
_MANIFEST_SINCE = (1, 1)
# Errors of parsing and building from hostile data that mean "malformed", not a bug.
_PARSE_ERRORS = (RecursionError, ValueError, OverflowError, MemoryError)

# Dtypes safetensors stores natively; others are stored as raw bytes.
_NATIVE_DTYPES: frozenset[torch.dtype] = frozenset(
    torch_names.DTYPES[name]
    for name in ("float32", "float64", "float16", "bfloat16", "complex64",
                 "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
                 "bool", "float8_e4m3fn", "float8_e5m2")
    if name in torch_names.DTYPES
)


def save(program: Program, path: PathOrFile, *, producer: tuple[str, str] | None = None) -> None:
    """Write ``program`` to ``path`` (a file name or a binary file object) as a ``.ember``
    zip.

    Args:
        program: the program; its tensors may live on any device.
        path: where to write.
        producer: ``(package, version)`` of the stage that made the program; default
            ember-runtime's.

    Raises:
        IRFormatError: for a value the format cannot hold (see ``program_to_json``), a
            meta-device tensor (no values), a file name that is not a plain relative path
            (``archive.check_file_name``).
    """
    doc = program_to_json(program, producer)
    for name in program.files:
        check_file_name(name)
    if "__metadata__" in program.tensors:
        raise IRFormatError("tensor name '__metadata__' is reserved by safetensors")
    text = json.dumps(doc, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    stored = {}
    for name, t in program.tensors.items():
        try:
            stored[name] = _storable(t)
        except IRFormatError as e:
            raise IRFormatError(f"tensor {name!r}: {e}") from None
    members = {PROGRAM_MEMBER: text.encode("ascii"),
               TENSORS_MEMBER: safetensors.torch.save(stored)}
    members.update({FILES_PREFIX + name: data for name, data in program.files.items()})
    write_archive(path, members, frozenset(members) - {TENSORS_MEMBER})


def load(path: PathOrFile, *, map_location: torch.device | str | None = None,
         limits: LoadLimits | None = None, trusted: bool = False) -> Program:
    """Read a ``.ember`` file written by :func:`save` (this schema major, same or older
    minor), run the load checks and return the Program.

    Args:
        path: a file name or a binary file object.
        map_location: put every tensor on this device instead of the one it was saved
            from.
        limits: the size, ratio and nesting limits to hold the file to (default
            :data:`~ember.runtime.ir.limits.DEFAULT_LIMITS`; raise them for bigger
            programs, see :mod:`ember.runtime.ir.limits`).
        trusted: the file is as trusted as your own code. Without it the program's
            ``untrusted_origin`` names the file, and running the program refuses
            operators with effects outside its tensors and, for a ``compiled``
            program, its code (:mod:`ember.runtime.ir.effects`).

    Raises:
        IRFormatError: for anything malformed, naming it: not a zip or a truncated one,
            a member over a limit of ``limits`` (naming the member and the limit), a
            member that ``program.json`` does not declare, a member whose SHA-256 differs
            from ``manifest.json``, a missing ``program.json``, malformed or too deeply
            nested JSON, an unknown schema major, a bad encoding, tensors that differ
            from their declaration, unknown operators, non-SSA graphs.
        OSError: if ``path`` cannot be opened (``FileNotFoundError``, ...).
        RuntimeError: if a tensor's device (say ``cuda:0``) is not available here and
            no ``map_location`` is given.
        ValueError: ``map_location`` names no device.
    """
    limits = DEFAULT_LIMITS if limits is None else limits
    if map_location is not None and not isinstance(map_location, torch.device):
        try:
            map_location = torch.device(map_location)
        except (RuntimeError, TypeError) as e:
            raise ValueError(f"load: map_location={map_location!r} is not a device "
                             f"({e})") from None
    if isinstance(path, (str, os.PathLike)):
        name = os.fspath(path)
        with open(path, "rb") as f, collector_paused():  # a missing file: OSError as usual
            program = _read_program(f, name, limits, map_location)
    else:
        name = str(getattr(path, "name", "<file object>"))
        with collector_paused():
            program = _read_program(path, name, limits, map_location)
    program.untrusted_origin = None if trusted else name
    return program


def _read_program(f: IO[bytes], name: str, limits: LoadLimits,
                  map_location: torch.device | str | None) -> Program:
    with ArchiveReader(f, name, limits) as archive:
        has_manifest = archive.read_manifest()
        if TENSORS_MEMBER not in archive.names:
            raise IRFormatError(f"{name}: the archive has no {TENSORS_MEMBER}")
        doc = parse_json(archive.read(PROGRAM_MEMBER), PROGRAM_MEMBER, limits)
        version, _ = read_header(doc)  # the version check comes before anything else
        doc = upgraded(doc)
        if not has_manifest and (version >= _MANIFEST_SINCE or doc.get("dialect") == "compiled"):
            raise IRFormatError(f"{name}: the archive has no {MANIFEST_MEMBER} (every file "
                                "of schema 1.1 on, and every compiled artifact, has one)")
        declared = {FILES_PREFIX + expect_str(v, f"files[{i}]")
                    for i, v in enumerate(expect_list(doc.get("files"), "files"))}
        undeclared = sorted(set(archive.file_members()) - declared)
        if undeclared:
            raise IRFormatError(f"{name}: the archive holds member(s) {undeclared} that "
                                f"{PROGRAM_MEMBER} does not declare")
        decls = {
            tensor: decode_tensor_decl(v, f"tensors.{tensor}")
            for tensor, v in expect_dict(doc.get("tensors"), "tensors").items()
        }
        tensors = _read_tensors(archive.read(TENSORS_MEMBER), decls, map_location)
        files = {m[len(FILES_PREFIX):]: archive.read(m) for m in archive.file_members()}
    try:
        return program_from_json(doc, tensors, files)
    except _PARSE_ERRORS as e:
        raise IRFormatError(f"{name}: {PROGRAM_MEMBER} describes an impossible program: "
                            f"{type(e).__name__}: {e}") from None


def _read_tensors(
    data: bytes, decls: dict[str, TensorDecl], map_location: torch.device | str | None
) -> dict[str, torch.Tensor]:
    try:
        stored = safetensors.torch.load(data)
    except Exception as e:  # safetensors raises its own error type (and others) on junk
        raise IRFormatError(f"{TENSORS_MEMBER} is not a valid safetensors file: {e}") from e
    result: dict[str, torch.Tensor] = {}
    for name, t in stored.items():
        decl = decls.get(name)
        if decl is None:
            raise IRFormatError(f"{TENSORS_MEMBER} holds tensor {name!r}, which "
                                f"{PROGRAM_MEMBER} does not declare")
        t = _restore(t, decl, name)
        if decl.requires_grad and not (t.is_floating_point() or t.is_complex()):
            raise IRFormatError(f"tensor {name!r}: {PROGRAM_MEMBER} declares requires_grad "
                                f"for a {decl.describe()} tensor (only floating point and "
                                "complex tensors can require gradients)")
        device = map_location if map_location is not None else decl.device
        try:
            t = t.to(device)
        except (RuntimeError, AssertionError) as e:  # torch asserts when CUDA is absent
            raise RuntimeError(f"tensor {name!r} was saved from {decl.device}, where it "
                               f"cannot be put back here ({e}); pass map_location") from e
        result[name] = t.requires_grad_(decl.requires_grad)
    return result


def _storable(t: torch.Tensor) -> torch.Tensor:
    """A contiguous CPU copy, as raw bytes for dtypes safetensors lacks."""
    if t.device.type == "meta":
        raise IRFormatError("a tensor on the meta device has no values to save "
                            "(a stand-in from parse_program without tensors=?)")
    if t.layout != torch.strided:
        raise IRFormatError(f"a {t.layout} tensor cannot be saved: only strided tensors")
    if t.is_quantized:
        raise IRFormatError(f"quantized tensors ({t.dtype}) cannot be saved: their scale "
                            "and zero point have no place in the format")
    # NOTE: always a copy, so that tensors sharing storage can be saved side by side.
    copy = t.detach().to("cpu", copy=True).contiguous()
    if t.dtype in _NATIVE_DTYPES:
        return copy
    return copy.reshape(-1).view(torch.uint8)


def _restore(t: torch.Tensor, decl: TensorDecl, name: str) -> torch.Tensor:
    if decl.dtype not in _NATIVE_DTYPES and t.dtype == torch.uint8 and t.dim() == 1:
        itemsize = torch.empty((), dtype=decl.dtype).element_size()
        numel = 1
        for s in decl.shape:
            numel *= s
        if t.numel() == numel * itemsize:
            # NOTE: the clone starts at offset 0, as a view to a wider dtype needs.
            return t.clone().view(decl.dtype).reshape(decl.shape)
    if t.dtype != decl.dtype or tuple(t.shape) != decl.shape:
        got = TensorDecl(t.dtype, tuple(t.shape), decl.device)
        raise IRFormatError(f"tensor {name!r} in {TENSORS_MEMBER} is {got.describe()} but "
                            f"{PROGRAM_MEMBER} declares {decl.describe()}")
    return t
