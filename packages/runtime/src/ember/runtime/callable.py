"""ProgramCallable: a compiled program as a plain function over flat inputs.

It runs the ``forward`` graph through an executor and applies the signature's epilogue:

* outputs labelled MUTATED_INPUT are copied back into the input they belong to (under
  ``no_grad``) and hidden from the caller; one that is the input's own memory (the
  compiled code wrote the input in place) is not copied onto itself, and the input's
  version counter is bumped as an in-place op's would be;
* SAVED_TENSOR outputs (kept for a backward graph) are hidden too;
* outputs labelled ALIASED_OUTPUT are rebuilt as views of the input or output they
  alias (``program.metadata["aot"]["aliased_outputs"]``), so the caller sees the same
  aliasing eager torch gives.

Each call's input sizes are checked once, by what runs the graph: a ``compiled``
program's wrapper binds its size symbols and tests every input size, symbol range and
guard inline (raising the :class:`~ember.runtime.ir.symbolic.ShapeError` that names the
input, dim, symbol and range or guard), ``aten``/``core-functional`` programs are checked
by the interpreter. This class checks nothing itself; a program with symbolic aliased
outputs only reads its symbols' values off the input sizes (:class:`SymbolReader`) to
rebuild those views, after the executor has checked them. Static programs pay nothing for this.

A program with a ``backward`` graph runs through :mod:`ember.runtime.autograd` when grad
mode is on and an input requires grad; otherwise (``torch.no_grad()``, inference) only the
forward graph runs and the backward graph is never built.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from ember.runtime.autograd import TrainingRunner
from ember.runtime.executor import ExecutorFactory, make_executor
from ember.runtime.input_stamp import MIN_TENSORS, InputStamp
from ember.runtime.interpreter import bind_inputs
from ember.runtime.ir import Graph, InputKind, OutputKind, OutputSpec, Program, TensorMeta, ValueRef
from ember.runtime.ir.contracts import AliasedOutput, AotMetadata, InputAliases, reinterpreted
from ember.runtime.ir.symbolic import SymbolBinder, UnboundSymbolError, evaluate, is_symbol
from torch.autograd.graph import increment_version

if TYPE_CHECKING:
    from ember.runtime.cudagraphs import CudaGraphs
    from ember.runtime.cudagraphs_replay import GraphCapture

_HIDDEN_KINDS = (OutputKind.MUTATED_INPUT, OutputKind.SAVED_TENSOR)


@dataclass(frozen=True)
class BoundAliasedOutput:
    """An :class:`~ember.runtime.ir.contracts.AliasedOutput` with its base resolved to a
    position: input ``base_input`` or output ``base_output``. ``symbolic``: its sizes,
    strides or offset are expressions over the graph's size symbols. ``detached``: the
    traced output did not require grad where its base did (``x.detach()``,
    ``x[0].detach()``): it is a view of the base's detached alias, as in eager."""

    spec: AliasedOutput
    base_input: int | None
    base_output: int | None
    symbolic: bool = False
    detached: bool = False

    def rebuild(self, base: Any, computed: Any,
                symbols: Mapping[str, int] | None = None) -> Any:
        """Output ``spec.output`` as the view of ``base`` eager torch gives, or
        ``computed`` when ``base`` is not a tensor or no longer has the traced strides
        (or, for a symbolic view, ``symbols`` lacks a value its layout needs)."""
        spec = self.spec
        if not isinstance(base, torch.Tensor):
            return computed
        if self.detached:
            base = base.detach()
        if spec.identity:
            return base
        if not self.symbolic:
            if tuple(base.stride()) != spec.base_strides:
                return computed
            return _view(base, spec.dtype, spec.sizes, spec.strides,
                         int(spec.storage_offset), computed)
        env = symbols or {}
        try:
            sizes, strides, offset, base_strides = _layout(spec, env)
        except UnboundSymbolError:
            # NOTE: a size only the program knows (``x.narrow(0, 0, n.item())``): read it
            # off the computed copy, which has the view's sizes and strides
            if not (isinstance(computed, torch.Tensor) and computed.dim() == len(spec.sizes)):
                return computed
            try:
                sizes, strides, offset, base_strides = _layout(
                    spec, _with_layout_of(spec, computed, env))
            except UnboundSymbolError:
                return computed
        if tuple(base.stride()) != base_strides:
            return computed
        return _view(base, spec.dtype, sizes, strides, offset, computed)


