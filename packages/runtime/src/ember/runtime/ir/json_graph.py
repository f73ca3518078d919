"""JSON encodings of metadata, source locations, nodes, graphs and signatures.

Shapes (every key is always written unless said otherwise; decoders check types and
keys):

* TensorMeta: ``{"tensor": {"dtype": "float32", "sizes": [4, "s0*2"], "strides": [..],
  "device": "cpu", "storage_offset": 0, "requires_grad": false}}`` (a size is a JSON int
  or a symbolic expression string);
* ScalarMeta: ``{"scalar": "int"}``; several results: ``{"tuple": [meta or null, ...]}``;
* SourceLocation: ``{"file": .., "line": .., "function": .., "text": ..}``;
* Node: ``{"name", "op", "target", "args": [..], "kwargs": {..}, "meta", "source"}``;
* Graph: ``{"nodes": [..], "symbols": {"s0": {"lower": 2, "upper": null, "hint": 8}},
  "guards": [{"expr": "s1 == 2*s0", "source": <source or null>}]}`` (``hint`` only for a
  symbol that has one, ``guards`` only when there are some: schema 1.2 on);
* Signature: ``{"inputs": {graph: [{"name", "kind", "target"}]},
  "outputs": {graph: [{"kind", "target"}]}}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from ember.runtime.ir import torch_names
from ember.runtime.ir.errors import IRFormatError
from ember.runtime.ir.graph import (
    Argument,
    Graph,
    InputKind,
    InputSpec,
    Meta,
    Node,
    OutputKind,
    OutputSpec,
    ScalarMeta,
    ShapeGuard,
    Signature,
    SourceLocation,
    SymbolRange,
    SymInt,
    TensorMeta,
    ValueRef,
)
from ember.runtime.ir.json_codec import (
    JSON,
    SCALAR_META_TYPES,
    decode_argument,
    encode_argument,
    expect_bool,
    expect_dict,
    expect_int,
    expect_keys,
    expect_list,
    expect_str,
    optional,
    plain_argument,
)

_INPUT_KINDS = {k.value: k for k in InputKind}
_OUTPUT_KINDS = {k.value: k for k in OutputKind}

# ---- metadata ---------------------------------------------------------------------------


def _encode_symint(s: SymInt) -> JSON:
    if isinstance(s, bool) or not isinstance(s, (int, str)):
        raise IRFormatError(f"size {s!r} is neither an int nor a symbolic expression")
    return s


def _decode_symint(v: JSON, where: str) -> SymInt:
    if isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool)):
        return v
    raise IRFormatError(f"{where}: expected an int or a symbolic size expression, got {v!r}")


def _decode_symints(v: JSON, where: str) -> tuple[SymInt, ...]:
    items = expect_list(v, where)
    # NOTE: the path of an element is formatted only for the error (a training program
    # has tens of thousands of sizes and strides)
    for i, x in enumerate(items):
        if type(x) is not int and not isinstance(x, str):
            _decode_symint(x, f"{where}[{i}]")
    return tuple(cast("list[SymInt]", items))


def _encode_single_meta(m: TensorMeta | ScalarMeta | None) -> JSON:
    if m is None:
        return None
    if isinstance(m, ScalarMeta):
        if m.symbol is not None:
            return {"scalar": m.type, "symbol": m.symbol}
        return {"scalar": m.type}
    if isinstance(m, TensorMeta):
        return {"tensor": {
            "dtype": torch_names.dtype_name(m.dtype),
            "sizes": [_encode_symint(s) for s in m.sizes],
            "strides": [_encode_symint(s) for s in m.strides],
            "device": str(m.device),
            "storage_offset": _encode_symint(m.storage_offset),
            "requires_grad": m.requires_grad,
        }}
    raise IRFormatError(f"{type(m).__name__} is not node metadata")


def encode_meta(m: Meta) -> JSON:
    """The JSON encoding of a node's metadata."""
    if isinstance(m, tuple):
        return {"tuple": [_encode_single_meta(x) for x in m]}
    return _encode_single_meta(m)


_TENSOR_META_KEYS = {"dtype", "sizes", "strides", "device", "storage_offset", "requires_grad"}


