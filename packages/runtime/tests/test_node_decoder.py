"""``NodeDecoder``: the inline decode of nodes encoded the common way, and its shared
metadata, source locations and references, give what :func:`decode_node` gives, and
every encoding the full decoder refuses is refused with the same message; the same for
the signature's specs."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from ember.runtime.ir import (
    InputKind,
    InputSpec,
    IRFormatError,
    OutputKind,
    OutputSpec,
    Signature,
    program_to_json,
)
from ember.runtime.ir.json_graph import (
    NodeDecoder,
    decode_graph,
    decode_node,
    decode_signature,
    encode_signature,
)
from ir_samples import SAMPLES, strict

META = {"tensor": {"dtype": "float32", "sizes": [2, "s0"], "strides": ["s0", 1],
                   "device": "cpu", "storage_offset": 0, "requires_grad": False}}
SOURCE = {"file": "m.py", "line": 12, "function": "forward", "text": "y = x + 1"}


def node(name: str, args: list[Any] | None = None, meta: Any = META,
         source: Any = SOURCE, **fields: Any) -> dict[str, Any]:
    found = {"name": name, "op": "call", "target": "aten::add.Tensor", "args": args or [],
             "kwargs": {}, "meta": copy.deepcopy(meta), "source": copy.deepcopy(source)}
    found.update(fields)
    return found


def decode_all(nodes: list[Any]) -> list[Any]:
    """Decode ``nodes`` (JSON text first: the types json.loads gives) with one decoder."""
    nodes = json.loads(json.dumps(nodes))
    decoder = NodeDecoder()
    return [decoder.node(n, "graphs.forward", i) for i, n in enumerate(nodes)]


@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_same_nodes_as_the_full_decoder(sample: str) -> None:
    doc = json.loads(json.dumps(program_to_json(SAMPLES[sample]())))
    decoder = NodeDecoder()
    for name, g in doc["graphs"].items():
        for i, v in enumerate(g["nodes"]):
            fast, full = decoder.node(v, f"graphs.{name}", i), decode_node(v, "")
            # NOTE: strict forms: a NaN argument is unequal to itself (complex NaNs, too)
            for field in ("name", "op", "target", "args", "kwargs", "meta", "source"):
                assert strict(getattr(fast, field)) == strict(getattr(full, field))


def test_equal_encodings_share_one_object() -> None:
    a, b = decode_all([node("a"), node("b", [{"ref": "a"}, {"ref": "a"}, {"tuple": [2, 3]}]),
                       node("c", [{"ref": "a"}])])[1:]
    assert a.meta is b.meta and a.source is b.source
    assert a.args[0] is a.args[1] is b.args[0]
    assert a.kwargs is not b.kwargs  # nodes are changed in place by the stages


@pytest.mark.parametrize(("second", "message"), [
    # each is equal in Python to the first node's (valid) encoding, but malformed
    (node("b", meta={"tensor": {**META["tensor"], "sizes": [2.0, "s0"]}}),
     r"nodes\[1\]\.meta\.tensor\.sizes\[0\]: expected an int or a symbolic size"),
    (node("b", meta={"tensor": {**META["tensor"], "sizes": [True, "s0"]}}),
     r"nodes\[1\]\.meta\.tensor\.sizes\[0\]: expected an int"),
    (node("b", meta={"tensor": {**META["tensor"], "storage_offset": 0.0}}),
     r"nodes\[1\]\.meta\.tensor\.storage_offset: expected an int"),
    (node("b", meta={"tensor": {**META["tensor"], "storage_offset": False}}),
     r"nodes\[1\]\.meta\.tensor\.storage_offset: expected an int"),
    (node("b", meta={"tensor": {**META["tensor"], "requires_grad": 0}}),
     r"nodes\[1\]\.meta\.tensor\.requires_grad: expected true or false"),
    (node("b", source={**SOURCE, "line": 12.0}),
     r"nodes\[1\]\.source\.line: expected an integer, got float 12.0"),
    (node("b", source={**SOURCE, "line": True}),
     r"nodes\[1\]\.source\.line: expected an integer, got bool True"),
    (node("b", [{"ref": "a", "index": True}]),
     r"nodes\[1\]\.args\[0\]\.index: expected an integer"),
    (node("b", [{"ref": "a", "index": 0.0}]),
     r"nodes\[1\]\.args\[0\]\.index: expected an integer"),
])
def test_equal_but_malformed_encodings_are_refused(second: dict[str, Any],
                                                   message: str) -> None:
    first = node("a", [{"ref": "x", "index": 0}])
    with pytest.raises(IRFormatError, match=r"graphs\.forward\." + message):
        decode_all([first, second])


def test_plain_tuples_keep_their_types() -> None:
    a, b, c = decode_all([node("a", [{"tuple": [1, 2]}]), node("b", [{"tuple": [1.0, 2.0]}]),
                          node("c", [{"tuple": [True, None, "x", {"ref": "a"}]}])])
    assert strict(a.args) == strict(((1, 2),)) and strict(b.args) == strict(((1.0, 2.0),))
    assert strict(c.args) == strict(((True, None, "x", decode_all([node("d", [{"ref": "a"}])])[0]
                                      .args[0]),))


@pytest.mark.parametrize(("bad", "message"), [
    (node("b", meta={"tensor": {**META["tensor"], "dtype": "__class__"}}),
     r"nodes\[1\]\.meta\.tensor\.dtype: unknown dtype '__class__'"),
    (node("b", meta={"tensor": {**META["tensor"], "device": "cuda:x"}}),
     r"nodes\[1\]\.meta\.tensor\.device: unknown device 'cuda:x'"),
    (node("b", meta={"tensor": {**META["tensor"], "extra": 1}}),
     r"nodes\[1\]\.meta\.tensor: unexpected key\(s\) \['extra'\]"),
    (node("b", meta={"scalar": "SymInt"}), r"nodes\[1\]\.meta\.scalar: unknown scalar type"),
    (node("b", source={**SOURCE, "file": 3}), r"nodes\[1\]\.source\.file: expected a string"),
    (node("b", [{"tuple": [{"ref": 3}]}]), r"nodes\[1\]\.args\[0\]\.tuple\[0\]\.ref: "
                                           "expected a string"),
    (node("b", [{"dtype": "os"}]), r"nodes\[1\]\.args\[0\]: unknown dtype 'os'"),
    (node("b", kwargs={"alpha": {"pickle": 1}}),
     r"nodes\[1\]\.kwargs\.alpha: bad argument encoding: unknown kind 'pickle'"),
    ({**node("b"), "name": 7}, r"nodes\[1\]\.name: expected a string"),
    (node("b", args={"ref": "a"}), r"nodes\[1\]\.args: expected a JSON array"),
    ([1], r"nodes\[1\]: expected a JSON object"),
])
def test_errors_name_the_node_and_the_problem(bad: Any, message: str) -> None:
    with pytest.raises(IRFormatError, match=r"graphs\.forward\." + message):
        decode_all([node("a"), bad])


def test_graphs_of_a_program_share_the_decoder() -> None:
    decoder = NodeDecoder()
    graph = json.loads(json.dumps({"nodes": [node("a")], "symbols": {}}))
    forward = decode_graph(graph, "graphs.forward", decoder)
    backward = decode_graph(copy.deepcopy(graph), "graphs.backward", decoder)
    assert forward.nodes[0].meta is backward.nodes[0].meta
    assert decode_graph(graph, "graphs.forward") == forward  # a decoder of its own


@pytest.mark.parametrize(("inputs", "outputs", "message"), [
    ([{"name": "x", "kind": ["user_input"], "target": None}], [],
     r"inputs\.forward\[0\]\.kind: expected a string, got list"),
    ([{"name": "x", "kind": {"a": 1}, "target": None}], [],
     r"inputs\.forward\[0\]\.kind: expected a string, got dict"),
    ([{"name": "x", "kind": "weight", "target": None}], [],
     r"inputs\.forward\[0\]\.kind: unknown kind 'weight'"),
    ([{"name": 1, "kind": "user_input", "target": None}], [],
     r"inputs\.forward\[0\]\.name: expected a string"),
    ([{"name": "x", "kind": "parameter", "target": 3}], [],
     r"inputs\.forward\[0\]\.target: expected a string"),
    ([{"name": "x", "kind": "user_input"}], [],
     r"inputs\.forward\[0\]: missing key\(s\) \['target'\]"),
    ([], [{"kind": "user_output", "target": None}, {"kind": ["gradient"], "target": None}],
     r"outputs\.forward\[1\]\.kind: expected a string, got list"),
    ([], [{"kind": "gradient", "target": 0}], r"outputs\.forward\[0\]\.target: expected"),
    ([], [{"kind": "gradient", "target": None, "x": 1}],
     r"outputs\.forward\[0\]: unexpected key\(s\) \['x'\]"),
])
def test_signature_errors_name_the_spec(inputs: list[Any], outputs: list[Any],
                                        message: str) -> None:
    doc = {"inputs": {"forward": inputs}, "outputs": {"forward": outputs}}
    with pytest.raises(IRFormatError, match=r"signature\." + message):
        decode_signature(doc, "signature")


def test_signature_decodes_every_kind() -> None:
    sig = Signature(
        inputs={"forward": [InputSpec(f"i{k.value}", k, None if k == InputKind.USER_INPUT
                                      else "w") for k in InputKind]},
        outputs={"forward": [OutputSpec(k, None if k == OutputKind.USER_OUTPUT else "t")
                             for k in OutputKind], "backward": []})
    decoded = decode_signature(json.loads(json.dumps(encode_signature(sig))), "signature")
    assert decoded == sig
    assert all(type(s.kind) is InputKind for s in decoded.inputs["forward"])
