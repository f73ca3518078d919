"""Hand-built programs that together use every part of the IR data model, for the
serialization, printer and parser tests; and a strict comparison of programs.

``SAMPLES`` maps a name to a builder; each builder returns a fresh Program. The values
are fixed (seeded), so the golden files in ``golden/`` can be rebuilt from them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from ember.runtime.ir import (
    Argument,
    Graph,
    InputKind,
    InputSpec,
    Node,
    OutputKind,
    OutputSpec,
    Program,
    ScalarMeta,
    ShapeGuard,
    Signature,
    SourceLocation,
    SymbolRange,
    SymExpr,
    TensorMeta,
    ValueRef,
)

CPU = torch.device("cpu")


def tmeta(*sizes: int | str, dtype: torch.dtype = torch.float32, **kw: object) -> TensorMeta:
    """Contiguous metadata for ``sizes`` (symbolic strides multiply as strings)."""
    strides: list[int | str] = []
    acc: int | str = 1
    for s in reversed(sizes):
        strides.insert(0, acc)
        acc = acc * s if isinstance(acc, int) and isinstance(s, int) else f"{s}*{acc}"
    return TensorMeta(dtype, tuple(sizes), tuple(strides), kw.pop("device", CPU),  # type: ignore[arg-type]
                      **kw)  # type: ignore[arg-type]


def output(*values: Argument) -> Node:
    return Node("output", "output", "output", args=(tuple(values),))


def mlp() -> Program:
    """The example of the printer's docstring: x @ w.T with a parameter."""
    w = torch.Generator().manual_seed(0)
    weight = torch.randn(8, 8, generator=w)
    nodes = [
        Node("x", "placeholder", "x", meta=tmeta(4, 8)),
        Node("w", "placeholder", "w", meta=tmeta(8, 8)),
        Node("t", "call", "aten::t.default", (ValueRef("w"),),
             meta=TensorMeta(torch.float32, (8, 8), (1, 8), CPU),
             source=SourceLocation("model.py", 12, "forward", "y = x @ self.w.T")),
        Node("mm", "call", "aten::mm.default", (ValueRef("x"), ValueRef("t")),
             meta=tmeta(4, 8), source=SourceLocation("model.py", 12, "forward")),
        output(ValueRef("mm")),
    ]
    return Program(
        graphs={"forward": Graph(nodes)},
        signature=Signature(
            inputs={"forward": [InputSpec("x"),
                                InputSpec("w", InputKind.PARAMETER, "fc.weight")]},
            outputs={"forward": [OutputSpec()]},
        ),
        tensors={"fc.weight": weight},
        metadata={"model": "mlp"},
    )


# Every argument type, with the awkward values of each.
EVERY_ARGUMENT: tuple[Argument, ...] = (
    None, True, False, 0, -7, 2**70,
    1.0, -0.0, 0.1, 1e-05, 1.5e300, 5e-324, math.inf, -math.inf, math.nan,
    "", "plain", 'quote " backslash \\ newline \n tab \t hash # percent % unicode é \u2028',
    complex(1.5, -2.0), complex(math.inf, math.nan), complex(-0.0, 0.0),
    torch.float32, torch.bfloat16, torch.bool, torch.complex128, torch.int64, torch.uint8,
    torch.float8_e4m3fn,
    torch.device("cpu"), torch.device("cuda"), torch.device("cuda", 1), torch.device("meta"),
    torch.contiguous_format, torch.channels_last, torch.channels_last_3d,
    torch.preserve_format, torch.strided, torch.sparse_coo,
    (), (1,), (1, (2, (3, None)), 4), ((), ((),)),
)


def every_argument() -> Program:
    """Calls whose args and kwargs hold every argument type (not meant to run)."""
    x_meta = tmeta(2, 3)
    nodes = [
        Node("x", "placeholder", "x", meta=x_meta),
        Node("max", "call", "aten::max.dim", (ValueRef("x"), 1, False),
             meta=(tmeta(2), tmeta(2, dtype=torch.int64))),
        Node("values", "call", "aten::add.Tensor", EVERY_ARGUMENT,
             {f"k{i}": a for i, a in enumerate(EVERY_ARGUMENT)}),
        Node("refs", "call", "aten::cat.default",
             ((ValueRef("max", 0), ValueRef("max", 1), ValueRef("x")),),
             {"dim": -1, "weird key": ValueRef("max", 0), "nested": ((ValueRef("x"),),)}),
        Node("sum", "call", "aten::sum.dim_IntList", (ValueRef("x"), (1,)),
             {"keepdim": True, "dtype": torch.float64}, meta=tmeta(2, 1, dtype=torch.float64)),
        output(ValueRef("sum"), ValueRef("max", 1), None, 3),
    ]
    return Program(
        graphs={"forward": Graph(nodes)},
        signature=Signature(inputs={"forward": [InputSpec("x")]},
                            outputs={"forward": [OutputSpec()] * 4}),
    )


