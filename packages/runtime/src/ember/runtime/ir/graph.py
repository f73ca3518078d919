"""The Ember IR data model: Program, Graph, Node and the values nodes carry.

This module is the one definition of Ember's graph format (docs/ir-contract.md). Every stage
imports it from ``ember.runtime.ir``; nobody keeps a private copy of a graph type.

A :class:`Program` holds named :class:`Graph` objects (``forward``, and for training
``backward``), a :class:`Signature` labelling inputs and outputs, the named tensors it
carries (parameters, buffers, constants), optional files (kernel sources in the
``compiled`` dialect) and free-form JSON metadata.

A :class:`Graph` is a list of :class:`Node` objects in SSA form. The opcodes are a closed
set (:data:`OPCODES`):

``placeholder``  an input of the graph; ``target`` is the input's name.
``call``         an operator call; ``target`` is a qualified op name with overload,
                 ``aten::add.Tensor``, resolved through ``torch.ops``.
``constant``     a tensor constant stored in ``Program.tensors[target]``.
``get_attr``     a parameter or buffer baked into the program, ``Program.tensors[target]``.
``output``       the graph's results: ``args[0]`` is a tuple of values.

Node arguments are a closed set of Python values (:data:`Argument`): references to other
nodes (:class:`ValueRef`), ``None``, ``bool``, ``int``, ``float``, ``str``, ``complex``,
``torch.dtype``, ``torch.device``, ``torch.memory_format``, ``torch.layout``, symbolic
ints (:class:`SymExpr`) and tuples of those (lists are normalised to tuples so that
equality is structural).

Sizes, strides and offsets are :data:`SymInt`: an int, or an expression over the graph's
symbols (grammar and API: :mod:`ember.runtime.ir.symbolic`). ``Graph.symbols`` gives
each symbol's range and hint, ``Graph.guards`` the relations every call must satisfy
beyond the ranges (:class:`ShapeGuard`).

A node that produces several values (``aten::max.dim``, ``aten::split.Tensor``) has a
tuple of metadata entries; its consumers reference one of them with
``ValueRef(name, index)``.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Iterator, Union

import torch

OPCODES: tuple[str, ...] = ("placeholder", "call", "constant", "get_attr", "output")

DIALECTS: tuple[str, ...] = ("aten", "core-functional", "compiled")


@dataclass(frozen=True)
class ValueRef:
    """A reference to the value produced by node ``node`` (``index``: which result of a
    node producing several values; ``None`` when it produces one)."""

    node: str
    index: int | None = None

    def __str__(self) -> str:
        return f"%{self.node}" if self.index is None else f"%{self.node}.{self.index}"


@dataclass(frozen=True)
class SymExpr:
    """A symbolic int argument: ``expr`` is the canonical text of an expression over the
    graph's symbols (``SymExpr("s0*4")``; see :mod:`ember.runtime.ir.symbolic`).
    Concrete ints stay ints. Text form ``sym(s0*4)``, JSON ``{"sym": "s0*4"}``."""

    expr: str

    def __str__(self) -> str:
        return f"sym({self.expr})"


Scalar = Union[None, bool, int, float, str, complex]
Argument = Union[
    Scalar,
    ValueRef,
    torch.dtype,
    torch.device,
    torch.memory_format,
    torch.layout,
    SymExpr,
    tuple["Argument", ...],
]

# A size or stride: an int, or a symbolic expression over the graph's symbols ("s0*4").
SymInt = Union[int, str]


@dataclass(frozen=True)
class SourceLocation:
    """Where in the user's program a node came from."""

    file: str
    line: int
    function: str = ""
    text: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line} in {self.function}" if self.function else (
            f"{self.file}:{self.line}"
        )


