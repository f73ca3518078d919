"""The zip container of a ``.ember`` file: bounded reading and the SHA-256 manifest.

:class:`ArchiveReader` looks at the zip's directory first and refuses, before reading
any member, an archive with too many members, a member name outside the layout, a
member whose inflated size or compression ratio breaks the
:class:`~ember.runtime.ir.limits.LoadLimits`, or a duplicate name. Members are then read
one at a time, on request, in bounded chunks, and checked against the manifest.

``manifest.json`` (schema 1.1 on) holds the SHA-256 of every other member::

    {"format": "ember-manifest", "sha256": {"program.json": "<hex>",
                                            "tensors.safetensors": "<hex>",
                                            "files/forward/wrapper.py": "<hex>"}}

It is written by :func:`write_archive` and checked by :meth:`ArchiveReader.read`: a
member whose bytes do not match is an :class:`IRFormatError` naming it. It detects a
corrupted, truncated or edited member; it is not a signature (whoever edits a member can
rewrite the manifest too), so trust in the file's source is still the caller's call.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
import zlib
from collections.abc import Mapping
from typing import IO, Self

from ember.runtime.ir.errors import IRFormatError
from ember.runtime.ir.json_codec import expect_dict, expect_keys, expect_str, parse_json
from ember.runtime.ir.limits import RATIO_FREE_BYTES, LoadLimits

PROGRAM_MEMBER = "program.json"
TENSORS_MEMBER = "tensors.safetensors"
MANIFEST_MEMBER = "manifest.json"
FILES_PREFIX = "files/"
MANIFEST_FORMAT = "ember-manifest"

_CHUNK = 1 << 20
_BAD_SEGMENTS = frozenset({"", ".", ".."})
_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, ValueError,
               OSError)  # what zipfile and its decompressors raise on corrupt data


def write_archive(path: IO[bytes] | str | os.PathLike[str], members: Mapping[str, bytes],
                  compressed: frozenset[str]) -> None:
    """Write ``members`` (name -> bytes) and their manifest as a zip; the names in
    ``compressed`` are deflated, the others stored (tensor bytes gain nothing from
    deflate and are read faster stored)."""
    manifest = {"format": MANIFEST_FORMAT,
                "sha256": {name: hashlib.sha256(data).hexdigest()
                           for name, data in members.items()}}
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            kind = zipfile.ZIP_DEFLATED if name in compressed else zipfile.ZIP_STORED
            zf.writestr(name, data, compress_type=kind)
        zf.writestr(MANIFEST_MEMBER, json.dumps(manifest, separators=(",", ":")),
                    compress_type=zipfile.ZIP_DEFLATED)


def check_file_name(name: str) -> None:
    """Refuse a ``files/`` member name that is not a plain relative path: empty, ending in
    '/', absolute, with a backslash, a NUL or an empty, ``.`` or ``..`` segment. Nothing
    extracts these files today; the rule keeps any tool that does inside its folder.

    Raises:
        IRFormatError: naming the file and the rule it breaks.
    """
    if "\\" in name or "\0" in name or any(seg in _BAD_SEGMENTS for seg in name.split("/")):
        raise IRFormatError(f"file name {name!r}: must be a relative path of non-empty "
                            "segments other than '.' and '..', without '\\' or NUL")


class ArchiveReader:
    """An open ``.ember`` zip whose directory passed the limits; use as a context
    manager.

    Raises (at construction):
        IRFormatError: not a zip, too many members, a name outside the layout or given
            twice, a member over its size limit or compression ratio (naming it and the
            limit).
    """

    def __init__(self, f: IO[bytes], name: str, limits: LoadLimits) -> None:
        self.name = name
        self.limits = limits
        try:
            self._zip = zipfile.ZipFile(f, "r")
        except _ZIP_ERRORS as e:
            raise IRFormatError(f"{name}: not a valid .ember zip archive: {e}") from e
        try:
            archive_size = f.seek(0, 2)
            self._infos = self._check_directory(self._zip.infolist(), archive_size)
        except IRFormatError:
            self._zip.close()
            raise
        self._hashes: dict[str, str] | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self._zip.close()

    @property
    def names(self) -> list[str]:
        """The member names, in archive order."""
        return list(self._infos)

    def file_members(self) -> list[str]:
        """The names of the ``files/`` members."""
        return [n for n in self._infos if n.startswith(FILES_PREFIX)]

    def _check_directory(self, infos: list[zipfile.ZipInfo],
                         archive_size: int) -> dict[str, zipfile.ZipInfo]:
        limits = self.limits
        if len(infos) > limits.max_members:
            raise IRFormatError(f"{self.name}: the archive holds {len(infos)} members, more "
                                f"than {limits.max_members} (LoadLimits.max_members)")
        if not any(info.filename == PROGRAM_MEMBER for info in infos):
            raise IRFormatError(f"{self.name}: the archive has no {PROGRAM_MEMBER}: "
                                "not an Ember program")
        by_name: dict[str, zipfile.ZipInfo] = {}
        files_total = 0
        for info in infos:
            member = info.filename
            if member in by_name:
                raise IRFormatError(f"{self.name}: the archive holds member {member!r} twice")
            by_name[member] = info
            if member in (PROGRAM_MEMBER, MANIFEST_MEMBER):
                cap, what = limits.max_program_bytes, "max_program_bytes"
            elif member == TENSORS_MEMBER:
                cap, what = limits.max_tensor_bytes, "max_tensor_bytes"
            elif member.startswith(FILES_PREFIX):
                try:
                    check_file_name(member[len(FILES_PREFIX):])
                except IRFormatError as e:
                    raise IRFormatError(f"{self.name}: member {member!r}: {e}") from None
                files_total += info.file_size
                cap, what = limits.max_file_bytes, "max_file_bytes"
                if files_total > cap:
                    raise IRFormatError(f"{self.name}: the members under {FILES_PREFIX} "
                                        f"inflate to more than {cap} bytes together "
                                        "(LoadLimits.max_file_bytes)")
            else:
                raise IRFormatError(f"{self.name}: unexpected member {member!r} (a .ember "
                                    f"archive holds {PROGRAM_MEMBER}, {TENSORS_MEMBER}, "
                                    f"{MANIFEST_MEMBER} and {FILES_PREFIX}<name> only)")
            if info.header_offset + info.compress_size > archive_size:
                raise IRFormatError(f"{self.name}: member {member!r} extends past the end "
                                    "of the file: a truncated archive")
            if info.file_size > cap:
                raise IRFormatError(f"{self.name}: member {member!r} inflates to "
                                    f"{info.file_size} bytes, over the limit "
                                    f"(LoadLimits.{what})")
            if info.file_size > RATIO_FREE_BYTES and (
                    info.file_size > limits.max_ratio * info.compress_size):
                ratio = info.file_size / max(info.compress_size, 1)
                raise IRFormatError(f"{self.name}: member {member!r} inflates {ratio:.0f}-fold"
                                    f" ({info.compress_size} -> {info.file_size} bytes), over "
                                    f"the limit of {limits.max_ratio:g} "
                                    "(LoadLimits.max_ratio): a zip bomb?")
        return by_name

    def read_manifest(self) -> bool:
        """Read ``manifest.json`` if the archive has one; return whether it has.

        Raises:
            IRFormatError: a malformed manifest, or one that does not list exactly the
                archive's other members.
        """
        if MANIFEST_MEMBER not in self._infos:
            return False
        where = f"{self.name}: {MANIFEST_MEMBER}"
        doc = expect_dict(parse_json(self._read_bytes(MANIFEST_MEMBER), where, self.limits),
                          where)
        expect_keys(doc, where, {"format", "sha256"}, {"format", "sha256"})
        if doc["format"] != MANIFEST_FORMAT:
            raise IRFormatError(f"{where}: 'format' is {doc['format']!r}, "
                                f"not {MANIFEST_FORMAT!r}")
        hashes = {k: expect_str(v, f"{where}.sha256.{k}")
                  for k, v in expect_dict(doc["sha256"], f"{where}.sha256").items()}
        listed, present = set(hashes), set(self._infos) - {MANIFEST_MEMBER}
        if listed != present:
            raise IRFormatError(
                f"{where}: lists {sorted(listed - present) or 'no'} member(s) the archive "
                f"lacks and lacks {sorted(present - listed) or 'no'} member(s) it holds")
        self._hashes = hashes
        return True

    def read(self, member: str) -> bytes:
        """The bytes of ``member``, checked against the manifest when there is one.

        Raises:
            IRFormatError: a corrupt member, or one whose SHA-256 differs from the
                manifest's (naming the member).
        """
        data = self._read_bytes(member)
        if self._hashes is not None and hashlib.sha256(data).hexdigest() != self._hashes[member]:
            raise IRFormatError(f"{self.name}: member {member!r} does not match its SHA-256 "
                                f"in {MANIFEST_MEMBER}: the file was changed or corrupted")
        return data

    def _read_bytes(self, member: str) -> bytes:
        info = self._infos[member]
        chunks: list[bytes] = []
        size = 0
        try:
            with self._zip.open(info) as f:
                while chunk := f.read(_CHUNK):
                    size += len(chunk)
                    # NOTE: zipfile stops at the directory's size, already checked; this
                    # guard keeps the bound whatever the decompressor does.
                    if size > info.file_size:
                        raise IRFormatError(f"{self.name}: member {member!r} inflates past "
                                            f"the {info.file_size} bytes its entry declares")
                    chunks.append(chunk)
        except _ZIP_ERRORS as e:
            raise IRFormatError(f"{self.name}: member {member!r} is corrupt or truncated: "
                                f"{e}") from e
        return b"".join(chunks)
