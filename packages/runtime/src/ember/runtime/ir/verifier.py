"""The verifier: checks a Program against the IR's rules and a dialect's rules.

Structural rules (every dialect):

- node names are unique; opcodes are in :data:`OPCODES`;
- SSA: a value is used only after the node that defines it (so there are no cycles), and
  ``ValueRef.index`` selects an existing result of a multi-result node;
- arguments are in the closed set of IR argument types (lists normalised to tuples);
- every ``call`` target resolves through :func:`resolve_op`; a call whose schema returns
  tensors carries a :class:`TensorMeta` for each of them; placeholders carry metadata;
- ``get_attr``/``constant`` targets exist in ``program.tensors`` with the metadata's dtype
  and shape;
- exactly one ``output`` node, the last one, whose ``args[0]`` is a tuple;
- the signature matches: input specs name the placeholders (count, names, order), output
  specs count the output values, a mutated input names a placeholder of its graph, a
  gradient names a placeholder of ``forward``;
- symbolic shapes (:mod:`ember.runtime.ir.symbol_rules`): sizes, ``SymExpr`` arguments
  and guards are in the size grammar and use only symbols of ``graph.symbols`` that are
  bound (by a placeholder's plain size, or an earlier node result's for unbacked ones);
  ranges are not empty and hints lie inside them.

Dialect rules (docs/ir-contract.md):

``aten``             any operator.
``core-functional``  no ``aten``/``prims`` operator that writes to an argument (a custom
                     operator may write fresh buffers only: :mod:`.fresh_writes`); views
                     are allowed; every
                     ``aten`` operator is in torch's Core ATen opset (``torch.Tag.core``),
                     in :data:`CORE_FUNCTIONAL_EXTRA_OPS`, or an *extern op* declared by
                     the program (below); ``prims`` operators are refused; operators in
                     other namespaces (custom ops) are opaque calls.
``compiled``         the program says ``dialect="compiled"``; every graph has its entry in
                     ``metadata["compiled"]["graphs"]`` with a wrapper file, and each
                     kernel a known language and a source file in ``program.files``
                     (layout: ``ember/runtime/compiled/README.md``). That check lives
                     with the loader in ``ember.runtime.compiled``, which registers it
                     (:func:`register_program_check`): the IR layer imports nothing
                     above itself.

Extern ops (core-functional): an ``aten`` operator that is not Core ATen and that the
producer could not decompose (torch registers no decomposition of it, e.g. ``median``,
``kthvalue``, ``cummax``) may stay as one whole call when the program declares it in
``program.metadata["aot"]["extern_ops"]`` (a list of qualified names, see
:func:`declared_extern_ops`; the aot stage writes it). The declaration is the contract
that a backend runs such a call as an extern call to the eager ATen kernel (a counted
fallback in a compiler; the interpreter runs every op that way). Declared or not, an
extern op must not write to its arguments.
"""

from __future__ import annotations

import torch
from ember.runtime.ir._torch import OpOverload, op_schema
from ember.runtime.ir.contracts import AotMetadata, MetadataError
from ember.runtime.ir.errors import IRFormatError, VerificationError
from ember.runtime.ir.graph import (
    DIALECTS,
    OPCODES,
    Graph,
    InputKind,
    Meta,
    Node,
    OutputKind,
    Program,
    ScalarMeta,
    SymExpr,
    TensorMeta,
    ValueRef,
)
from ember.runtime.ir.fresh_writes import PURE_NAMESPACES, fresh_write_violation
from ember.runtime.ir.ops import resolve_op
from ember.runtime.ir.program_checks import (  # noqa: F401 - the checks' registry, here too
    _PROGRAM_CHECKS,
    DIALECTS_CHECKED_ABOVE,
    ProgramCheck,
    register_program_check,
)
from ember.runtime.ir.symbol_rules import SymbolRules