@dataclass(frozen=True)
class TensorMeta:
    """Metadata of one tensor value."""

    dtype: torch.dtype
    sizes: tuple[SymInt, ...]
    strides: tuple[SymInt, ...]
    device: torch.device
    storage_offset: SymInt = 0
    requires_grad: bool = False

    @property
    def ndim(self) -> int:
        return len(self.sizes)

    @property
    def is_static(self) -> bool:
        """True when every size is an int (no size symbol)."""
        return all(isinstance(s, int) for s in self.sizes)

    @property
    def numel(self) -> int:
        """The number of elements.

        Raises:
            ValueError: if a size is symbolic (check :attr:`is_static` first).
        """
        n = 1
        for s in self.sizes:
            if not isinstance(s, int):
                raise ValueError(f"the tensor's size {s!r} is symbolic: it has no static "
                                 "number of elements")
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        """The bytes its elements take (``numel`` times the dtype's item size).

        Raises:
            ValueError: if a size is symbolic.
        """
        return self.numel * self.dtype.itemsize

    @staticmethod
    def of(t: torch.Tensor) -> "TensorMeta":
        """The metadata of a (real or fake) tensor with static sizes."""
        return TensorMeta(
            dtype=t.dtype,
            sizes=tuple(int(s) for s in t.shape),
            strides=tuple(int(s) for s in t.stride()),
            device=t.device,
            storage_offset=int(t.storage_offset()),
            requires_grad=bool(t.requires_grad),
        )


@dataclass(frozen=True)
class ScalarMeta:
    """Metadata of a non-tensor value (a SymInt from ``aten::sym_size``, a Python
    number from ``aten::_local_scalar_dense``). ``type`` is ``int``, ``float`` or ``bool``.
    ``symbol``: the unbacked symbol (``u0``) an ``int`` result binds, when the graph uses
    the value as a size (``.item()`` of an integer tensor); printed ``int(u0)``."""

    type: str
    symbol: str | None = None


# A node's metadata: one entry for a single result, a tuple for several (entries are
# None for results that are not tensors or scalars, e.g. an empty optional).
Meta = Union[TensorMeta, ScalarMeta, tuple[Union[TensorMeta, ScalarMeta, None], ...], None]


@dataclass(eq=True)
class Node:
    """One SSA node. ``name`` is unique in its graph and is the value's name."""

    name: str
    op: str
    target: str
    args: tuple[Argument, ...] = ()
    kwargs: dict[str, Argument] = field(default_factory=dict)
    meta: Meta = None
    source: SourceLocation | None = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Node):
            return NotImplemented
        return (
            (self.name, self.op, self.target, self.meta, self.source)
            == (other.name, other.op, other.target, other.meta, other.source)
            and self.kwargs.keys() == other.kwargs.keys()
            and _same_argument(self.args, other.args)
            and all(_same_argument(v, other.kwargs[k]) for k, v in self.kwargs.items())
        )

    def inputs(self) -> Iterator[ValueRef]:
        """Every ValueRef this node reads, in argument order."""
        yield from refs_in(self.args)
        yield from refs_in(tuple(self.kwargs.values()))

    def replace_refs(self, mapping: dict[ValueRef, Argument]) -> None:
        """Replace uses of values in args and kwargs according to ``mapping``."""
        self.args = tuple(_substitute(a, mapping) for a in self.args)
        self.kwargs = {k: _substitute(v, mapping) for k, v in self.kwargs.items()}