def _layout(spec: AliasedOutput, env: Mapping[str, int]
            ) -> tuple[list[int], list[int], int, tuple[int, ...]]:
    """``spec``'s sizes, strides, offset and base strides at the symbols ``env``."""
    return ([evaluate(s, env) for s in spec.sizes], [evaluate(s, env) for s in spec.strides],
            evaluate(spec.storage_offset, env),
            tuple(evaluate(s, env) for s in spec.base_strides))


def _with_layout_of(spec: AliasedOutput, computed: torch.Tensor,
                    env: Mapping[str, int]) -> dict[str, int]:
    """``env`` and each symbol it lacks that is one of ``spec``'s sizes or strides as it
    stands, bound to ``computed``'s."""
    out = dict(env)
    for declared, actual in (*zip(spec.sizes, computed.shape),
                             *zip(spec.strides, computed.stride())):
        if is_symbol(declared):
            out.setdefault(str(declared), int(actual))
    return out


def _view(base: torch.Tensor, dtype: torch.dtype | None, sizes: Any, strides: Any,
          offset: int, computed: Any) -> Any:
    """``base.as_strided`` from ``offset`` past its own; with a ``dtype`` other than its
    (``AliasedOutput.dtype``), of its memory read as that dtype first: the real view of a
    complex tensor, or ``base.view(dtype)`` for a dtype of the same size. ``computed``
    where torch refuses (a conjugated complex tensor)."""
    if dtype is not None and dtype != base.dtype:
        ratio = reinterpreted(base.dtype, dtype)
        if ratio is None:
            return computed
        try:  # a.real: the base's floats
            base = torch.view_as_real(base) if ratio == 2 else base.view(dtype)
        except RuntimeError:
            return computed
    return base.as_strided(sizes, strides, base.storage_offset() + offset)


def _aliased_outputs(program: Program, positions: dict[str, int]) -> list[BoundAliasedOutput]:
    aot = AotMetadata.from_program(program)
    metas = {n.name: n.meta for n in program.forward.nodes}
    values = program.forward.output_values
    result = []
    for alias in aot.aliased_outputs if aot is not None else ():
        if alias.kind == "input" and alias.base not in positions:
            raise ValueError(f"aliased output {alias.output} views {alias.base!r}, which is "
                             "not a placeholder of the forward graph")
        symbolic = not all(isinstance(v, int) for v in (
            *alias.sizes, *alias.strides, alias.storage_offset, *alias.base_strides))
        # NOTE: traced not requiring grad where its base did: a .detach() on the way
        base = alias.base if alias.kind == "input" else values[int(alias.base)]
        detached = _requires_grad(metas, base) and not _requires_grad(
            metas, values[alias.output])
        result.append(BoundAliasedOutput(
            alias, positions[alias.base] if alias.kind == "input" else None,
            alias.base_output, symbolic, detached))
    return result


def _requires_grad(metas: Mapping[str, Any], value: Any) -> bool:
    """Whether the node named ``value`` (or that ``value`` refers to) was traced
    requiring grad."""
    meta = metas.get(value.node if isinstance(value, ValueRef) else value)
    return isinstance(meta, TensorMeta) and meta.requires_grad


@dataclass(frozen=True)
class BoundInputAlias:
    """Input ``input`` was captured as a view of input ``base`` (same storage)."""

    input: int
    base: int
    strides: tuple[int, ...]
    relative_offset: int


