"""The IR's text form: what people read in logs and test diffs.

Example::

    program dialect=aten
    tensor fc.weight: f32[8, 8] cpu requires_grad

    graph forward(%x: f32[4, 8]{8,1} cpu, %w: f32[8, 8]{8,1} cpu [parameter fc.weight]):
      %t: f32[8, 8]{1,8} cpu = aten::t.default(%w)           # model.py:12 forward
      %mm: f32[4, 8]{8,1} cpu = aten::mm.default(%x, %t)
      return (%mm)  [user_output]

The form is complete: :func:`~ember.runtime.ir.parse_program` rebuilds an equal
Program from it (given the tensor values and file contents, which the text only
declares). Syntax, by element:

* program lines: ``program dialect=D``; ``metadata {JSON}``; ``tensor NAME: DTYPE[SHAPE]
  DEVICE [requires_grad]``; ``file "NAME"``; ``signature GRAPH inputs|outputs [..]|none``
  (only where a graph's signature cannot be written inline, below).
* ``graph NAME(PARAMS):`` then the body indented. PARAMS are the graph's leading plain
  placeholders with their meta and, when the signature's inputs of the graph name exactly
  these placeholders, their input kind (``[parameter fc.weight]``; user inputs unmarked).
* ``symbols s0 in [2, inf] hint=8, u0 in [0, inf], ...``: the graph's symbol ranges and
  hints; then one ``guard RELATION  # SOURCE`` line per guard (``guard s1 == 2*s0``).
* nodes: ``%NAME[: META] = TARGET(ARGS, KEY=ARG)`` for calls; ``%NAME[: META] = OPCODE
  TARGET[(ARGS)]`` for other opcodes; ``return (VALUES)  [OUTPUT KINDS]`` for the usual
  output node. A trailing ``# FILE:LINE [FUNCTION ["TEXT"]]`` is the node's source.
* META: ``DTYPE[SIZES]{STRIDES} DEVICE [offset=N] [requires_grad]``, or a scalar type
  (``int``), ``None``, or a parenthesised tuple of those.
* ARG: ``%v``/``%v.0`` (a value, the 0th result of a node), ``None``, ``True``, ``3``,
  ``1.5``/``inf``/``nan`` (floats print as Python's ``repr``), ``"str"`` (JSON
  escapes), ``complex(1.0, -2.0)``, ``torch.float32``, ``torch.channels_last``,
  ``torch.strided``, ``device("cuda:0")``, ``sym(4*s0)`` (a symbolic int),
  ``[tuples, ...]``.

Names print bare when they are plain (``%mm``, ``fc.weight``) and as JSON strings
otherwise (``%"my value"``).
"""

from __future__ import annotations

import torch
from ember.runtime.ir import symbolic, torch_names
from ember.runtime.ir.errors import IRFormatError
from ember.runtime.ir.graph import (
    Argument,
    Graph,
    InputKind,
    InputSpec,
    Meta,
    Node,
    OutputSpec,
    Program,
    ScalarMeta,
    ShapeGuard,
    SourceLocation,
    SymbolRange,
    SymExpr,
    TensorMeta,
    ValueRef,
)
from ember.runtime.ir.json_codec import SCALAR_META_TYPES
from ember.runtime.ir.text_syntax import (
    BARE_FILE_RE,
    DIALECT_RE,
    FUNCTION_RE,
    GUARD_RE,
    IDENT_RE,
    NODE_NAME_RE,
    OP_NAME_RE,
    QUALNAME_RE,
    SYM_OFFSET_RE,
    name_text,
    printable_json,
    quote,
    symint_text,
)

_HEADER_WIDTH = 100  # a longer graph header puts one parameter per line
_COMMENT_COLUMN_MAX = 72  # source comments align up to this column


def print_program(program: Program) -> str:
    """The text form of ``program`` (see the module docstring); ends with a newline.

    Raises:
        IRFormatError: for a value outside the data model (it could not be parsed back).
    """
    lines = [f"program dialect={name_text(program.dialect, DIALECT_RE)}"]
    if program.metadata:
        lines.append("metadata " + printable_json(program.metadata))
    for name, t in program.tensors.items():
        lines.append(f"tensor {name_text(name, QUALNAME_RE)}: {tensor_decl_text(t)}")
    for name, data in program.files.items():
        lines.append(f"file {quote(name)}  # {len(data)} bytes")
    sig = program.signature
    explicit: list[str] = []
    for gname, graph in program.graphs.items():
        inputs, outputs = sig.inputs.get(gname), sig.outputs.get(gname)
        lines.append("")
        lines.extend(_graph_lines(gname, graph, inputs, outputs))
        if not _inputs_inline(graph, inputs):
            explicit.append(_explicit_inputs(gname, inputs))
        if outputs is not None and not _outputs_inline(graph):
            explicit.append(_explicit_outputs(gname, outputs))
    for gname, specs in sig.inputs.items():
        if gname not in program.graphs:
            explicit.append(_explicit_inputs(gname, specs))
    for gname, out_specs in sig.outputs.items():
        if gname not in program.graphs:
            explicit.append(_explicit_outputs(gname, out_specs))
    if explicit:
        lines.append("")
        lines.extend(explicit)
    return "\n".join(lines) + "\n"