# Aten operators a core-functional program may call although torch does not tag them
# Core ATen, because torch has no decomposition of them into Core ATen (checked against
# torch.\_decomp.core_aten_decompositions() of torch 2.13) or because decomposing them would
# throw away what a backend needs:
CORE_FUNCTIONAL_EXTRA_OPS: frozenset[str] = frozenset({
    # Runtime assertions: they compute nothing and have no decomposition.
    "aten::_assert_async.msg",
    "aten::_assert_scalar.default",
    "aten::_functional_assert_async.msg",
    "aten::_assert_tensor_metadata.default",
    # torch.linalg's check of a factorization's info (raises LinAlgError): no compute
    "aten::_linalg_check_errors.default",
    # Fused attention kernels that SDPA dispatches to, and their backwards: a backend
    # calls them as extern kernels; decomposing them to matmul+softmax loses the fusion.
    "aten::_scaled_dot_product_flash_attention.default",
    "aten::_scaled_dot_product_flash_attention_backward.default",
    "aten::_scaled_dot_product_flash_attention_for_cpu.default",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward.default",
    "aten::_scaled_dot_product_efficient_attention.default",
    "aten::_scaled_dot_product_efficient_attention_backward.default",
    "aten::_scaled_dot_product_cudnn_attention.default",
    "aten::_scaled_dot_product_cudnn_attention_backward.default",
    # The functional form functionalization gives training-mode batch norm (it returns
    # the updated running stats instead of writing them); no core decomposition.
    "aten::_native_batch_norm_legit_functional.default",
    # What functionalization turns a write through an as_strided view into.
    "aten::as_strided_scatter.default",
    # Random-number operators without a core decomposition (the RNG stays in torch).
    "aten::bernoulli.p",
    "aten::rand_like.default",
    "aten::randn_like.default",
    "aten::randint.low",
    "aten::uniform.default",
    # Produced when a traced function builds a tensor from Python data (torch.tensor).
    "aten::lift_fresh_copy.default",
    # Reductions and views with no core decomposition in torch 2.13.
    "aten::var_mean.correction",
    "aten::unfold.default",
})

EXTERN_OPS_KEY = "extern_ops"


def declared_extern_ops(program: Program) -> frozenset[str]:
    """The non-Core ATen operators ``program`` declares it calls whole
    (``program.metadata["aot"]["extern_ops"]``), as qualified names; empty when it
    declares none.

    Raises:
        VerificationError: ``metadata["aot"]`` breaks its contract
            (:class:`~ember.runtime.ir.contracts.AotMetadata`), e.g. the declaration is
            not a list of operator names.
    """
    try:
        aot = AotMetadata.from_program(program)
    except MetadataError as e:
        raise VerificationError(str(e)) from None
    return frozenset(aot.extern_ops) if aot is not None else frozenset()




def verify(program: Program, dialect: str | None = None) -> None:
    """Check ``program`` against the IR's structural rules and the rules of ``dialect``
    (default: ``program.dialect``); for a program read from a file, also each node's
    declared metadata against its operator (:mod:`ember.runtime.ir.metadata_checks`).

    Raises:
        VerificationError: naming the graph and node that break a rule.
    """
    dialect = program.dialect if dialect is None else dialect
    if dialect not in DIALECTS:
        raise VerificationError(f"unknown dialect {dialect!r}; dialects: {', '.join(DIALECTS)}")
    if program.dialect not in DIALECTS:
        raise VerificationError(f"program has unknown dialect {program.dialect!r}")
    for name in (*program.signature.inputs, *program.signature.outputs):
        if name not in program.graphs:
            raise VerificationError(f"signature names graph {name!r}, which the program lacks")
    for name, graph in program.graphs.items():
        _GraphVerifier(program, name, graph, dialect).run()
    _check_program(program, dialect)
    if program.untrusted_origin is not None:  # read from a file: its metadata vs its ops
        from ember.runtime.ir.metadata_checks import check_declared_metadata

        check_declared_metadata(program)