def _same_argument(a: Argument, b: Argument) -> bool:
    """Structural equality of arguments in which NaN equals NaN and types must match
    (``1 == 1.0 == True`` would otherwise hide a changed argument)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        assert isinstance(b, tuple)
        return len(a) == len(b) and all(_same_argument(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    return a == b


def refs_in(args: tuple[Argument, ...]) -> Iterator[ValueRef]:
    """Every ValueRef in ``args``, nested tuples included, in order."""
    for a in args:
        if isinstance(a, ValueRef):
            yield a
        elif isinstance(a, tuple):
            yield from refs_in(a)


def _substitute(a: Argument, mapping: dict[ValueRef, Argument]) -> Argument:
    if isinstance(a, ValueRef):
        return mapping.get(a, a)
    if isinstance(a, tuple):
        return tuple(_substitute(x, mapping) for x in a)
    return a


def normalize_argument(a: object) -> Argument:
    """Turn lists into tuples (recursively) and check that ``a`` is an IR argument.

    Raises:
        TypeError: for a value outside the closed set of argument types.
    """
    if a is None or isinstance(
        a, (bool, int, float, str, complex, ValueRef, SymExpr, torch.dtype, torch.device,
            torch.memory_format, torch.layout)
    ):
        return a
    if isinstance(a, (list, tuple)):
        return tuple(normalize_argument(x) for x in a)
    raise TypeError(f"{type(a).__name__} is not an Ember IR argument: {a!r}")


#: the lower bound of a symbol unbounded below: an integer read from a tensor
#: (``k.item()``) that is never used as a size may be any int64 (printed ``-inf``)
UNBOUNDED_LOWER = -(2**63)


@dataclass(frozen=True)
class SymbolRange:
    """The range of a size symbol, inclusive; ``upper`` None means unbounded,
    ``lower`` :data:`UNBOUNDED_LOWER` unbounded below. ``hint`` is the example value
    seen at capture (backed symbols, ``s0``, always have one; unbacked, data-dependent
    ones, ``u0``, have None). Hints drive heuristics, never correctness."""

    lower: int = 2
    upper: int | None = None
    hint: int | None = None

    def __str__(self) -> str:
        lower = "-inf" if self.lower <= UNBOUNDED_LOWER else str(self.lower)
        upper = "inf" if self.upper is None else str(self.upper)
        return f"[{lower}, {upper}]"


@dataclass(frozen=True)
class ShapeGuard:
    """A relation between sizes that every call of the graph must satisfy beyond the
    symbols' ranges (``s1 == 2*s0``, ``s0%16 == 0``; grammar in
    :mod:`ember.runtime.ir.symbolic`), with the user's source line that introduced it
    when known."""

    expr: str
    source: SourceLocation | None = None


@dataclass(eq=True)
class Graph:
    """An SSA list of nodes; ``symbols`` gives the range and hint of each size symbol
    used in the graph, ``guards`` the relations between them that every call must
    satisfy. Copy a graph with ``dataclasses.replace(graph, nodes=...)`` to keep both."""

    nodes: list[Node] = field(default_factory=list)
    symbols: dict[str, SymbolRange] = field(default_factory=dict)
    guards: list[ShapeGuard] = field(default_factory=list)

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    @property
    def placeholders(self) -> list[Node]:
        return [n for n in self.nodes if n.op == "placeholder"]

    @property
    def output(self) -> Node:
        for n in reversed(self.nodes):
            if n.op == "output":
                return n
        raise KeyError("graph has no output node")

    @property
    def output_values(self) -> tuple[Argument, ...]:
        values = self.output.args[0]
        assert isinstance(values, tuple)
        return values

    def calls(self) -> list[Node]:
        return [n for n in self.nodes if n.op == "call"]

    def users(self) -> dict[str, list[Node]]:
        """Map each node name to the nodes that read it."""
        result: dict[str, list[Node]] = {n.name: [] for n in self.nodes}
        for n in self.nodes:
            for ref in n.inputs():
                result.setdefault(ref.node, []).append(n)
        return result

    def fresh_name(self, base: str = "v") -> str:
        """A node name not used in this graph."""
        taken = {n.name for n in self.nodes}
        i = len(self.nodes)
        while f"{base}{i}" in taken:
            i += 1
        return f"{base}{i}"


class InputKind(str, enum.Enum):
    USER_INPUT = "user_input"
    PARAMETER = "parameter"
    BUFFER = "buffer"
    CONSTANT = "constant"
    TOKEN = "token"


class OutputKind(str, enum.Enum):
    USER_OUTPUT = "user_output"
    MUTATED_INPUT = "mutated_input"  # copy back into the input named by ``target``
    ALIASED_OUTPUT = "aliased_output"  # a view of the input/output named by ``target``
    SAVED_TENSOR = "saved_tensor"  # forward graph result kept for the backward graph
    GRADIENT = "gradient"  # backward graph result: gradient of the input ``target``


@dataclass(frozen=True)
class InputSpec:
    """One graph input. ``name`` is the placeholder's name; ``target`` the qualified
    name of a parameter/buffer/constant (``layer1.weight``), ``None`` for user inputs."""

    name: str
    kind: InputKind = InputKind.USER_INPUT
    target: str | None = None


@dataclass(frozen=True)
class OutputSpec:
    """One graph output, labelled. ``target`` names the input a mutation is copied back
    into, the value an aliased output views, or the input a gradient belongs to."""

    kind: OutputKind = OutputKind.USER_OUTPUT
    target: str | None = None


@dataclass(eq=True)
class Signature:
    """Labels for the inputs and outputs of each graph of a program (graph name → specs)."""

    inputs: dict[str, list[InputSpec]] = field(default_factory=dict)
    outputs: dict[str, list[OutputSpec]] = field(default_factory=dict)


@dataclass(eq=False)
class Program:
    """A set of named graphs, their signature, the tensors and files they carry.

    ``tensors`` holds parameters, buffers and constants by qualified name (the
    placeholders labelled PARAMETER/BUFFER/CONSTANT take their default from here, and
    ``get_attr``/``constant`` nodes read from here). ``files`` holds kernel sources and
    binaries in the ``compiled`` dialect. ``metadata`` is free-form JSON (pytree specs,
    fallback counts, ...). Equality compares tensors by dtype, shape and value.
    """

    graphs: dict[str, Graph] = field(default_factory=dict)
    signature: Signature = field(default_factory=Signature)
    dialect: str = "aten"
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    metadata: dict[str, object] = field(default_factory=dict)
    untrusted_origin: str | None = None
    """Where the program was read from (``load``, ``parse_program``) unless the caller
    vouched for it (``trusted=True``); None for programs built in memory. Running such a
    program refuses operators with effects outside its tensors and ``compiled`` code
    (``ember.runtime.ir.effects``). Not saved, not compared."""

    @property
    def forward(self) -> Graph:
        return self.graphs["forward"]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Program):
            return NotImplemented
        if (
            self.graphs != other.graphs
            or self.signature != other.signature
            or self.dialect != other.dialect
            or self.files != other.files
            or self.metadata != other.metadata
            or self.tensors.keys() != other.tensors.keys()
        ):
            return False
        for k, t in self.tensors.items():
            u = other.tensors[k]
            if t.dtype != u.dtype or t.shape != u.shape or not _same_values(t, u):
                return False
        return True

    def copy(self) -> "Program":
        """A copy whose graphs and nodes can be changed without touching this one
        (tensors and files are shared)."""
        graphs = {
            name: Graph(
                nodes=[dataclasses.replace(n, kwargs=dict(n.kwargs)) for n in g.nodes],
                symbols=dict(g.symbols),
                guards=list(g.guards),
            )
            for name, g in self.graphs.items()
        }
        sig = Signature(
            inputs={k: list(v) for k, v in self.signature.inputs.items()},
            outputs={k: list(v) for k, v in self.signature.outputs.items()},
        )
        return Program(
            graphs=graphs,
            signature=sig,
            dialect=self.dialect,
            tensors=dict(self.tensors),
            files=dict(self.files),
            metadata=dict(self.metadata),
            untrusted_origin=self.untrusted_origin,
        )


def _same_values(t: torch.Tensor, u: torch.Tensor) -> bool:
    """Elementwise equality where NaN equals NaN (a program equals its own round trip)."""
    t, u = t.detach().cpu(), u.detach().cpu()
    if torch.equal(t, u):
        return True
    if not (t.is_floating_point() or t.is_complex()):
        return False
    both_nan = torch.isnan(t) & torch.isnan(u)
    return bool(torch.all(both_nan | (t == u)))