def print_graph(graph: Graph, name: str = "forward", inputs: list[InputSpec] | None = None,
                outputs: list[OutputSpec] | None = None) -> str:
    """The text form of one graph (its block in :func:`print_program`), with the input
    and output kinds of ``inputs``/``outputs`` where they fit inline."""
    return "\n".join(_graph_lines(name, graph, inputs, outputs)) + "\n"


# ---- graphs -----------------------------------------------------------------------------


def _header_params(graph: Graph) -> list[Node]:
    params = []
    for n in graph.nodes:
        if not (n.op == "placeholder" and n.target == n.name and not n.args
                and not n.kwargs and n.source is None):
            break
        params.append(n)
    return params


def _inputs_inline(graph: Graph, specs: list[InputSpec] | None) -> bool:
    return specs is not None and [s.name for s in specs] == [
        n.name for n in _header_params(graph)]


def _is_return(n: Node) -> bool:
    return (n.op == "output" and n.name == "output" and n.target == "output"
            and len(n.args) == 1 and isinstance(n.args[0], tuple) and not n.kwargs
            and n.meta is None)


def _outputs_inline(graph: Graph) -> bool:
    outputs = [n for n in graph.nodes if n.op == "output"]
    return bool(outputs) and _is_return(outputs[-1])


def _graph_lines(name: str, graph: Graph, inputs: list[InputSpec] | None,
                 outputs: list[OutputSpec] | None) -> list[str]:
    params = _header_params(graph)
    specs = inputs if _inputs_inline(graph, inputs) else None
    texts = []
    for i, p in enumerate(params):
        text = f"%{name_text(p.name, NODE_NAME_RE)}{_meta_suffix(p.meta)}"
        if specs is not None and (specs[i].kind != InputKind.USER_INPUT
                                  or specs[i].target is not None):
            text += f" [{_input_spec_text(specs[i])}]"
        texts.append(text)
    head = f"graph {name_text(name, QUALNAME_RE)}("
    one_line = head + ", ".join(texts) + "):"
    if len(one_line) <= _HEADER_WIDTH:
        lines = [one_line]
    else:
        lines = [head, *(f"    {t}," for t in texts), "):"]
    if graph.symbols:
        ranges = ", ".join(_symbol_text(s, r) for s, r in graph.symbols.items())
        lines.append(f"  symbols {ranges}")
    lines.extend(f"  {_guard_text(g)}" for g in graph.guards)
    last_output = max((i for i, n in enumerate(graph.nodes) if n.op == "output"), default=-1)
    body: list[tuple[str, str]] = []
    for i, n in enumerate(graph.nodes[len(params):], start=len(params)):
        text = _node_text(n)
        if i == last_output and outputs is not None and _is_return(n):
            text += "  [" + ", ".join(_output_spec_text(s) for s in outputs) + "]"
        body.append((text, "" if n.source is None else source_text(n.source)))
    width = max((len(t) for t, c in body if c and len(t) <= _COMMENT_COLUMN_MAX), default=0)
    for text, comment in body:
        lines.append(f"  {text.ljust(width)}  # {comment}" if comment else f"  {text}")
    return lines


def _symbol_text(name: str, r: SymbolRange) -> str:
    hint = "" if r.hint is None else f" hint={r.hint}"
    return f"{name_text(name, QUALNAME_RE)} in {r}{hint}"


def _guard_text(g: ShapeGuard) -> str:
    text = f"guard {name_text(g.expr, GUARD_RE)}"
    return text if g.source is None else f"{text}  # {source_text(g.source)}"


def _node_text(n: Node) -> str:
    if _is_return(n):
        values = n.args[0]
        assert isinstance(values, tuple)
        return "return (" + ", ".join(argument_text(v) for v in values) + ")"
    lhs = f"%{name_text(n.name, NODE_NAME_RE)}{_meta_suffix(n.meta)}"
    call_args = [argument_text(a) for a in n.args] + [
        f"{name_text(k, IDENT_RE)}={argument_text(v)}" for k, v in n.kwargs.items()]
    args = "(" + ", ".join(call_args) + ")"
    if n.op == "call":
        return f"{lhs} = {name_text(n.target, OP_NAME_RE)}{args}"
    target = name_text(n.target, QUALNAME_RE)
    return f"{lhs} = {n.op} {target}{args if call_args else ''}"


# ---- specs and sources ------------------------------------------------------------------


def _input_spec_text(s: InputSpec) -> str:
    target = "" if s.target is None else " " + name_text(s.target, QUALNAME_RE)
    return f"{s.kind.value}{target}"