def _declared_input_aliases(program: Program,
                            positions: dict[str, int]) -> list[BoundInputAlias]:
    placeholders = program.forward.placeholders
    result = []
    for name, alias in InputAliases.from_program(program).by_input.items():
        if name not in positions or alias.base not in positions:
            raise ValueError(f"metadata input_aliases names {name!r} -> {alias.base!r}, "
                             "which are not placeholders of the forward graph")
        base_meta = placeholders[positions[alias.base]].meta
        base_offset = base_meta.storage_offset if isinstance(base_meta, TensorMeta) else 0
        result.append(BoundInputAlias(positions[name], positions[alias.base], alias.strides,
                                      alias.storage_offset - int(base_offset)))
    return result


class InputAliasingError(RuntimeError):
    """The inputs of a call share memory other than the program's inputs did at capture
    (a declared alias that no longer holds, or an input the program writes that now
    shares memory with another): the program would compute something else. Raised
    before anything runs; a caller that can capture again does (the Dynamo backend)."""


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    sa, sb = a.untyped_storage(), b.untyped_storage()
    return bool(sa.nbytes() > 0 and sa.data_ptr() == sb.data_ptr())


def _written_in_place(value: Any, target: Any) -> bool:
    """Whether mutated-input output ``value`` is input ``target`` itself, or its memory
    (same address, sizes, strides and dtype) with no autograd history to hand over: the
    program wrote the input in place and its copy back would copy it onto itself."""
    if value is target:
        return isinstance(value, torch.Tensor)
    return (isinstance(value, torch.Tensor) and isinstance(target, torch.Tensor)
            and not value.requires_grad and value.data_ptr() == target.data_ptr()
            and value.dtype == target.dtype and value.device == target.device
            and value.shape == target.shape and value.stride() == target.stride())


def byte_extent(t: torch.Tensor) -> int:
    """The bytes from ``t``'s first element to just past the last one it addresses (a
    non-empty tensor; strided or expanded ones included)."""
    last = sum((int(size) - 1) * int(stride) for size, stride in zip(t.shape, t.stride()))
    return (last + 1) * t.element_size()