def _object(v: JSON, where: str, keys: set[str]) -> dict[str, JSON]:
    """``v`` when it is a JSON object with exactly ``keys``; else the error naming it."""
    if type(v) is dict and v.keys() == keys:  # its keys are then all strings
        return v
    d = expect_dict(v, where)
    expect_keys(d, where, keys, keys)
    return d


# NOTE: the decoders of nodes, metadata and source locations run once per node of every
# program loaded (a warm start loads thousands): they format a JSON path only for an
# error, never for a value that checks out.
def _str(d: dict[str, JSON], key: str, where: str) -> str:
    v = d[key]
    return v if type(v) is str else expect_str(v, f"{where}.{key}")


_INT64_LIMIT = 2**63


def _checked_sizes(sizes: tuple[SymInt, ...], where: str) -> tuple[SymInt, ...]:
    """``sizes``, whose static entries must be sizes a tensor can have."""
    for i, s in enumerate(sizes):
        if isinstance(s, int) and not 0 <= s < _INT64_LIMIT:
            raise IRFormatError(f"{where}[{i}]: size {s} is not in [0, 2**63)")
    return sizes


def _decode_tensor_meta(v: JSON, where: str) -> TensorMeta:
    d = _object(v, where, _TENSOR_META_KEYS)
    offset = d["storage_offset"]
    grad = d["requires_grad"]
    return TensorMeta(
        dtype=torch_names.dtype_from_name(_str(d, "dtype", where), f"{where}.dtype"),
        sizes=_checked_sizes(_decode_symints(d["sizes"], f"{where}.sizes"), f"{where}.sizes"),
        strides=_decode_symints(d["strides"], f"{where}.strides"),
        device=torch_names.device_from_name(_str(d, "device", where), f"{where}.device"),
        storage_offset=(offset if type(offset) is int or type(offset) is str
                        else _decode_symint(offset, f"{where}.storage_offset")),
        requires_grad=(grad if type(grad) is bool
                       else expect_bool(grad, f"{where}.requires_grad")),
    )


def _decode_single_meta(v: JSON, where: str) -> TensorMeta | ScalarMeta | None:
    if v is None:
        return None
    d = expect_dict(v, where)
    if d.keys() == {"tensor"}:
        return _decode_tensor_meta(d["tensor"], f"{where}.tensor")
    if d.keys() in ({"scalar"}, {"scalar", "symbol"}):
        kind = expect_str(d["scalar"], f"{where}.scalar")
        if kind not in SCALAR_META_TYPES:
            raise IRFormatError(f"{where}.scalar: unknown scalar type {kind!r} "
                                f"(one of {sorted(SCALAR_META_TYPES)})")
        if "symbol" in d:
            return ScalarMeta(kind, expect_str(d["symbol"], f"{where}.symbol"))
        return ScalarMeta(kind)
    raise IRFormatError(f"{where}: bad meta encoding with keys {sorted(d)}")


def decode_meta(v: JSON, where: str) -> Meta:
    """Decode a node's metadata; ``where`` names it in errors."""
    if isinstance(v, dict) and v.keys() == {"tuple"}:
        items = expect_list(v["tuple"], f"{where}.tuple")
        return tuple(_decode_single_meta(x, f"{where}.tuple[{i}]") for i, x in enumerate(items))
    return _decode_single_meta(v, where)


# ---- source locations and nodes ---------------------------------------------------------


def encode_source(s: SourceLocation | None) -> JSON:
    if s is None:
        return None
    return {"file": s.file, "line": s.line, "function": s.function, "text": s.text}


_SOURCE_KEYS = {"file", "line", "function", "text"}


def decode_source(v: JSON, where: str) -> SourceLocation | None:
    if v is None:
        return None
    d = _object(v, where, _SOURCE_KEYS)
    line = d["line"]
    return SourceLocation(
        file=_str(d, "file", where),
        line=line if type(line) is int else expect_int(line, f"{where}.line"),
        function=_str(d, "function", where),
        text=_str(d, "text", where),
    )


def encode_node(n: Node) -> JSON:
    """The JSON encoding of one node."""
    return {
        "name": n.name,
        "op": n.op,
        "target": n.target,
        "args": [encode_argument(a) for a in n.args],
        "kwargs": {k: encode_argument(a) for k, a in n.kwargs.items()},
        "meta": encode_meta(n.meta),
        "source": encode_source(n.source),
    }