def _output_spec_text(s: OutputSpec) -> str:
    target = "" if s.target is None else " " + name_text(s.target, QUALNAME_RE)
    return f"{s.kind.value}{target}"


def _explicit_inputs(graph_name: str, specs: list[InputSpec] | None) -> str:
    head = f"signature {name_text(graph_name, QUALNAME_RE)} inputs "
    if specs is None:
        return head + "none"
    return head + "[" + ", ".join(
        f"%{name_text(s.name, NODE_NAME_RE)} {_input_spec_text(s)}" for s in specs) + "]"


def _explicit_outputs(graph_name: str, specs: list[OutputSpec]) -> str:
    return (f"signature {name_text(graph_name, QUALNAME_RE)} outputs ["
            + ", ".join(_output_spec_text(s) for s in specs) + "]")


def source_text(s: SourceLocation) -> str:
    """``model.py:12 forward "y = x @ w"`` (function and text only when set)."""
    file = s.file if BARE_FILE_RE.fullmatch(s.file) else quote(s.file)
    text = f"{file}:{s.line}"
    if s.function or s.text:
        text += " " + (s.function if FUNCTION_RE.fullmatch(s.function) else quote(s.function))
    if s.text:
        text += " " + quote(s.text)
    return text


# ---- metadata ---------------------------------------------------------------------------


def _meta_suffix(m: Meta) -> str:
    return "" if m is None else f": {meta_text(m)}"


def meta_text(m: Meta) -> str:
    """``f32[4, s0]{s0,1} cpu``, ``int``, ``None`` or ``(f32[2]{1} cpu, None)``."""
    if isinstance(m, tuple):
        return "(" + ", ".join(meta_text(x) for x in m) + ")"
    if m is None:
        return "None"
    if isinstance(m, ScalarMeta):
        if m.type not in SCALAR_META_TYPES:
            raise IRFormatError(f"unknown scalar type {m.type!r} in {m}")
        if m.symbol is not None:
            if m.type != "int" or not symbolic.is_symbol(m.symbol):
                raise IRFormatError(f"scalar result symbol {m.symbol!r}: only an int "
                                    "result binds a symbol, named by an identifier")
            return f"{m.type}({m.symbol.strip()})"
        return m.type
    if isinstance(m, TensorMeta):
        sizes = ", ".join(_checked_symint(s) for s in m.sizes)
        strides = ",".join(_checked_symint(s) for s in m.strides)
        text = f"{torch_names.dtype_short_name(m.dtype)}[{sizes}]{{{strides}}} {m.device}"
        offset = m.storage_offset
        if not (isinstance(offset, int) and offset == 0):
            text += " offset=" + symint_text(_checked(offset), SYM_OFFSET_RE)
        return text + (" requires_grad" if m.requires_grad else "")
    raise IRFormatError(f"{type(m).__name__} is not node metadata")


def _checked(s: object) -> int | str:
    if isinstance(s, bool) or not isinstance(s, (int, str)):
        raise IRFormatError(f"size {s!r} is neither an int nor a symbolic expression")
    return s


def _checked_symint(s: object) -> str:
    return symint_text(_checked(s))


def tensor_decl_text(t: torch.Tensor) -> str:
    """``f32[8, 8] cpu`` (+ `` requires_grad``): a carried tensor's declaration."""
    shape = ", ".join(str(s) for s in t.shape)
    grad = " requires_grad" if t.requires_grad else ""
    return f"{torch_names.dtype_short_name(t.dtype)}[{shape}] {t.device}{grad}"


# ---- arguments --------------------------------------------------------------------------


def argument_text(a: Argument) -> str:
    """The text of one argument (see the module docstring).

    Raises:
        IRFormatError: for a value outside the closed set of argument types.
    """
    if a is None or isinstance(a, bool):
        return repr(a)
    if isinstance(a, (int, float)):
        return repr(a)
    if isinstance(a, str):
        return quote(a)
    if isinstance(a, ValueRef):
        text = f"%{name_text(a.node, NODE_NAME_RE)}"
        return text if a.index is None else f"{text}.{a.index}"
    if isinstance(a, tuple):
        return "[" + ", ".join(argument_text(x) for x in a) + "]"
    if isinstance(a, SymExpr):
        return f"sym({symint_text(a.expr)})"
    if isinstance(a, complex):
        return f"complex({a.real!r}, {a.imag!r})"
    if isinstance(a, torch.dtype):
        return f"torch.{torch_names.dtype_name(a)}"
    if isinstance(a, torch.device):
        return f"device({quote(str(a))})"
    if isinstance(a, torch.memory_format) and a in torch_names.MEMORY_FORMAT_NAMES:
        return f"torch.{torch_names.MEMORY_FORMAT_NAMES[a]}"
    if isinstance(a, torch.layout) and a in torch_names.LAYOUT_NAMES:
        return f"torch.{torch_names.LAYOUT_NAMES[a]}"
    raise IRFormatError(f"{type(a).__name__} {a!r} is not an Ember IR argument")
