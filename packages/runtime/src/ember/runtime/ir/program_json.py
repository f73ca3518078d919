"""``program.json``: a whole Program as one JSON document (tensor values and file
contents travel beside it, see :mod:`ember.runtime.ir.serialize`).

Document layout (schema 1.0)::

    {"format": "ember-program", "schema_version": "1.0",
     "producer": {"package": "ember-frontend", "version": "0.1.0"},
     "dialect": "aten",
     "graphs": {"forward": <graph>, ...},        # see json_graph
     "signature": <signature>,
     "tensors": {"fc.weight": {"dtype": "float32", "shape": [8, 8], "device": "cpu",
                               "requires_grad": true}, ...},
     "files": ["kernels/k0.cpp", ...],
     "metadata": {...}}                           # free-form JSON
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from ember.runtime.ir import schema, torch_names
from ember.runtime.ir.errors import IRFormatError
from ember.runtime.ir.graph import Program
from ember.runtime.ir.json_codec import (
    JSON,
    expect_bool,
    expect_dict,
    expect_int,
    expect_keys,
    expect_list,
    expect_str,
)
from ember.runtime.ir.json_graph import (
    NodeDecoder,
    decode_graph,
    decode_signature,
    encode_graph,
    encode_signature,
)
from ember.runtime.ir.load_checks import check_program

FORMAT_NAME = "ember-program"
_MAX_SIZE = (1 << 63) - 1

_KEYS = {"format", "schema_version", "producer", "dialect", "graphs", "signature",
         "tensors", "files", "metadata"}


@dataclass(frozen=True)
class TensorDecl:
    """What program.json (or the text form) declares about a tensor the program carries."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    device: torch.device
    requires_grad: bool = False

    @staticmethod
    def of(t: torch.Tensor) -> TensorDecl:
        return TensorDecl(t.dtype, tuple(t.shape), t.device, t.requires_grad)

    def describe(self) -> str:
        return f"{torch_names.dtype_name(self.dtype)}{list(self.shape)}"


def program_to_json(
    program: Program, producer: tuple[str, str] | None = None
) -> dict[str, object]:
    """The ``program.json`` document of ``program``, stamped with the schema version and
    ``producer`` (``(package, version)``; default: ember-runtime's).

    Tensor values and file contents are not in it: only each tensor's dtype, shape,
    device and requires_grad, and the file names.

    Raises:
        IRFormatError: for a value the format cannot hold (an argument outside the closed
            set, metadata that is not JSON data).
    """
    package, version = producer if producer is not None else schema.default_producer()
    _check_json_data(program.metadata, "metadata")
    return {
        "format": FORMAT_NAME,
        "schema_version": schema.format_version(schema.SCHEMA_VERSION),
        "producer": {"package": package, "version": version},
        "dialect": program.dialect,
        "graphs": {name: encode_graph(g) for name, g in program.graphs.items()},
        "signature": encode_signature(program.signature),
        "tensors": {
            name: {
                "dtype": torch_names.dtype_name(t.dtype),
                "shape": list(t.shape),
                "device": str(t.device),
                "requires_grad": t.requires_grad,
            }
            for name, t in program.tensors.items()
        },
        "files": list(program.files),
        "metadata": program.metadata,
    }


def read_header(doc: object) -> tuple[tuple[int, int], str]:
    """The schema version and a ``"package version"`` producer string of a document.

    Raises:
        IRFormatError: if the document is not an Ember program or has no valid version.
    """
    d = expect_dict(doc, "program.json")
    if d.get("format") != FORMAT_NAME:
        raise IRFormatError(f"program.json: 'format' is {d.get('format')!r}, "
                            f"not {FORMAT_NAME!r}: not an Ember program")
    version = schema.parse_version(d.get("schema_version"), "program.json")
    producer = d.get("producer")
    if isinstance(producer, dict):
        text = f"{producer.get('package')} {producer.get('version')}"
    else:
        text = "an unknown producer"
    return version, text


def upgraded(doc: object) -> dict[str, object]:
    """``doc`` brought to the current schema version (itself if it is current).

    Raises:
        IRFormatError: if it is not an Ember program, or of an unknown major or a newer
            minor, or an upgrade step is missing.
    """
    version, producer = read_header(doc)
    d = expect_dict(doc, "program.json")
    if version == schema.SCHEMA_VERSION:
        return d
    d = schema.upgrade(d, version, producer)
    return {**d, "schema_version": schema.format_version(schema.SCHEMA_VERSION)}