_NODE_KEYS = {"name", "op", "target", "args", "kwargs", "meta", "source"}
# the arguments that decode to themselves
_SCALAR_TYPES = frozenset((type(None), bool, int, str, float))


def _decode_arguments(args: list[JSON], where: str) -> tuple[Argument, ...]:
    found: list[Argument] = []
    for i, a in enumerate(args):
        if type(a) in _SCALAR_TYPES:
            found.append(cast("Argument", a))
        else:
            ref = plain_argument(a)
            found.append(ref if ref is not None else decode_argument(a, f"{where}.args[{i}]"))
    return tuple(found)


def decode_node(v: JSON, where: str) -> Node:
    """Decode one node (its op and target are checked later, by the load checks)."""
    d = _object(v, where, _NODE_KEYS)
    args = d["args"]
    kwargs = d["kwargs"]
    if type(args) is not list:
        args = expect_list(args, f"{where}.args")
    if type(kwargs) is not dict or kwargs:
        kwargs = expect_dict(kwargs, f"{where}.kwargs")
    return Node(
        name=_str(d, "name", where),
        op=_str(d, "op", where),
        target=_str(d, "target", where),
        args=_decode_arguments(args, where),
        kwargs={k: decode_argument(a, f"{where}.kwargs.{k}") for k, a in kwargs.items()},
        meta=decode_meta(d["meta"], f"{where}.meta"),
        source=decode_source(d["source"], f"{where}.source"),
    )


_REF_KEYS = {"ref", "index"}


class NodeDecoder:
    """Decodes the nodes of one document (every graph of a ``program.json``).

    A node encoded the common way is decoded inline: each value's type is checked
    exactly (``type(x) is int``; JSON makes no subclasses) without formatting a JSON
    path. Anything else, and so every error, takes the checks of :func:`decode_node`
    and its helpers, which name the path; a part that is not the common case (an
    argument list, a metadata entry, a source location) takes them alone.

    Equal encodings of a tensor's metadata, a source location or a reference decode to
    one shared object (all three are immutable): a training program of ~2,650 nodes has
    ~50 distinct metadata and ~20 source locations. An encoding is looked up only once
    every part of it has passed its type check, so that values Python holds equal but
    the format tells apart (``1``, ``1.0``, ``true``) never share an entry.
    """

    def __init__(self) -> None:
        self._metas: dict[tuple[object, ...], TensorMeta] = {}
        self._sources: dict[tuple[str, int, str, str], SourceLocation] = {}
        self._refs: dict[str, ValueRef] = {}

    def node(self, v: JSON, where: str, index: int) -> Node:
        """Node ``index`` of the graph at JSON path ``where``."""
        if type(v) is dict and v.keys() == _NODE_KEYS:
            name, op, target = v["name"], v["op"], v["target"]
            args, kwargs = v["args"], v["kwargs"]
            if (type(name) is str and type(op) is str and type(target) is str
                    and type(args) is list and type(kwargs) is dict and not kwargs):
                return Node(name, op, target, self._arguments(args, where, index), {},
                            self._meta(v["meta"], where, index),
                            self._source(v["source"], where, index))
        return decode_node(v, f"{where}.nodes[{index}]")

    def _arguments(self, args: list[JSON], where: str, index: int) -> tuple[Argument, ...]:
        found: list[Argument] = []
        for a in args:
            kind = type(a)
            if kind is dict:
                d = cast("dict[str, JSON]", a)
                if len(d) == 1:
                    ref = self._ref(d)
                    if ref is not None:
                        found.append(ref)
                        continue
                    items = d.get("tuple")
                    if type(items) is list:
                        plain = self._plain_tuple(items)
                        if plain is not None:
                            found.append(plain)
                            continue
                elif d.keys() == _REF_KEYS:
                    ref_name, ref_index = d["ref"], d["index"]
                    if type(ref_name) is str and type(ref_index) is int:
                        found.append(ValueRef(ref_name, ref_index))
                        continue
            elif kind in _SCALAR_TYPES:
                found.append(cast("Argument", a))
                continue
            return _decode_arguments(args, f"{where}.nodes[{index}]")
        return tuple(found)

    def _ref(self, d: dict[str, JSON]) -> ValueRef | None:
        """``d`` decoded when it is ``{"ref": name}`` (a one-key dict), else None."""
        name = d.get("ref")
        if type(name) is not str:
            return None
        ref = self._refs.get(name)
        if ref is None:
            ref = self._refs[name] = ValueRef(name, None)
        return ref

    def _plain_tuple(self, items: list[JSON]) -> tuple[Argument, ...] | None:
        """The tuple of ``items`` when each is a scalar or a ``{"ref": name}``, else
        None."""
        found: list[Argument] = []
        for x in items:
            if type(x) in _SCALAR_TYPES:
                found.append(cast("Argument", x))
                continue
            ref = self._ref(x) if type(x) is dict and len(x) == 1 else None
            if ref is None:
                return None
            found.append(ref)
        return tuple(found)

    def _meta(self, v: JSON, where: str, index: int) -> Meta:
        if v is None:
            return None
        t = v.get("tensor") if type(v) is dict and len(v) == 1 else None
        if type(t) is dict and t.keys() == _TENSOR_META_KEYS:
            dtype, device, sizes, strides = t["dtype"], t["device"], t["sizes"], t["strides"]
            offset, grad = t["storage_offset"], t["requires_grad"]
            if (type(dtype) is str and type(device) is str and type(grad) is bool
                    and (type(offset) is int or type(offset) is str)
                    and type(sizes) is list and type(strides) is list):
                for x in sizes + strides:
                    if type(x) is not int and type(x) is not str:
                        return decode_meta(v, f"{where}.nodes[{index}].meta")
                key = (dtype, tuple(sizes), tuple(strides), device, offset, grad)
                meta = self._metas.get(key)
                if meta is None:  # the names are checked once, by the full decoder
                    meta = self._metas[key] = _decode_tensor_meta(
                        t, f"{where}.nodes[{index}].meta.tensor")
                return meta
        return decode_meta(v, f"{where}.nodes[{index}].meta")

    def _source(self, v: JSON, where: str, index: int) -> SourceLocation | None:
        if v is None:
            return None
        if type(v) is dict and v.keys() == _SOURCE_KEYS:
            file, line, function, text = v["file"], v["line"], v["function"], v["text"]
            if (type(file) is str and type(line) is int and type(function) is str
                    and type(text) is str):
                key = (file, line, function, text)
                source = self._sources.get(key)
                if source is None:
                    source = self._sources[key] = SourceLocation(file, line, function, text)
                return source
        return decode_source(v, f"{where}.nodes[{index}].source")