def may_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` may share memory (their byte ranges in one storage meet)."""
    if not _same_storage(a, b) or a.numel() == 0 or b.numel() == 0:
        return False
    a0 = int(a.storage_offset()) * a.element_size()
    b0 = int(b.storage_offset()) * b.element_size()
    return a0 < b0 + byte_extent(b) and b0 < a0 + byte_extent(a)


def _any_overlap(full: Sequence[Any]) -> bool:
    """Whether any two tensors of ``full`` may share bytes (their address ranges meet).

    The fast path of the aliasing check: one sort of the inputs' address ranges, about
    0.5 ms for an optimizer step's 960 inputs where grouping them by storage cost 6 ms.
    Distinct allocations never meet, so a call where no ranges meet has no aliasing;
    when some do (a view passed with its base, a tensor passed twice), the exact check
    runs."""
    spans: list[tuple[int, int]] = []
    for t in full:
        if isinstance(t, torch.Tensor):
            size = t.nbytes
            if size == 0:
                continue
            if not t.is_contiguous():  # strided, expanded: the last byte it addresses
                size = byte_extent(t)
            start = t.data_ptr()
            spans.append((start, start + size))
    spans.sort()
    end = 0
    for start, stop in spans:
        if start < end:
            return True
        end = max(end, stop)
    return False


class DisjointInputs:
    """The fast path of the aliasing check: the stamp (:class:`~ember.runtime.
    input_stamp.InputStamp`, with data pointers) of the last call whose inputs shared no
    bytes. A call whose tensors are at the same addresses with the same types, dtypes,
    sizes and strides, in the same positions (and no tensor where that call had none),
    addresses the same byte ranges: none meet, and :func:`_any_overlap` is skipped (one
    C++ check and a list of pointers instead of a sort of every input's range)."""

    def __init__(self) -> None:
        self.stamp = InputStamp(pointers=True)
        self._positions: tuple[int, ...] = ()
        self._others: tuple[int, ...] = ()

    def holds(self, full: Sequence[Any]) -> bool:
        """Whether ``full`` addresses the byte ranges of the stamped call."""
        if not self.stamp.learnt or len(full) != len(self._positions) + len(self._others):
            return False
        for i in self._others:
            if isinstance(full[i], torch.Tensor):
                return False
        return self.stamp.holds(*[full[i] for i in self._positions])

    def learn(self, full: Sequence[Any]) -> None:
        """Stamp ``full``, whose tensors were found to share no bytes."""
        positions = tuple(i for i, t in enumerate(full) if isinstance(t, torch.Tensor))
        if len(positions) < MIN_TENSORS or self.stamp.off:
            return
        tensor_at = set(positions)
        self._positions = positions
        self._others = tuple(i for i in range(len(full)) if i not in tensor_at)
        self.stamp.learn(*[full[i] for i in positions])


class SymbolReader:
    """The value of each backed size symbol of ``graph``, read off the size of the
    first placeholder dim that has it as its size, without checking anything (for a
    compiled program, whose wrapper checks every size, range and guard itself)."""

    def __init__(self, graph: Graph) -> None:
        self.sites = tuple((sym, site.position, site.dim)
                           for sym, site in SymbolBinder(graph).backed.items())

    def bind(self, inputs: Sequence[Any]) -> dict[str, int]:
        """``{symbol: size}`` from ``inputs`` (one per placeholder, in order)."""
        return {sym: int(inputs[position].size(dim)) for sym, position, dim in self.sites}


class ProgramCallable:
    """Run ``program``'s forward graph: ``outputs = fn(inputs)``.

    ``inputs`` is the flat list of every forward placeholder's value in order (or only
    the user inputs, the parameters/buffers/constants then come from
    ``program.tensors``; see :func:`ember.runtime.interpreter.bind_inputs`). The result
    is the flat list of user-visible outputs in order. With a ``backward`` graph the
    outputs carry autograd history (gradients flow to the inputs that require grad).

    Raises (at construction):
        ValueError: the signature's output specs do not match the graph's outputs, a
            MUTATED_INPUT spec names no placeholder, or the backward graph's interface
            does not match the forward graph's.

    Raises (at call):
        ShapeError: (a ``ValueError``) the input sizes break a symbol's range or a
            guard of a symbolic program (names the input, dim, symbol, the range or
            guard and its source line).
    """

    def __init__(
        self, program: Program, executor_factory: ExecutorFactory = make_executor
    ) -> None:
        self.program = program
        graph = program.forward
        n_outputs = len(graph.output_values)
        specs = program.signature.outputs.get("forward") or [OutputSpec()] * n_outputs
        if len(specs) != n_outputs:
            raise ValueError(
                f"forward graph has {n_outputs} outputs but the signature labels {len(specs)}"
            )
        positions = {p.name: i for i, p in enumerate(graph.placeholders)}
        self._names = list(positions)  # NOTE: once: Graph.placeholders scans every node
        self._n_placeholders = len(positions)
        self._copy_back: list[tuple[int, int]] = []  # (output index, input index)
        self._visible: list[int] = []
        for i, spec in enumerate(specs):
            if spec.kind == OutputKind.MUTATED_INPUT:
                if spec.target not in positions:
                    raise ValueError(
                        f"output {i} is a mutated input of {spec.target!r}, "
                        "which is not a placeholder of the forward graph"
                    )
                self._copy_back.append((i, positions[spec.target]))
            if spec.kind not in _HIDDEN_KINDS:
                self._visible.append(i)
        self._aliased = _aliased_outputs(program, positions)
        self._input_aliases = _declared_input_aliases(program, positions)
        # each aliased input's group (its declared base's, transitively): members of one
        # group may share memory (x = b[0] and y = b[1], both aliases of b)
        parent: dict[int, int] = {}

        def find(i: int) -> int:
            while parent.get(i, i) != i:
                i = parent[i]
            return i

        for alias in self._input_aliases:
            parent[find(alias.input)] = find(alias.base)
        self._alias_group = {i: find(i) for i in parent.keys() | parent.values()}
        self._mutated = sorted({in_index for _, in_index in self._copy_back})
        # written user inputs (not parameters or buffers) take a new value's autograd
        # history also where they had none, as eager's in-place op gives it (_write_back)
        self._user_inputs = {positions[s.name] for s in program.signature.inputs.get(
            "forward", ()) if s.kind == InputKind.USER_INPUT and s.name in positions}
        self._disjoint = DisjointInputs()
        self._forward = executor_factory(program, "forward")
        self._executor_factory = executor_factory
        self.cuda_graphs: CudaGraphs | None = None
        self._training: TrainingRunner | None = None
        if "backward" in program.graphs:
            self._training = TrainingRunner(program, self._forward, executor_factory)
        self._n_saved = sum(1 for s in specs if s.kind == OutputKind.SAVED_TENSOR)
        # NOTE: the executor checks each call's sizes (the interpreter through its
        # SizeBinding, a compiled wrapper inline): only symbolic aliased outputs need
        # the symbols' values here, read once the checked forward has run.
        self._sizes: SymbolReader | None = None
        if graph.symbols and any(a.symbolic for a in self._aliased):
            self._sizes = SymbolReader(graph)

    def _check_input_aliasing(self, full: list[Any]) -> None:
        """The program is only right if its inputs share memory exactly as they did at
        capture: declared aliases must still alias, and no other input may share memory
        with an input the program writes.

        Raises:
            InputAliasingError: naming the two inputs.
        """
        names = self._names
        for alias in self._input_aliases:
            view, base = full[alias.input], full[alias.base]
            if not (isinstance(view, torch.Tensor) and isinstance(base, torch.Tensor)
                    and _same_storage(view, base)
                    and view.storage_offset() - base.storage_offset() == alias.relative_offset
                    and tuple(view.stride()) == alias.strides):
                raise InputAliasingError(
                    f"input {names[alias.input]!r} was captured as a view of input "
                    f"{names[alias.base]!r} but is not one in this call; recompile for "
                    "these inputs")
        if not self._mutated or self._disjoint.holds(full):
            return
        if not _any_overlap(full):
            self._disjoint.learn(full)
            return
        # NOTE: inputs grouped by storage first: an optimizer step writes hundreds of
        # inputs, and comparing each with every input was quadratic (200,000 pairs)
        by_storage: dict[int, list[int]] = {}
        for j, other in enumerate(full):
            if isinstance(other, torch.Tensor):
                storage = other.untyped_storage()
                if storage.nbytes() > 0:
                    by_storage.setdefault(storage.data_ptr(), []).append(j)
        for i in self._mutated:
            written = full[i]
            if not isinstance(written, torch.Tensor):
                continue
            storage = written.untyped_storage()
            if storage.nbytes() == 0:
                continue
            group = self._alias_group.get(i)
            for j in by_storage.get(storage.data_ptr(), ()):
                other = full[j]
                if (j != i and (group is None or self._alias_group.get(j) != group)
                        and may_overlap(written, other)):
                    raise InputAliasingError(
                        f"input {names[j]!r} shares memory with input {names[i]!r}, which "
                        "the program writes, but they did not share memory when the program "
                        "was captured; recompile for these inputs")

    def enable_cuda_graphs(self, capture: GraphCapture | None = None) -> CudaGraphs:
        """Run the program's graphs through CUDA graphs from now on (``mode=
        "reduce-overhead"``; :mod:`ember.runtime.cudagraphs`): each graph that can be
        recorded is, after a warm-up call, per input shape; the others keep running
        plain, with the reason logged under ``EMBER_LOGS=cudagraphs``. Returns the
        program's :class:`~ember.runtime.cudagraphs.CudaGraphs` (its ``stats``).

        Args:
            capture: how graphs are captured (tests pass an emulation).
        """
        from ember.runtime.cudagraphs import CudaGraphs

        if self.cuda_graphs is None:
            graphs = CudaGraphs(self.program, capture)
            self._forward = graphs.wrap(self._forward, "forward")
            if self._training is not None:
                self._training = TrainingRunner(self.program, self._forward,
                                                graphs.wrapping(self._executor_factory))
            self.cuda_graphs = graphs
        return self.cuda_graphs

    @property
    def mutated_inputs(self) -> list[int]:
        """The positions of the inputs the program writes."""
        return self._mutated

    @property
    def has_backward(self) -> bool:
        """Whether the program carries a backward graph."""
        return self._training is not None

    def __call__(self, inputs: Sequence[Any]) -> list[Any]:
        # NOTE: every placeholder's value given (the frontend's case) needs no binding;
        # bind_inputs would scan the graph's nodes on every call to find that out.
        full = (list(inputs) if len(inputs) == self._n_placeholders
                else bind_inputs(self.program, "forward", inputs))
        if self._mutated or self._input_aliases:
            self._check_input_aliasing(full)
        if self._training is not None and torch.is_grad_enabled() and any(
            isinstance(t, torch.Tensor) and t.requires_grad for t in full
        ):
            outputs = self._training.run(full)
        elif self._training is not None:
            # NOTE: inference with a training program: no autograd recording, the saved
            # values are dropped and the backward graph is never built.
            with torch.no_grad():
                outputs = self._forward(full)
            outputs = outputs[: len(outputs) - self._n_saved]
        else:
            outputs = self._forward(full)
        if self._copy_back:
            self._write_back(outputs, full)
        symbols = self._sizes.bind(full) if self._sizes is not None else None
        for alias in self._aliased:
            base = (full[alias.base_input] if alias.base_input is not None
                    else outputs[alias.base_output])  # type: ignore[index]
            outputs[alias.spec.output] = alias.rebuild(base, outputs[alias.spec.output],
                                                       symbols)
        return [outputs[i] for i in self._visible]

    def _write_back(self, outputs: list[Any], full: list[Any]) -> None:
        """Each mutated input's new value into the input (or, where the compiled code
        wrote the input itself, its version counter bumped)."""
        if len(self._copy_back) > 1:
            # NOTE: the common case, every input written in place (an optimizer step's
            # 192), in three C loops where one Python test per input cost ~0.15 us
            targets = [full[i] for _, i in self._copy_back]
            if all(map(operator.is_, [outputs[o] for o, _ in self._copy_back], targets)):
                increment_version(targets)  # a kernel wrote them (below)
                return
        written: list[torch.Tensor] = []
        for out_index, in_index in self._copy_back:
            value = outputs[out_index]
            if _written_in_place(value, full[in_index]):
                written.append(full[in_index])
                continue  # the compiled code wrote the input itself: a self-copy is a launch
            # NOTE: a written input with autograd history takes the new value's history
            # (eager's in-place op does the same), and so does a user input that required
            # no grad (an accumulator given a gradient-carrying value after a graph break
            # requires grad from then on, as in eager); anything else (a buffer) is
            # copied as data. A leaf that requires grad (a parameter) has no history to
            # take: eager writes one only where autograd does not see it (no_grad,
            # through ``detach()``).
            target = full[in_index]
            takes = target.requires_grad if not target.is_leaf else (
                in_index in self._user_inputs and not target.requires_grad)
            with torch.set_grad_enabled(torch.is_grad_enabled() and bool(
                    getattr(value, "requires_grad", False) and takes)):
                target.copy_(value)
        if written:
            # NOTE: a kernel wrote these through their pointers; autograd learns of it as
            # of an in-place op (a tensor saved for a backward now fails its version check)
            increment_version(written)