class _GraphVerifier:
    def __init__(self, program: Program, name: str, graph: Graph, dialect: str) -> None:
        self.program = program
        self.name = name
        self.graph = graph
        self.dialect = dialect
        self.defined: dict[str, Node] = {}
        self.symbol_rules = SymbolRules(graph, self.fail)

    def fail(self, node: Node | None, message: str) -> VerificationError:
        where = f"graph {self.name!r}" + (f", node %{node.name}" if node is not None else "")
        if node is not None and node.op == "call":
            where += f" ({node.target})"
        return VerificationError(f"{where}: {message}")

    def run(self) -> None:
        nodes = self.graph.nodes
        if not nodes or nodes[-1].op != "output":
            raise self.fail(None, "the last node must be the output node")
        self.symbol_rules.check_table()
        for node in nodes:
            self.check_node(node)
            self.defined[node.name] = node
        self.symbol_rules.check_guards()
        outputs = [n for n in nodes if n.op == "output"]
        if len(outputs) != 1:
            raise self.fail(outputs[0], f"{len(outputs)} output nodes; a graph has one")
        self.check_signature()

    # -- nodes ---------------------------------------------------------------------

    def check_node(self, node: Node) -> None:
        if not isinstance(node.name, str) or not node.name:
            raise self.fail(None, f"node with invalid name {node.name!r}")
        if node.name in self.defined:
            raise self.fail(node, "name defined twice (SSA: one definition per name)")
        if node.op not in OPCODES:
            raise self.fail(node, f"unknown opcode {node.op!r}; opcodes: {', '.join(OPCODES)}")
        for position, arg in _all_arguments(node):
            self.check_argument(node, position, arg)
        getattr(self, f"check_{node.op}")(node)
        self.check_symbols(node, node.meta)
        self.symbol_rules.check_node(node)

    def check_argument(self, node: Node, position: str, arg: object) -> None:
        if isinstance(arg, ValueRef):
            self.check_ref(node, position, arg)
        elif isinstance(arg, tuple):
            for item in arg:
                self.check_argument(node, position, item)
        elif not (arg is None or isinstance(arg, (
            bool, int, float, str, complex, SymExpr, torch.dtype, torch.device,
            torch.memory_format, torch.layout,
        ))):
            raise self.fail(node, f"argument {position} is a {type(arg).__name__}, "
                                  f"not an IR argument: {arg!r}")

    def check_ref(self, node: Node, position: str, ref: ValueRef) -> None:
        source = self.defined.get(ref.node)
        if source is None:
            later = any(n.name == ref.node for n in self.graph.nodes)
            reason = "defined later (use before definition)" if later else "never defined"
            raise self.fail(node, f"argument {position} reads {ref}, which is {reason}")
        if source.op == "output":
            raise self.fail(node, f"argument {position} reads the output node")
        if ref.index is not None:
            if not isinstance(source.meta, tuple):
                raise self.fail(node, f"argument {position} reads result {ref.index} of "
                                      f"%{ref.node}, which has a single result")
            if not 0 <= ref.index < len(source.meta):
                raise self.fail(node, f"argument {position} reads result {ref.index} of "
                                      f"%{ref.node}, which has {len(source.meta)} results")

    def check_placeholder(self, node: Node) -> None:
        if node.args or node.kwargs:
            raise self.fail(node, "a placeholder takes no arguments")
        if not isinstance(node.meta, (TensorMeta, ScalarMeta)) and not self._is_token(node):
            raise self.fail(node, "a placeholder needs TensorMeta or ScalarMeta")

    def _is_token(self, node: Node) -> bool:
        specs = self.program.signature.inputs.get(self.name, [])
        return any(s.name == node.name and s.kind == InputKind.TOKEN for s in specs)

    def check_call(self, node: Node) -> None:
        try:
            op = resolve_op(node.target)
        except IRFormatError as e:
            raise self.fail(node, str(e)) from None
        self.check_call_arguments(node, op)
        self.check_call_meta(node, op)
        if self.dialect == "core-functional":
            self.check_core_functional(node, op)

    def check_call_arguments(self, node: Node, op: OpOverload) -> None:
        arguments = op_schema(op).arguments
        positional = [a for a in arguments if not a.kwarg_only]
        if len(node.args) > len(positional):
            raise self.fail(node, f"{len(node.args)} positional arguments; the schema takes "
                                  f"at most {len(positional)}")
        names = {a.name for a in arguments}
        for key in node.kwargs:
            if key not in names:
                raise self.fail(node, f"keyword argument {key!r} is not in the schema "
                                      f"({op_schema(op)})")
        given = {a.name for a in positional[: len(node.args)]} | set(node.kwargs)
        for a in arguments:
            if a.name not in given and not a.has_default_value() and not _is_optional(a):
                raise self.fail(node, f"required argument {a.name!r} is missing")

    def check_call_meta(self, node: Node, op: OpOverload) -> None:
        returns = op_schema(op).returns
        kinds = [_return_kind(str(r.type)) for r in returns]
        if not any(k != "other" for k in kinds):
            return
        if len(returns) == 1 and kinds[0] == "tensor":
            if not isinstance(node.meta, TensorMeta):
                raise self.fail(node, "produces a tensor but has no TensorMeta")
            return
        if len(returns) == 1 and kinds[0] == "tensor_list":
            if not isinstance(node.meta, tuple) or not all(
                isinstance(m, TensorMeta) for m in node.meta
            ):
                raise self.fail(node, "produces a list of tensors but its meta is not a "
                                      "tuple of TensorMeta")
            return
        if len(returns) == 1 and kinds[0] == "optional_tensor":
            if node.meta is not None and not isinstance(node.meta, TensorMeta):
                raise self.fail(node, "produces an optional tensor; meta must be "
                                      "TensorMeta or None")
            return
        if not isinstance(node.meta, tuple) or len(node.meta) != len(returns):
            raise self.fail(node, f"produces {len(returns)} results; meta must be a tuple "
                                  f"of {len(returns)} entries")
        for i, (kind, meta) in enumerate(zip(kinds, node.meta)):
            # NOTE: None is allowed: ops such as convolution_backward leave results
            # their output_mask did not ask for undefined.
            if kind == "tensor" and not isinstance(meta, (TensorMeta, type(None))):
                raise self.fail(node, f"result {i} is a tensor but its meta is "
                                      f"{type(meta).__name__}, not TensorMeta")

    def check_core_functional(self, node: Node, op: OpOverload) -> None:
        schema = op_schema(op)
        namespace = node.target.partition("::")[0]
        if schema.is_mutable and namespace not in PURE_NAMESPACES:
            violation = fresh_write_violation(self.graph, node)
            if violation is not None:
                raise self.fail(node, violation)
            return  # a custom operator writing fresh buffers (ir/fresh_writes.py)
        if schema.is_mutable:
            written = [a.name for a in schema.arguments
                       if a.alias_info is not None and a.alias_info.is_write]
            raise self.fail(node, "mutates its argument(s) "
                                  f"{', '.join(written) or '(unknown)'}; core-functional "
                                  "programs are functional (mutations belong in the signature)")
        if namespace == "prims":
            raise self.fail(node, "prims operators are not allowed in core-functional; "
                                  "decompose to Core ATen")
        if namespace != "aten":
            return  # a custom operator: an opaque call
        if torch.Tag.core in op.tags or node.target in CORE_FUNCTIONAL_EXTRA_OPS:
            return
        if node.target in declared_extern_ops(self.program):
            return
        raise self.fail(node, "is not in the Core ATen opset; core-functional programs "
                              "call only Core ATen operators (decompose it) or extern ops "
                              f"declared in metadata['aot'][{EXTERN_OPS_KEY!r}]")

    def check_constant(self, node: Node) -> None:
        self.check_stored_tensor(node)

    def check_get_attr(self, node: Node) -> None:
        self.check_stored_tensor(node)

    def check_stored_tensor(self, node: Node) -> None:
        if node.args or node.kwargs:
            raise self.fail(node, f"a {node.op} node takes no arguments")
        tensor = self.program.tensors.get(node.target)
        if tensor is None:
            raise self.fail(node, f"{node.op} target {node.target!r} is not in program.tensors")
        meta = node.meta
        if not isinstance(meta, TensorMeta):
            raise self.fail(node, f"a {node.op} node needs TensorMeta")
        if meta.dtype != tensor.dtype or (
            all(isinstance(s, int) for s in meta.sizes) and tuple(meta.sizes) != tensor.shape
        ):
            raise self.fail(node, f"meta says {meta.dtype} {list(meta.sizes)} but "
                                  f"program.tensors[{node.target!r}] is {tensor.dtype} "
                                  f"{list(tensor.shape)}")

    def check_output(self, node: Node) -> None:
        if len(node.args) != 1 or not isinstance(node.args[0], tuple) or node.kwargs:
            raise self.fail(node, "the output node takes one argument: a tuple of values")

    def check_symbols(self, node: Node, meta: Meta) -> None:
        if isinstance(meta, tuple):
            for m in meta:
                self.check_symbols(node, m)
            return
        if not isinstance(meta, TensorMeta):
            return
        if len(meta.sizes) != len(meta.strides):
            raise self.fail(node, f"meta has {len(meta.sizes)} sizes but "
                                  f"{len(meta.strides)} strides")

    # -- signature -----------------------------------------------------------------

    def check_signature(self) -> None:
        placeholders = [n.name for n in self.graph.placeholders]
        input_specs = self.program.signature.inputs.get(self.name)
        if input_specs is not None:
            names = [s.name for s in input_specs]
            if names != placeholders:
                raise self.fail(None, f"signature inputs {names} do not match the "
                                      f"placeholders {placeholders}")
            for spec in input_specs:
                if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT) \
                        and not spec.target:
                    raise self.fail(self.graph.node(spec.name),
                                    f"a {spec.kind.value} input needs a target name")
        output_specs = self.program.signature.outputs.get(self.name)
        if output_specs is not None:
            n_values = len(self.graph.output.args[0])  # type: ignore[arg-type]
            if len(output_specs) != n_values:
                raise self.fail(self.graph.output, f"signature labels {len(output_specs)} "
                                                   f"outputs but the graph returns {n_values}")
            for i, out_spec in enumerate(output_specs):
                if out_spec.kind == OutputKind.MUTATED_INPUT and \
                        out_spec.target not in placeholders:
                    raise self.fail(self.graph.output, f"output {i} is a mutated input of "
                                                       f"{out_spec.target!r}, not a placeholder")
                if out_spec.kind == OutputKind.GRADIENT and "forward" in self.program.graphs:
                    inputs = [n.name for n in self.program.forward.placeholders]
                    if out_spec.target not in inputs:
                        raise self.fail(self.graph.output, f"output {i} is the gradient of "
                                                           f"{out_spec.target!r}, not an input "
                                                           "of the forward graph")


def _all_arguments(node: Node) -> list[tuple[str, object]]:
    positional: list[tuple[str, object]] = [(f"#{i}", a) for i, a in enumerate(node.args)]
    return positional + [(f"{k!r}", v) for k, v in node.kwargs.items()]


def _is_optional(argument: torch.Argument) -> bool:
    """An ``X?`` argument without a default may be left out (it is then None)."""
    return str(argument.type).startswith("Optional[")


def _return_kind(type_text: str) -> str:
    """Classify a schema return type by its text (``Tensor``, ``List[Tensor]``, ...)."""
    return {"Tensor": "tensor", "List[Tensor]": "tensor_list", "Optional[Tensor]": "optional_tensor"}.get(
        type_text, "other"
    )


def _check_program(program: Program, dialect: str) -> None:
    check = _PROGRAM_CHECKS.get(dialect)
    if check is not None:
        check(program)
    elif dialect in DIALECTS_CHECKED_ABOVE:
        raise VerificationError(f"no check is registered for the {dialect!r} dialect; "
                                "import ember.runtime.compiled, which registers it")