def every_meta() -> Program:
    """Symbolic sizes, offsets, scalar and tuple metas, sources, symbol ranges."""
    nodes = [
        Node("x", "placeholder", "x", meta=tmeta("s0", 8)),
        Node("y", "placeholder", "y", meta=TensorMeta(
            torch.bfloat16, ("s0*2", "Max(1, s1)"), ("Max(1, s1)", 1), torch.device("cuda", 0),
            storage_offset="s0 + 4", requires_grad=True)),
        Node("n", "call", "aten::sym_size.int", (ValueRef("x"), 0), meta=ScalarMeta("int"),
             source=SourceLocation("C:\\work dir\\model.py", 7, "", "n = x.size(0)")),
        Node("f", "call", "aten::_local_scalar_dense.default", (ValueRef("x"),),
             meta=ScalarMeta("float"),
             source=SourceLocation("model.py", 8, "Model.forward")),
        Node("b", "call", "aten::is_nonzero.default", (ValueRef("x"),), meta=ScalarMeta("bool"),
             source=SourceLocation('we"ird.py:3', -1, "my function", "")),
        Node("mid", "placeholder", "mid_target", (1.0,), meta=None,
             source=SourceLocation("<eval>", 0, "<module>")),
        Node("v", "call", "aten::as_strided.default",
             (ValueRef("x"), (2, 2), (1, 2)), {"storage_offset": 3},
             meta=TensorMeta(torch.float32, (2, 2), (1, 2), CPU, storage_offset=3)),
        Node("v2", "call", "aten::view.default", (ValueRef("x"), (-1,)),
             meta=TensorMeta(torch.float32, ("8*s0",), (1,), CPU, storage_offset="s2")),
        Node("split", "call", "aten::split.Tensor", (ValueRef("x"), 2),
             meta=(tmeta(2, 8), None, tmeta(1, 8, requires_grad=True))),
        Node("empty", "call", "aten::split.Tensor", (ValueRef("x"), 2), meta=()),
        Node("one", "call", "aten::split.Tensor", (ValueRef("x"), 2), meta=(None,)),
        Node("zero_dim", "call", "aten::sum.default", (ValueRef("x"),), meta=tmeta()),
        Node("size4", "call", "aten::sum.default", (ValueRef("x"),),
             meta=TensorMeta(torch.float32, ("4", ""), ("-1", 1), CPU, storage_offset="0")),
        output(ValueRef("split", 0), ValueRef("y")),
    ]
    graph = Graph(nodes, symbols={"s0": SymbolRange(), "s1": SymbolRange(0, 64),
                                  "s2": SymbolRange(-3, None)})
    return Program(
        graphs={"forward": graph},
        signature=Signature(
            inputs={"forward": [InputSpec("x"), InputSpec("y", InputKind.BUFFER, "bn.buf")]},
            outputs={"forward": [OutputSpec(OutputKind.USER_OUTPUT),
                                 OutputSpec(OutputKind.ALIASED_OUTPUT, "y")]},
        ),
    )