# ---- graphs and signatures --------------------------------------------------------------


def _encode_range(r: SymbolRange) -> JSON:
    d: dict[str, JSON] = {"lower": r.lower, "upper": r.upper}
    if r.hint is not None:
        d["hint"] = r.hint
    return d


def encode_graph(g: Graph) -> JSON:
    """The JSON encoding of a graph: its nodes, its symbols' ranges and hints, and its
    guards (the key only when there are some)."""
    d: dict[str, JSON] = {
        "nodes": [encode_node(n) for n in g.nodes],
        "symbols": {s: _encode_range(r) for s, r in g.symbols.items()},
    }
    if g.guards:
        d["guards"] = [{"expr": guard.expr, "source": encode_source(guard.source)}
                       for guard in g.guards]
    return d


def _decode_guard(v: JSON, where: str) -> ShapeGuard:
    d = expect_dict(v, where)
    expect_keys(d, where, {"expr", "source"}, {"expr", "source"})
    return ShapeGuard(expect_str(d["expr"], f"{where}.expr"),
                      decode_source(d["source"], f"{where}.source"))


def decode_graph(v: JSON, where: str, nodes_from: NodeDecoder | None = None) -> Graph:
    """Decode one graph; ``nodes_from``: the decoder of the document's nodes (one for
    every graph of a program shares their metadata and source locations)."""
    decoder = nodes_from if nodes_from is not None else NodeDecoder()
    d = expect_dict(v, where)
    expect_keys(d, where, {"nodes", "symbols"}, {"nodes", "symbols", "guards"})
    nodes = expect_list(d["nodes"], f"{where}.nodes")
    symbols: dict[str, SymbolRange] = {}
    for name, r in expect_dict(d["symbols"], f"{where}.symbols").items():
        at = f"{where}.symbols.{name}"
        rd = expect_dict(r, at)
        expect_keys(rd, at, {"lower", "upper"}, {"lower", "upper", "hint"})
        symbols[name] = SymbolRange(expect_int(rd["lower"], f"{at}.lower"),
                                    optional(rd["upper"], f"{at}.upper", expect_int),
                                    optional(rd.get("hint"), f"{at}.hint", expect_int))
    guards = expect_list(d.get("guards", []), f"{where}.guards")
    return Graph(
        nodes=[decoder.node(n, where, i) for i, n in enumerate(nodes)],
        symbols=symbols,
        guards=[_decode_guard(g, f"{where}.guards[{i}]") for i, g in enumerate(guards)],
    )


