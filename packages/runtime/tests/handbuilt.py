"""Build small Ember programs by hand for runtime tests.

Each call runs the op eagerly on example values to fill in the node's metadata, so the
programs are well-formed without the tracing recorder.
"""

from __future__ import annotations

from typing import Any

import torch
from ember.runtime.ir import (
    Graph,
    InputKind,
    InputSpec,
    Node,
    OutputKind,
    OutputSpec,
    Program,
    ScalarMeta,
    Signature,
    SourceLocation,
    TensorMeta,
    ValueRef,
    normalize_argument,
    resolve_op,
)


def _meta(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return TensorMeta.of(value)
    if isinstance(value, (tuple, list)):
        return tuple(_meta(v) for v in value)
    if isinstance(value, bool):
        return ScalarMeta("bool")
    if isinstance(value, int):
        return ScalarMeta("int")
    if isinstance(value, float):
        return ScalarMeta("float")
    return None


class ProgramBuilder:
    """Builds the ``forward`` graph of a program, one node per method call."""

    def __init__(self, dialect: str = "aten") -> None:
        self.nodes: list[Node] = []
        self.values: dict[str, Any] = {}
        self.inputs: list[InputSpec] = []
        self.tensors: dict[str, torch.Tensor] = {}
        self.dialect = dialect

    def _name(self, base: str) -> str:
        return f"{base}{len(self.nodes)}"

    def input(self, example: Any, kind: InputKind = InputKind.USER_INPUT,
              target: str | None = None, name: str | None = None) -> ValueRef:
        name = name or self._name("arg")
        self.nodes.append(Node(name, "placeholder", name, meta=_meta(example)))
        self.values[name] = example
        self.inputs.append(InputSpec(name, kind, target))
        if target is not None:
            self.tensors[target] = example
        return ValueRef(name)

    def get_attr(self, target: str, tensor: torch.Tensor, op: str = "get_attr") -> ValueRef:
        name = self._name("attr")
        self.tensors[target] = tensor
        self.nodes.append(Node(name, op, target, meta=TensorMeta.of(tensor)))
        self.values[name] = tensor
        return ValueRef(name)

    def _load(self, a: Any) -> Any:
        if isinstance(a, ValueRef):
            v = self.values[a.node]
            return v if a.index is None else v[a.index]
        if isinstance(a, (tuple, list)):
            return [self._load(x) for x in a]
        return a

    def call(self, target: str, *args: Any, line: int | None = None, **kwargs: Any) -> ValueRef:
        name = self._name("v")
        value = resolve_op(target)(*[self._load(a) for a in args],
                                   **{k: self._load(v) for k, v in kwargs.items()})
        source = SourceLocation("model.py", line, "forward") if line is not None else None
        self.nodes.append(Node(
            name, "call", target,
            args=tuple(normalize_argument(a) for a in args),
            kwargs={k: normalize_argument(v) for k, v in kwargs.items()},
            meta=_meta(value), source=source,
        ))
        self.values[name] = value
        return ValueRef(name)

    def finish(self, *outputs: ValueRef,
               kinds: list[OutputSpec] | None = None) -> Program:
        nodes = [*self.nodes, Node("output", "output", "output", args=(tuple(outputs),))]
        specs = kinds if kinds is not None else [OutputSpec(OutputKind.USER_OUTPUT)] * len(outputs)
        return Program(
            graphs={"forward": Graph(nodes)},
            signature=Signature(inputs={"forward": list(self.inputs)},
                                outputs={"forward": list(specs)}),
            dialect=self.dialect,
            tensors=dict(self.tensors),
        )


def mlp_program() -> tuple[Program, dict[str, torch.Tensor]]:
    """relu(x @ w.T + b) * 2 with a parameter, a buffer, and a user input ``x``."""
    torch.manual_seed(0)
    w, b = torch.randn(3, 4), torch.randn(3)
    x = torch.randn(2, 4)
    pb = ProgramBuilder()
    px = pb.input(x, name="x")
    pw = pb.input(w, InputKind.PARAMETER, "fc.weight", name="fc_weight")
    pbias = pb.input(b, InputKind.BUFFER, "fc.bias", name="fc_bias")
    t = pb.call("aten::permute.default", pw, (1, 0))
    mm = pb.call("aten::addmm.default", pbias, px, t)
    r = pb.call("aten::relu.default", mm)
    out = pb.call("aten::mul.Tensor", r, 2.0)
    return pb.finish(out), {"x": x, "w": w, "b": b}


def wrapper_program(source: str) -> Program:
    """A ``compiled`` program of one graph, ``forward(x) = x * 2`` on a CPU tensor of 3,
    whose wrapper (``forward/wrapper.py``, no kernels) is ``source``."""
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3), name="x")
    program: Program = pb.finish(pb.call("aten::mul.Tensor", x, 2.0))
    program.dialect = "compiled"
    program.metadata["compiled"] = {"format": 1, "graphs": {"forward": {
        "wrapper": "forward/wrapper.py", "kernels": [], "constants": {}, "device": "cpu"}}}
    program.metadata["kernels"] = 0
    program.metadata["fallbacks"] = {}
    program.files = {"forward/wrapper.py": source.encode()}
    return program