def training() -> Program:
    """Forward and backward graphs, get_attr/constant nodes, every spec kind, tensors of
    many dtypes, files, nested metadata, and a graph with odd output and signature.

    NOTE: ``golden/training_v1_0.ember`` was saved from this program and the test loads
    it back and compares: change this builder only together with a new schema version.
    """
    g = torch.Generator().manual_seed(1)
    tensors = {
        "fc.weight": torch.randn(3, 4, generator=g).requires_grad_(True),
        "mask": torch.randn(5, generator=g) > 0,
        "bf": torch.randn(2, 3, generator=g).to(torch.bfloat16),
        "c128": torch.complex(torch.randn(3, generator=g, dtype=torch.float64),
                              torch.randn(3, generator=g, dtype=torch.float64)),
        "c64": torch.randn(2, generator=g, dtype=torch.complex64),
        "scalar": torch.tensor(7, dtype=torch.int64),
        "empty": torch.empty(0, 4),
        "strided": torch.randn(4, 6, generator=g)[:, ::2],  # non-contiguous
        "0.weight": torch.arange(6, dtype=torch.int32).reshape(2, 3),
        "weird name/é": torch.ones(2, dtype=torch.float16),
        "_tensor_constant0": torch.tensor([1.0, 2.0], dtype=torch.float64),
    }
    fwd = [
        Node("x", "placeholder", "x", meta=tmeta(2, 4, requires_grad=True)),
        Node("tok", "placeholder", "tok", meta=None),
        Node("w", "get_attr", "fc.weight", meta=tmeta(3, 4, requires_grad=True)),
        Node("c", "constant", "_tensor_constant0", meta=tmeta(2, dtype=torch.float64),
             source=SourceLocation("model.py", 3, "forward")),
        Node("odd", "get_attr", "weird name/é", (1, "two"), {"k": None},
             meta=tmeta(2, dtype=torch.float16)),
        Node("zw", "get_attr", "0.weight", meta=tmeta(2, 3, dtype=torch.int32)),
        Node("t", "call", "aten::t.default", (ValueRef("w"),),
             meta=TensorMeta(torch.float32, (4, 3), (1, 4), CPU, requires_grad=True)),
        Node("mm", "call", "aten::mm.default", (ValueRef("x"), ValueRef("t")),
             meta=tmeta(2, 3, requires_grad=True)),
        output(ValueRef("mm"), ValueRef("x"), ValueRef("t")),
    ]
    bwd = [
        Node("t", "placeholder", "t", meta=TensorMeta(torch.float32, (4, 3), (1, 4), CPU)),
        Node("grad", "placeholder", "grad", meta=tmeta(2, 3)),
        Node("gx", "call", "aten::mm.default", (ValueRef("grad"), ValueRef("t")),
             meta=tmeta(2, 4)),
        Node("out", "output", "result", ((ValueRef("gx"),),), meta=None,
             source=SourceLocation("model.py", 9, "backward")),
    ]
    odd = [  # no signature entry for its inputs; an output node in a non-standard form
        Node("p", "placeholder", "p", meta=tmeta(1)),
        Node("output", "output", "output", (ValueRef("p"),), {"extra": 1}),
    ]
    return Program(
        graphs={"forward": Graph(fwd), "backward": Graph(bwd), "odd graph": Graph(odd)},
        signature=Signature(
            inputs={
                "forward": [InputSpec("x"), InputSpec("tok", InputKind.TOKEN)],
                "backward": [InputSpec("grad"), InputSpec("t", InputKind.CONSTANT, "")],
                "not a graph": [InputSpec("q", InputKind.USER_INPUT, "q.target")],
            },
            outputs={
                "forward": [OutputSpec(), OutputSpec(OutputKind.MUTATED_INPUT, "x"),
                            OutputSpec(OutputKind.SAVED_TENSOR)],
                "backward": [OutputSpec(OutputKind.GRADIENT, "x")],
                "odd graph": [],
            },
        ),
        dialect="core-functional",
        tensors=tensors,
        files={"kernels/k0.cpp": b"// kernel\nint main() {}\n",
               "bin/k0.so": bytes(range(256)), "empty.txt": b""},
        metadata={"pytree": {"in": [1, [2, None]], "out": "leaf"}, "fallbacks": 0,
                  "ratio": 0.5, "flag": True, "unicode": "é \u2028"},
    )


def empty() -> Program:
    """No graphs, tensors, files or metadata."""
    return Program(dialect="compiled")


def symbolic() -> Program:
    """Dynamic shapes: symbol hints, an unbacked symbol, guards (with and without a
    source), symbolic int arguments (bare and quoted) and symbolic metas."""
    nodes = [
        Node("x", "placeholder", "x", meta=tmeta("s0", 4)),
        Node("y", "placeholder", "y", meta=tmeta("2*s0", 4)),
        Node("v", "call", "aten::view.default", (ValueRef("x"), (SymExpr("4*s0"),)),
             meta=tmeta("4*s0"), source=SourceLocation("model.py", 4, "forward",
                                                       "x.view(x.shape[0] * 4)")),
        Node("half", "call", "aten::slice.Tensor", (ValueRef("y"), 0, 0, SymExpr("s0//2")),
             meta=tmeta("s0//2", 4)),
        Node("nz", "call", "aten::nonzero.default", (ValueRef("y"),),
             meta=tmeta("u0", 2, dtype=torch.int64)),
        Node("z", "call", "aten::new_zeros.default", (ValueRef("x"), (SymExpr("Max(4, s0)"),)),
             meta=tmeta("Max(4, s0)")),
        output(ValueRef("v"), ValueRef("half"), ValueRef("nz"), ValueRef("z")),
    ]
    graph = Graph(
        nodes,
        symbols={"s0": SymbolRange(2, 1024, hint=8), "u0": SymbolRange(0, None)},
        guards=[ShapeGuard("s0%16 == 0", SourceLocation("model.py", 3, "forward",
                                                        "if x.shape[0] % 16 == 0:")),
                ShapeGuard("s0 > 4")],
    )
    return Program(
        graphs={"forward": graph},
        signature=Signature(inputs={"forward": [InputSpec("x"), InputSpec("y")]},
                            outputs={"forward": [OutputSpec()] * 4}),
    )