def program_from_json(
    doc: object,
    tensors: dict[str, torch.Tensor] | None = None,
    files: dict[str, bytes] | None = None,
) -> Program:
    """The Program of a ``program.json`` document, upgraded from an older schema minor
    if needed and checked (:mod:`ember.runtime.ir.load_checks`).

    Args:
        doc: the parsed JSON document.
        tensors: the values of the declared tensors; None gives meta-device stand-ins
            of the declared dtype and shape.
        files: the contents of the declared files (required when it declares any).

    Raises:
        IRFormatError: naming the first problem: unknown major or newer minor, a bad
            encoding (with its JSON path), tensors or files that differ from the
            declaration, a structural error in a graph.
    """
    d = upgraded(doc)
    expect_keys(d, "program.json", _KEYS, _KEYS)
    dialect = expect_str(d["dialect"], "dialect")
    nodes = NodeDecoder()  # one for every graph: they share metadata and sources
    graphs = {
        name: decode_graph(g, f"graphs.{name}", nodes)
        for name, g in expect_dict(d["graphs"], "graphs").items()
    }
    signature = decode_signature(d["signature"], "signature")
    decls = {
        name: decode_tensor_decl(v, f"tensors.{name}")
        for name, v in expect_dict(d["tensors"], "tensors").items()
    }
    file_names = [expect_str(f, f"files[{i}]") for i, f in enumerate(expect_list(d["files"],
                                                                                "files"))]
    metadata = expect_dict(d["metadata"], "metadata")
    program = Program(
        graphs=graphs,
        signature=signature,
        dialect=dialect,
        tensors=bind_tensors(decls, tensors),
        files=bind_files(file_names, files),
        metadata=metadata,
    )
    check_program(program)
    return program


def decode_tensor_decl(v: JSON, where: str) -> TensorDecl:
    d = expect_dict(v, where)
    keys = {"dtype", "shape", "device", "requires_grad"}
    expect_keys(d, where, keys, keys)
    shape = expect_list(d["shape"], f"{where}.shape")
    for i, size in enumerate(shape):
        if not 0 <= expect_int(size, f"{where}.shape[{i}]") <= _MAX_SIZE:
            raise IRFormatError(f"{where}.shape[{i}]: size {size} is negative or over "
                                "2**63 - 1")
    return TensorDecl(
        dtype=torch_names.dtype_from_name(expect_str(d["dtype"], f"{where}.dtype"),
                                          f"{where}.dtype"),
        shape=tuple(expect_int(s, "") for s in shape),
        device=torch_names.device_from_name(expect_str(d["device"], f"{where}.device"),
                                            f"{where}.device"),
        requires_grad=expect_bool(d["requires_grad"], f"{where}.requires_grad"),
    )


def bind_tensors(
    decls: dict[str, TensorDecl], tensors: dict[str, torch.Tensor] | None
) -> dict[str, torch.Tensor]:
    """The program's tensors: ``tensors`` checked against ``decls`` (same names, dtypes
    and shapes), or meta-device stand-ins when ``tensors`` is None.

    Raises:
        IRFormatError: naming a missing, extra or mismatched tensor.
    """
    if tensors is None:
        stand_ins = {}
        for name, d in decls.items():
            try:
                stand_ins[name] = torch.empty(d.shape, dtype=d.dtype, device="meta")
            except (RuntimeError, TypeError, ValueError, OverflowError) as e:
                raise IRFormatError(f"tensor {name!r}: impossible shape {list(d.shape)} "
                                    f"({type(e).__name__})") from None
        return stand_ins
    missing = [n for n in decls if n not in tensors]
    if missing:
        raise IRFormatError(f"tensor(s) {missing} are declared but their values are absent")
    extra = [n for n in tensors if n not in decls]
    if extra:
        raise IRFormatError(f"tensor(s) {extra} are given but not declared by the program")
    for name, decl in decls.items():
        got = TensorDecl.of(tensors[name])
        if (got.dtype, got.shape) != (decl.dtype, decl.shape):
            raise IRFormatError(f"tensor {name!r} is {got.describe()} but the program "
                                f"declares {decl.describe()}")
    return {name: tensors[name] for name in decls}


def bind_files(names: list[str], files: dict[str, bytes] | None) -> dict[str, bytes]:
    """The program's files: ``files`` checked against the declared ``names``.

    Raises:
        IRFormatError: naming a missing or undeclared file.
    """
    if len(set(names)) != len(names):
        raise IRFormatError(f"a file name is declared twice in {names}")
    given = files if files is not None else {}
    missing = [n for n in names if n not in given]
    if missing:
        raise IRFormatError(f"file(s) {missing} are declared but their contents are absent")
    extra = [n for n in given if n not in names]
    if extra:
        raise IRFormatError(f"file(s) {extra} are given but not declared by the program")
    return {name: given[name] for name in names}


def _check_json_data(v: object, where: str) -> None:
    """Metadata must survive a JSON round trip unchanged: dicts with string keys, lists,
    strings, ints, finite floats, bools and None only (no tuples)."""
    if v is None or isinstance(v, (bool, int, str)):
        return
    if isinstance(v, float):
        if not math.isfinite(v):
            raise IRFormatError(f"{where}: {v} is not JSON (non-finite float)")
        return
    if isinstance(v, list):
        for i, x in enumerate(v):
            _check_json_data(x, f"{where}[{i}]")
        return
    if isinstance(v, dict):
        for k, x in v.items():
            if not isinstance(k, str):
                raise IRFormatError(f"{where}: key {k!r} is not a string")
            _check_json_data(x, f"{where}.{k}")
        return
    raise IRFormatError(f"{where}: a {type(v).__name__} is not JSON data "
                        "(use lists, dicts, strings, numbers, bools and None)")