def encode_signature(sig: Signature) -> JSON:
    return {
        "inputs": {
            g: [{"name": s.name, "kind": s.kind.value, "target": s.target} for s in specs]
            for g, specs in sig.inputs.items()
        },
        "outputs": {
            g: [{"kind": s.kind.value, "target": s.target} for s in specs]
            for g, specs in sig.outputs.items()
        },
    }


def _decode_kind(v: JSON, where: str, kinds: Mapping[str, object]) -> str:
    kind = expect_str(v, where)
    if kind not in kinds:
        raise IRFormatError(f"{where}: unknown kind {kind!r} (one of {sorted(kinds)})")
    return kind


_INPUT_SPEC_KEYS = {"name", "kind", "target"}
_OUTPUT_SPEC_KEYS = {"kind", "target"}


def decode_signature(v: JSON, where: str) -> Signature:
    d = expect_dict(v, where)
    expect_keys(d, where, {"inputs", "outputs"}, {"inputs", "outputs"})
    sig = Signature()
    # NOTE: a training program has hundreds of specs: a JSON path is formatted only for
    # a spec that is not the common case (the full checks then name the problem)
    for g, specs in expect_dict(d["inputs"], f"{where}.inputs").items():
        inputs = sig.inputs[g] = []
        for i, s in enumerate(expect_list(specs, f"{where}.inputs.{g}")):
            if type(s) is dict and s.keys() == _INPUT_SPEC_KEYS:
                name, kind, target = s["name"], s["kind"], s["target"]
                kind = _INPUT_KINDS.get(kind) if type(kind) is str else None
                if type(name) is str and kind is not None and (
                        target is None or type(target) is str):
                    inputs.append(InputSpec(name, kind, target))
                    continue
            inputs.append(_decode_input_spec(s, f"{where}.inputs.{g}[{i}]"))
    for g, specs in expect_dict(d["outputs"], f"{where}.outputs").items():
        outputs = sig.outputs[g] = []
        for i, s in enumerate(expect_list(specs, f"{where}.outputs.{g}")):
            if type(s) is dict and s.keys() == _OUTPUT_SPEC_KEYS:
                out_kind, target = s["kind"], s["target"]
                out_kind = _OUTPUT_KINDS.get(out_kind) if type(out_kind) is str else None
                if out_kind is not None and (target is None or type(target) is str):
                    outputs.append(OutputSpec(out_kind, target))
                    continue
            outputs.append(_decode_output_spec(s, f"{where}.outputs.{g}[{i}]"))
    return sig


def _decode_input_spec(s: JSON, at: str) -> InputSpec:
    sd = expect_dict(s, at)
    expect_keys(sd, at, _INPUT_SPEC_KEYS, _INPUT_SPEC_KEYS)
    kind = _decode_kind(sd["kind"], f"{at}.kind", _INPUT_KINDS)
    return InputSpec(expect_str(sd["name"], f"{at}.name"), _INPUT_KINDS[kind],
                     optional(sd["target"], f"{at}.target", expect_str))


def _decode_output_spec(s: JSON, at: str) -> OutputSpec:
    sd = expect_dict(s, at)
    expect_keys(sd, at, _OUTPUT_SPEC_KEYS, _OUTPUT_SPEC_KEYS)
    kind = _decode_kind(sd["kind"], f"{at}.kind", _OUTPUT_KINDS)
    return OutputSpec(_OUTPUT_KINDS[kind], optional(sd["target"], f"{at}.target", expect_str))