SAMPLES: dict[str, Callable[[], Program]] = {
    "mlp": mlp,
    "every_argument": every_argument,
    "every_meta": every_meta,
    "training": training,
    "empty": empty,
    "symbolic": symbolic,
}


# ---- strict comparison ------------------------------------------------------------------


def strict(a: object) -> object:
    """A form of ``a`` whose equality also compares types, float signs and NaNs, so
    that True != 1, 1 != 1.0, -0.0 != 0.0 and nan == nan."""
    if isinstance(a, float):
        return ("float", repr(a))
    if isinstance(a, complex):
        return ("complex", repr(a.real), repr(a.imag))
    if isinstance(a, (bool, int, str, type(None))):
        return (type(a).__name__, a)
    if isinstance(a, tuple):
        return ("tuple", tuple(strict(x) for x in a))
    if isinstance(a, list):
        return ("list", tuple(strict(x) for x in a))
    if isinstance(a, dict):  # order-insensitive, as dict equality
        return ("dict", tuple(sorted((str(k), strict(v)) for k, v in a.items())))
    if isinstance(a, (ValueRef, torch.dtype, torch.device, torch.memory_format,
                      torch.layout, TensorMeta, ScalarMeta, SourceLocation, SymbolRange,
                      InputSpec, OutputSpec, SymExpr, ShapeGuard)):
        if isinstance(a, TensorMeta):
            return ("TensorMeta", strict(a.dtype), strict(a.sizes), strict(a.strides),
                    strict(a.device), strict(a.storage_offset), strict(a.requires_grad))
        return (type(a).__name__, str(a), repr(a))
    raise TypeError(f"unexpected {type(a).__name__} in a program")


def assert_same_program(p: Program, q: Program) -> None:
    """``p == q``, and also equal under :func:`strict` node by node (with messages)."""
    assert list(p.graphs) == list(q.graphs)
    for name, g in p.graphs.items():
        h = q.graphs[name]
        assert strict(g.symbols) == strict(h.symbols), name
        assert strict(g.guards) == strict(h.guards), name
        assert len(g.nodes) == len(h.nodes), name
        for n, m in zip(g.nodes, h.nodes):
            for field in ("name", "op", "target", "args", "kwargs", "meta", "source"):
                assert strict(getattr(n, field)) == strict(getattr(m, field)), (
                    f"graph {name}, node {n.name}, {field}: {getattr(n, field)!r} != "
                    f"{getattr(m, field)!r}")
    assert strict(p.signature.inputs) == strict(q.signature.inputs)
    assert strict(p.signature.outputs) == strict(q.signature.outputs)
    assert p.dialect == q.dialect
    assert strict(p.metadata) == strict(q.metadata)
    assert p.files == q.files
    assert list(p.tensors) == list(q.tensors)
    for k, t in p.tensors.items():
        u = q.tensors[k]
        assert (t.dtype, t.shape, t.device, t.requires_grad) == (
            u.dtype, u.shape, u.device, u.requires_grad), k
        if t.device.type != "meta":
            assert _same_values(t, u), k
    # NOTE: Program.__eq__ compares with ==, so it does not hold for a program with a
    # NaN argument (a new float object after a round trip) or a NaN tensor value.
    nan_arg = "nan" in repr([n.args for g in p.graphs.values() for n in g.nodes])
    nan_value = any(t.is_floating_point() and t.device.type != "meta" and bool(t.isnan().any())
                    for t in p.tensors.values())
    meta_stand_ins = any(t.device.type == "meta" for t in q.tensors.values())
    if not (nan_arg or nan_value or meta_stand_ins):
        assert p == q


def _same_values(t: torch.Tensor, u: torch.Tensor) -> bool:
    """Elementwise equal, NaN equal to NaN."""
    if not (t.is_floating_point() or t.is_complex()):
        return torch.equal(t, u)
    return bool(((t == u) | (t.isnan() & u.isnan())).all())
