"""``save`` / ``load``: the ``.ember`` container (DESIGN.md §3).

A ``.ember`` file is a zip archive holding exactly:

``program.json``          the program (:mod:`ember.runtime.ir.program_json`): schema
                          version, producer, graphs, signature, tensor declarations,
                          file names, metadata;
``tensors.safetensors``   the tensor values, keyed by their names (always present,
                          possibly empty);
``files/<name>``          each file of ``Program.files``, byte for byte.

No pickle anywhere: tensors go through ``safetensors`` and everything else is JSON, so
loading an untrusted file never runs code; anything malformed is an
:class:`IRFormatError` naming the problem.

Tensors are stored as contiguous CPU copies: strides and sharing between tensors (tied
weights) are not kept, and ``load`` puts each tensor back on the device it was saved
from (or on ``map_location``) with its ``requires_grad`` flag. Dtypes safetensors lacks
(``complex128``, ...) are stored as their raw bytes (a 1-D ``uint8`` tensor) and
reinterpreted on load.
"""

from __future__ import annotations

import json
import os
import zipfile
import zlib
from typing import IO, Union

import safetensors.torch
import torch
from ember.runtime.ir import torch_names
from ember.runtime.ir.errors import IRFormatError
from ember.runtime.ir.graph import Program
from ember.runtime.ir.json_codec import expect_dict
from ember.runtime.ir.program_json import (
    TensorDecl,
    decode_tensor_decl,
    program_from_json,
    program_to_json,
    upgraded,
)

PathOrFile = Union[str, "os.PathLike[str]", IO[bytes]]

PROGRAM_MEMBER = "program.json"
TENSORS_MEMBER = "tensors.safetensors"
FILES_PREFIX = "files/"

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
            meta-device tensor (no values), a file name that is empty or ends in '/'.
    """
    doc = program_to_json(program, producer)
    for name in program.files:
        if not name or name.endswith("/"):
            raise IRFormatError(f"file name {name!r}: must be non-empty and not end in '/'")
    if "__metadata__" in program.tensors:
        raise IRFormatError("tensor name '__metadata__' is reserved by safetensors")
    text = json.dumps(doc, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    stored = {}
    for name, t in program.tensors.items():
        try:
            stored[name] = _storable(t)
        except IRFormatError as e:
            raise IRFormatError(f"tensor {name!r}: {e}") from None
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(PROGRAM_MEMBER, text, compress_type=zipfile.ZIP_DEFLATED)
        zf.writestr(TENSORS_MEMBER, safetensors.torch.save(stored))
        for name, data in program.files.items():
            zf.writestr(FILES_PREFIX + name, data, compress_type=zipfile.ZIP_DEFLATED)


def load(path: PathOrFile, *, map_location: torch.device | str | None = None) -> Program:
    """Read a ``.ember`` file written by :func:`save` (this schema major, same or older
    minor), run the load checks and return the Program.

    Args:
        path: a file name or a binary file object.
        map_location: put every tensor on this device instead of the one it was saved
            from.

    Raises:
        IRFormatError: for anything malformed, naming it: not a zip or a truncated one, a
            missing ``program.json``, malformed JSON, an unknown schema major, a bad
            encoding, tensors that differ from their declaration, unknown operators,
            non-SSA graphs.
        OSError: if ``path`` cannot be opened (``FileNotFoundError``, ...).
        RuntimeError: if a tensor's device (say ``cuda:0``) is not available here and
            no ``map_location`` is given.
    """
    if isinstance(path, (str, os.PathLike)):
        with open(path, "rb") as f:  # a missing or unreadable file raises OSError as usual
            members = _read_members(f, os.fspath(path))
    else:
        members = _read_members(path, getattr(path, "name", "<file object>"))
    return _load_members(members, map_location)


def _read_members(f: IO[bytes], name: object) -> dict[str, bytes]:
    """Every member of the zip archive ``f``, by name."""
    try:
        with zipfile.ZipFile(f, "r") as zf:
            infos = zf.infolist()
            members = {info.filename: zf.read(info) for info in infos}
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, ValueError,
            OSError) as e:  # what zipfile and its decompressors raise on corrupt data
        raise IRFormatError(f"{name}: not a valid .ember zip archive: {e}") from e
    if len(members) != len(infos):
        raise IRFormatError(f"{name}: the archive holds a member name twice")
    return members


def _load_members(members: dict[str, bytes],
                  map_location: torch.device | str | None) -> Program:
    if PROGRAM_MEMBER not in members:
        raise IRFormatError(f"the archive has no {PROGRAM_MEMBER}: not an Ember program")
    if TENSORS_MEMBER not in members:
        raise IRFormatError(f"the archive has no {TENSORS_MEMBER}")
    try:
        doc = json.loads(members[PROGRAM_MEMBER].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise IRFormatError(f"{PROGRAM_MEMBER} is not valid JSON: {e}") from e
    doc = upgraded(doc)  # the version check comes before anything else can fail
    decls = {
        name: decode_tensor_decl(v, f"tensors.{name}")
        for name, v in expect_dict(doc.get("tensors"), "tensors").items()
    }
    tensors = _read_tensors(members[TENSORS_MEMBER], decls, map_location)
    files = {m[len(FILES_PREFIX):]: data for m, data in members.items()
             if m.startswith(FILES_PREFIX)}
    unexpected = members.keys() - {PROGRAM_MEMBER, TENSORS_MEMBER} - {
        FILES_PREFIX + f for f in files}
    if unexpected:
        raise IRFormatError(f"the archive holds unexpected member(s) {sorted(unexpected)}")
    return program_from_json(doc, tensors, files)


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
