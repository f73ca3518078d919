"""Parse the IR's text form (:mod:`ember.runtime.ir.printer`) back into a Program.

``parse_program(print_program(p), tensors=p.tensors, files=p.files) == p`` for every
program ``p``. The text declares tensors (name, dtype, shape) and files (name) but does
not hold their contents: pass them in, or leave ``tensors`` out to get meta-device
stand-ins.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable
from typing import TypeVar

import torch
from ember.runtime.ir.errors import IRFormatError
from ember.runtime.ir.graph import (
    UNBOUNDED_LOWER,
    Argument,
    Graph,
    InputKind,
    InputSpec,
    Node,
    OutputKind,
    OutputSpec,
    Program,
    ShapeGuard,
    Signature,
    SourceLocation,
    SymbolRange,
)
from ember.runtime.ir.json_codec import parse_json
from ember.runtime.ir.limits import DEFAULT_LIMITS, LoadLimits
from ember.runtime.ir.load_checks import check_program
from ember.runtime.ir.program_json import TensorDecl, bind_files, bind_tensors
from ember.runtime.ir.text_scanner import Scanner
from ember.runtime.ir.text_syntax import (
    DIALECT_RE,
    FUNCTION_RE,
    GUARD_RE,
    OPCODE_KEYWORDS,
    QUALNAME_RE,
)
from ember.runtime.ir.text_values import ValueReader

T = TypeVar("T")

_KIND_RE = re.compile(r"[a-z_]+")
_SIZE_RE = re.compile(r"[0-9]+")
_OP_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*::[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)?")
_LOCATION_RE = re.compile(r"(.*):(-?[0-9]+)")
_NON_SPACE_RE = re.compile(r"\S+")
_INPUT_KINDS = {k.value: k for k in InputKind}
_OUTPUT_KINDS = {k.value: k for k in OutputKind}


def parse_program(
    text: str,
    tensors: dict[str, torch.Tensor] | None = None,
    files: dict[str, bytes] | None = None,
    *,
    limits: LoadLimits | None = None,
    trusted: bool = False,
) -> Program:
    """The Program that ``text`` (as written by ``print_program``) describes.

    Args:
        text: the text form.
        tensors: values of the tensors the text declares (``tensor NAME: ...`` lines);
            checked against the declared dtype and shape. None gives meta-device
            stand-ins, which carry no values (such a program can be printed and
            analysed, not run or saved).
        files: contents of the files the text declares; required if it declares any.
        limits: ``max_json_depth`` bounds the nesting of brackets and of the metadata
            JSON (default :data:`~ember.runtime.ir.limits.DEFAULT_LIMITS`).
        trusted: the text is as trusted as your own code; otherwise the program's
            ``untrusted_origin`` is ``"<IR text>"`` (see :mod:`ember.runtime.ir.effects`).

    Raises:
        IRFormatError: for bad text, naming the line and column; for brackets nested
            deeper than ``limits.max_json_depth``, a number too large to hold; for
            tensors or files that differ from the declarations; for the structural
            errors ``load`` rejects (unknown operators, non-SSA graphs).
    """
    limits = DEFAULT_LIMITS if limits is None else limits
    _check_nesting(text, limits.max_json_depth)
    parser = _Parser(text, limits)
    try:
        program = parser.program(tensors, files)
    except (RecursionError, ValueError, OverflowError, MemoryError) as e:
        # NOTE: int() of more digits than sys.get_int_max_str_digits() is a ValueError;
        # a huge declared shape overflows when the stand-in tensor is made.
        raise parser.s.error(f"unreadable value: {type(e).__name__}: {e}") from None
    check_program(program, parser.locate)
    program.untrusted_origin = None if trusted else "<IR text>"
    return program


def _json_syntax_error(line: str) -> json.JSONDecodeError | None:
    """The syntax error of ``line`` as JSON, if it has one (to point at its column)."""
    try:
        json.loads(line)
    except json.JSONDecodeError as e:
        return e
    except (RecursionError, ValueError):
        pass
    return None


_TEXT_STRING_RE = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"')
_NOT_BRACKET_RE = re.compile(r"[^\[\](){}]+")
_BRACKET_DEPTH = {"[": 1, "(": 1, "{": 1, "]": -1, ")": -1, "}": -1}


def _check_nesting(text: str, max_depth: int) -> None:
    """Refuse brackets nested deeper than ``max_depth`` (outside string literals) before
    the recursive readers see them."""
    brackets = _NOT_BRACKET_RE.sub("", _TEXT_STRING_RE.sub('""', text))
    depth = 0
    for depth in itertools.accumulate(map(_BRACKET_DEPTH.__getitem__, brackets)):
        if depth > max_depth:
            break
    if depth > max_depth:
        line = _first_line_deeper_than(text, max_depth)
        raise IRFormatError(f"line {line}: brackets nested deeper than {max_depth} levels "
                            "(LoadLimits.max_json_depth)")


def _first_line_deeper_than(text: str, max_depth: int) -> int:
    """The 1-based line where brackets first nest deeper than ``max_depth``."""
    depth = 0
    for number, line in enumerate(text.splitlines(), 1):
        brackets = _NOT_BRACKET_RE.sub("", _TEXT_STRING_RE.sub('""', line))
        for delta in map(_BRACKET_DEPTH.__getitem__, brackets):
            depth += delta
            if depth > max_depth:
                return number
    return 1


class _Parser:
    def __init__(self, text: str, limits: LoadLimits) -> None:
        self.limits = limits
        self.s = Scanner(text)
        self.v = ValueReader(self.s)
        self.dialect: str | None = None
        self.metadata: dict[str, object] | None = None
        self.decls: dict[str, TensorDecl] = {}
        self.file_names: list[str] = []
        self.graphs: dict[str, Graph] = {}
        self.signature = Signature()
        self.explicit_inputs: dict[str, list[InputSpec] | None] = {}
        self.explicit_outputs: dict[str, list[OutputSpec]] = {}
        self.node_lines: dict[tuple[str, int], int] = {}

    def locate(self, graph_name: str, index: int) -> str:
        """``"line N: "`` for the index-th node of a graph (for the load checks)."""
        line = self.node_lines.get((graph_name, index))
        return "" if line is None else f"line {line}: "

    # ---- program ----------------------------------------------------------------------

    def program(self, tensors: dict[str, torch.Tensor] | None,
                files: dict[str, bytes] | None) -> Program:
        s = self.s
        while True:
            self._skip_blank_lines()
            if s.at_end():
                break
            start = s.pos
            if self.dialect is None and not s.peek("program"):
                raise s.error("expected 'program dialect=...' first")
            if s.keyword("program"):
                self._program_line(start)
            elif s.keyword("metadata"):
                self._metadata_line(start)
            elif s.keyword("tensor"):
                self._tensor_line(start)
            elif s.keyword("file"):
                s.skip_spaces()
                self.file_names.append(s.string())
                s.end_of_line()
            elif s.keyword("graph"):
                self._graph(start)
            elif s.keyword("signature"):
                self._signature_line()
            else:
                raise s.error("expected a statement: program, metadata, tensor, file, graph "
                              "or signature")
        if self.dialect is None:
            raise s.error("empty text: expected 'program dialect=...'")
        for gname, in_specs in self.explicit_inputs.items():
            if in_specs is None:
                self.signature.inputs.pop(gname, None)
            else:
                self.signature.inputs[gname] = in_specs
        self.signature.outputs.update(self.explicit_outputs)
        return Program(
            graphs=self.graphs,
            signature=self.signature,
            dialect=self.dialect,
            tensors=bind_tensors(self.decls, tensors),
            files=bind_files(self.file_names, files),
            metadata=self.metadata if self.metadata is not None else {},
        )

    def _skip_blank_lines(self) -> None:
        s = self.s
        while not s.at_end():
            line_start = s.pos
            s.skip_spaces()
            if s.peek("#"):
                s.rest_of_line()
            if s.accept("\r\n") or s.accept("\n"):
                continue
            if not s.at_end():
                s.pos = line_start
            return

    def _program_line(self, start: int) -> None:
        s = self.s
        if self.dialect is not None:
            raise s.error("a second 'program' line", start)
        s.skip_spaces()
        s.expect("dialect=")
        self.dialect = s.name(DIALECT_RE, "a dialect name")
        s.end_of_line()

    def _metadata_line(self, start: int) -> None:
        s = self.s
        if self.metadata is not None:
            raise s.error("a second 'metadata' line", start)
        s.skip_spaces()
        at = s.pos
        line = s.rest_of_line()
        try:
            value = parse_json(line, "metadata", self.limits)
        except IRFormatError as e:
            syntax = _json_syntax_error(line)
            if syntax is not None:
                raise s.error(f"metadata is not valid JSON: {syntax.msg}",
                              at + syntax.pos) from None
            raise s.error(str(e), at) from None
        if not isinstance(value, dict):
            raise s.error("metadata must be a JSON object", at)
        self.metadata = value
        s.end_of_line(allow_comment=False)

    def _tensor_line(self, start: int) -> None:
        s = self.s
        s.skip_spaces()
        name = s.name(QUALNAME_RE, "a tensor name")
        if name in self.decls:
            raise s.error(f"tensor {name!r} is declared twice", start)
        s.expect(":")
        s.skip_spaces()
        dtype = self.v.dtype()
        s.expect("[")
        shape: list[int] = []
        while not s.accept("]"):
            if shape:
                s.expect(",")
                s.skip_spaces()
            token = s.match(_SIZE_RE)
            if token is None:
                raise s.error("expected a size (an integer >= 0)")
            shape.append(int(token))
        s.skip_spaces()
        device = self.v.device()
        s.skip_spaces()
        requires_grad = s.keyword("requires_grad")
        self.decls[name] = TensorDecl(dtype, tuple(shape), device, requires_grad)
        s.end_of_line()

    def _signature_line(self) -> None:
        s = self.s
        s.skip_spaces()
        gname = s.name(QUALNAME_RE, "a graph name")
        s.skip_spaces()
        if s.keyword("inputs"):
            s.skip_spaces()
            if s.keyword("none"):
                self.explicit_inputs[gname] = None
            else:
                self.explicit_inputs[gname] = self._bracketed(self._named_input_spec)
        elif s.keyword("outputs"):
            s.skip_spaces()
            self.explicit_outputs[gname] = self._bracketed(self._output_spec)
        else:
            raise s.error("expected 'inputs' or 'outputs'")
        s.end_of_line()

    # ---- graphs -----------------------------------------------------------------------

    def _graph(self, start: int) -> None:
        s = self.s
        s.skip_spaces()
        name = s.name(QUALNAME_RE, "a graph name")
        if name in self.graphs:
            raise s.error(f"graph {name!r} is defined twice", start)
        graph = Graph()
        specs: list[InputSpec] = []
        s.expect("(")

        def param() -> None:
            self._record_line(name, graph)
            node, spec = self._param()
            graph.nodes.append(node)
            specs.append(spec)

        self.v.items_until(")", param, newlines=True)
        s.skip_spaces()
        s.expect(":", "after the graph's inputs")
        s.end_of_line()
        self.signature.inputs[name] = specs
        while True:
            self._skip_blank_lines()
            if s.at_end() or s.next_char() not in " \t":
                break
            s.skip_spaces()
            self._record_line(name, graph)
            self._body_line(name, graph)
        self.graphs[name] = graph

    def _record_line(self, graph_name: str, graph: Graph) -> None:
        self.node_lines[(graph_name, len(graph.nodes))] = self.s.line_number()

    def _param(self) -> tuple[Node, InputSpec]:
        s = self.s
        name = self.v.percent_name()
        meta = self.v.optional_meta()
        s.skip_spaces()
        spec = InputSpec(name)
        if s.accept("["):
            s.skip_spaces()
            kind, target = self._spec_body(_INPUT_KINDS, "an input kind")
            spec = InputSpec(name, _INPUT_KINDS[kind], target)
            s.expect("]")
        return Node(name, "placeholder", name, meta=meta), spec

    def _body_line(self, graph_name: str, graph: Graph) -> None:
        s = self.s
        if s.keyword("symbols"):
            self._symbols(graph)
            s.end_of_line()
            return
        if s.keyword("guard"):
            s.skip_spaces()
            expr = s.name(GUARD_RE, "a guard relation")
            graph.guards.append(ShapeGuard(expr, self._source()))
            s.end_of_line()
            return
        if s.keyword("return"):
            self._return(graph_name, graph)
            return
        if not s.peek("%"):
            raise s.error("expected a node '%name = ...', 'return (...)', 'symbols ...' or "
                          "'guard ...'")
        name = self.v.percent_name()
        meta = self.v.optional_meta()
        s.skip_spaces()
        s.expect("=")
        s.skip_spaces()
        op, target = self._operation()
        args: tuple[Argument, ...] = ()
        kwargs: dict[str, Argument] = {}
        if op == "call" or s.peek("("):
            args, kwargs = self.v.call_arguments()
        graph.nodes.append(Node(name, op, target, args, kwargs, meta, self._source()))
        s.end_of_line()

    def _operation(self) -> tuple[str, str]:
        s = self.s
        if s.peek('"'):
            return "call", s.string()
        target = s.match(_OP_NAME_RE)
        if target is not None:
            return "call", target
        for op in OPCODE_KEYWORDS:
            if s.keyword(op):
                s.skip_spaces()
                return op, s.name(QUALNAME_RE, f"the target of {op}")
        raise s.error("expected an operator 'ns::op.overload' or one of "
                      f"{', '.join(OPCODE_KEYWORDS)}")

    def _return(self, graph_name: str, graph: Graph) -> None:
        s = self.s
        s.skip_spaces()
        s.expect("(", "after return")
        values = tuple(self.v.items_until(")", self.v.argument))
        s.skip_spaces()
        if s.accept("["):
            self.signature.outputs[graph_name] = self.v.items_until("]", self._output_spec)
        graph.nodes.append(Node("output", "output", "output", args=(values,),
                                source=self._source()))
        s.end_of_line()

    def _symbols(self, graph: Graph) -> None:
        s = self.s
        while True:
            s.skip_spaces()
            name = s.name(QUALNAME_RE, "a symbol name")
            s.skip_spaces()
            if not s.keyword("in"):
                raise s.error("expected 'in [lower, upper]'")
            s.skip_spaces()
            s.expect("[")
            lower = UNBOUNDED_LOWER if s.accept("-inf") else self.v.integer()
            s.expect(",")
            s.skip_spaces()
            upper = None if s.keyword("inf") else self.v.integer()
            s.expect("]")
            s.skip_spaces()
            hint = self.v.integer() if s.accept("hint=") else None
            graph.symbols[name] = SymbolRange(lower, upper, hint)
            if not s.accept(","):
                return

    def _source(self) -> SourceLocation | None:
        s = self.s
        s.skip_spaces()
        if not s.accept("#"):
            return None
        s.skip_spaces()
        start = s.pos
        if s.peek('"'):
            file = s.string()
            s.expect(":", "between file and line")
            line = self.v.integer()
        else:
            token = s.match(_NON_SPACE_RE)
            m = _LOCATION_RE.fullmatch(token or "")
            if m is None:
                raise s.error("expected a source location 'file:line'", start)
            file, line = m.group(1), int(m.group(2))
        s.skip_spaces()
        function = ""
        if s.next_char() not in ("", "\r", "\n"):
            function = s.name(FUNCTION_RE, "a function name")
        s.skip_spaces()
        text = s.string() if s.peek('"') else ""
        return SourceLocation(file, line, function, text)

    # ---- specs ------------------------------------------------------------------------

    def _spec_body(self, kinds: dict[str, InputKind] | dict[str, OutputKind],
                   what: str) -> tuple[str, str | None]:
        """``kind [target]`` of an input or output spec."""
        s = self.s
        start = s.pos
        kind = s.match(_KIND_RE)
        if kind is None or kind not in kinds:
            raise s.error(f"expected {what} (one of {', '.join(kinds)})", start)
        s.skip_spaces()
        target = None
        if not (s.peek("]") or s.peek(",")):
            target = s.name(QUALNAME_RE, "a target name")
            s.skip_spaces()
        return kind, target

    def _named_input_spec(self) -> InputSpec:
        name = self.v.percent_name()
        self.s.skip_spaces()
        kind, target = self._spec_body(_INPUT_KINDS, "an input kind")
        return InputSpec(name, _INPUT_KINDS[kind], target)

    def _output_spec(self) -> OutputSpec:
        kind, target = self._spec_body(_OUTPUT_KINDS, "an output kind")
        return OutputSpec(_OUTPUT_KINDS[kind], target)

    def _bracketed(self, item: Callable[[], T]) -> list[T]:
        self.s.expect("[")
        return self.v.items_until("]", item)
