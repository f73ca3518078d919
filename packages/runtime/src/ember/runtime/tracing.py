"""A dispatch-level recorder: run torch code on fake tensors and record every ATen op
as a node of an ``aten``-dialect :class:`~ember.runtime.ir.Program`.

The frontends (tracing and the strict bytecode interpreter) and the aot stage build
their graphs with it. Example::

    import torch
    from ember.runtime.ir import InputSpec
    from ember.runtime.tracing import GraphRecorder

    rec = GraphRecorder()                               # makes its own FakeTensorMode
    x = rec.add_input(torch.randn(4, 8), InputSpec("x"))
    w = rec.add_input(torch.randn(8, 3), InputSpec("w"))
    with rec:                                           # the recording dispatch mode
        y = torch.relu(x @ w)
    program = rec.finish([y])  # %mm = aten::mm.default(%x, %w); %relu = relu(%mm)

What gets recorded, and how:

* Every ATen op that runs while the recorder is entered becomes one ``call`` node whose
  ``target`` is the op's qualified name (``aten::mm.default``). Ops are recorded after
  torch's autograd and CompositeImplicit decompositions, as the dispatcher runs them (but
  for :mod:`.tracing_rewrites`): in-place, ``out=``, view and random ops as is. An op's result
  (an in-place op's too) is then referenced through its node: every mutation has a user.
* Arguments are encoded as IR arguments: recorded tensors become :class:`ValueRef`,
  lists become tuples; ints, floats, bools, strings, dtypes, devices, layouts and memory
  formats stay as they are. An op with several results (``max.dim``, ``split``) is one
  node with a tuple of metas; its consumers use ``ValueRef(name, i)``.
* A real tensor that reaches an op (captured from a closure, a module attribute that is
  not an input) becomes a ``constant`` node, stored in ``program.tensors``. A tensor
  made from Python data (``torch.tensor([1, 2])``) becomes a ``constant`` node plus a
  call of ``aten::lift_fresh_copy.default``, so each run gets a fresh copy.
* Every node gets metadata (:class:`TensorMeta`; ``requires_grad`` is read when
  :meth:`GraphRecorder.finish` runs, so it reflects torch's autograd) and a
  :class:`SourceLocation`: the one set by :meth:`GraphRecorder.set_source`, else the
  innermost Python frame outside torch/ember/stdlib.
* Inputs: placeholders stay in front of the graph, also when :meth:`add_input` is
  called while recording (the fake conversion it runs is not recorded). An input that
  shares memory with an earlier one is described in ``metadata["input_aliases"]``.
* Outputs: graph outputs are tensors only. An output that is an input (identity) is a
  reference to its placeholder; an output seen twice is referenced twice. Non-tensor
  results (Python numbers, None) are not graph outputs: the caller keeps them in its own
  output description (the frontend stores them as constants of its pytree spec).
* Views and ``detach`` calls whose results nobody reads are dropped by :meth:`finish`
  (autograd makes them while it records); nothing else is removed.
* Ops on fake tensors outside ``with recorder:`` are not recorded, and their results
  cannot be used later (a :class:`RecordingError` says so).
* Dynamic shapes (``GraphRecorder(dynamic=True)``, :mod:`ember.runtime.tracing_symbolic`):
  the recorder runs under its own ShapeEnv; ``add_input(..., dynamic_dims={0: (2,
  None)})`` makes dims symbols (``s0``), ``add_meta_input`` makes an input from IR
  metadata over given symbols; SymInt arguments become ``SymExpr`` (``sym(2*s0)``), metas
  hold canonical size text, :meth:`finish` fills ``graph.symbols`` and ``graph.guards``,
  and ``matmul`` is expanded in Python (:mod:`.tracing_matmul`). A float Scalar computed
  from sizes becomes a 0-dim tensor (:mod:`.tracing_size_floats`).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Self

import torch
from ember.runtime.custom_ops import missing_fake_kernel
from ember.runtime._torch import (FakeTensorMode, ShapeEnv, TorchDispatchMode,
                                  heuristics_unguarded, is_fake, is_op_overload, make_shape_env,
                                  op_schema, symbolic_meta_kernels, unset_fake_temporarily)
from ember.runtime.ir import (
    Argument,
    Graph,
    InputSpec,
    Meta,
    Node,
    OutputSpec,
    Program,
    ScalarMeta,
    Signature,
    SourceLocation,
    SymbolRange,
    SymInt,
    TensorMeta,
    ValueRef,
    is_view,
    qualified_name,
    writes_arguments,
)
from ember.runtime.ir.contracts import INPUT_ALIASES_KEY, InputAlias, InputAliases
from ember.runtime.tracing_errors import RecordingError, SymbolicValueError
from ember.runtime.tracing_grad import (
    hidden_write_positions,
    mark_copies_below_autograd,
    with_requires_grad,
)
from ember.runtime.tracing_source import user_source_location
from ember.runtime.tracing_matmul import SymbolicMatmul
from ember.runtime.tracing_rewrites import RECORD_REWRITES, fake_result_fixed, run_fake
from ember.runtime.tracing_scalars import TensorScalars
from ember.runtime.tracing_size_floats import SizeFloats
from ember.runtime.tracing_symbolic import RecordedSymbols

__all__ = ["GraphRecorder", "RecordingError", "SymbolicValueError"]

_LIFT_FRESH = {torch.ops.aten.lift_fresh.default}

# Metadata queries sent through the mode (autograd asks for symbolic sizes): never recorded
_METADATA_QUERIES = {
    "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "size", "stride", "dim",
    "numel", "is_contiguous", "is_strides_like_format", "is_non_overlapping_and_dense",
}


class _RecordingMode(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """The dispatch mode that forwards every op to :meth:`GraphRecorder._record`."""

    def __init__(self, recorder: GraphRecorder) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return self.recorder._record(func, args, kwargs or {})


class GraphRecorder:
    """Records the ATen ops run on its tracked fake tensors into a Program.

    Args:
        fake_mode: the FakeTensorMode to run in; a new one (static shapes) if None.
        decompositions: op overload -> a Python function that computes it with other
            ops; such an op is not recorded, the ops its function runs are (recursively).
            A function may return ``NotImplemented`` to record the op itself.
        lift: called with each real tensor that reaches an op (a closure variable);
            an InputSpec it returns makes the tensor an input (a placeholder, listed in
            :attr:`lifted`) instead of a ``constant`` node; None keeps it a constant.
            E.g. the frontend lifts tensors that require grad, so gradients reach them.
        dynamic: record with symbolic shapes: a FakeTensorMode with its own ShapeEnv
            (unless ``fake_mode`` has one); inputs stay static unless ``add_input`` is
            given ``dynamic_dims`` (or ``add_meta_input`` symbolic metadata).

    Use :meth:`add_input` for each graph input, run the code inside ``with recorder:``
    (it may be entered several times, e.g. around each traced instruction), then call
    :meth:`finish` once.
    """

    def __init__(
        self,
        fake_mode: FakeTensorMode | None = None,
        decompositions: Mapping[Any, Callable[..., Any]] | None = None,
        lift: Callable[[torch.Tensor], InputSpec | None] | None = None,
        dynamic: bool = False,
    ) -> None:
        if fake_mode is None:
            fake_mode = (FakeTensorMode(shape_env=make_shape_env()) if dynamic
                         else FakeTensorMode())
        self.fake_mode = fake_mode
        self.symbols = RecordedSymbols(fake_mode, self._current_source) if dynamic else None
        self.decompositions = {**RECORD_REWRITES, **(decompositions or {})}
        # Scalar arguments read from tensors, or computed from sizes
        self.scalars = TensorScalars(SizeFloats(self.symbols.symint) if self.symbols else None)
        self.lift = lift
        self.lifted: list[tuple[torch.Tensor, InputSpec]] = []  # (real tensor, its input)
        self.graph = Graph()
        self.input_specs: list[InputSpec] = []
        self.tensors: dict[str, torch.Tensor] = {}
        # inputs that share memory with an earlier input (see _input_alias); the program
        # carries them as metadata["input_aliases"] so that the aot stage keeps the
        # aliasing eager torch has.
        self.input_aliases: dict[str, InputAlias] = {}
        # files the program carries (the source of a user Triton kernel a node launches)
        self.files: dict[str, bytes] = {}
        # id(tensor) -> (tensor, value): the tensor is kept alive so its id stays unique.
        self._values: dict[int, tuple[torch.Tensor, ValueRef]] = {}
        # id(real tensor) -> (tensor, its constant node); kept alive for the same reason.
        self._constants: dict[int, tuple[torch.Tensor, ValueRef]] = {}
        self._results: dict[str, Any] = {}  # node name -> the fake value(s) it produced
        self._grad_mode: dict[str, bool] = {}  # node name -> grad mode when recorded
        self._name_counts: dict[str, itertools.count[int]] = {}
        self._names: set[str] = {"output"}  # (the output node's)
        self._source: SourceLocation | None = None
        self._mode: _RecordingMode | None = None
        self._matmul: SymbolicMatmul | None = None  # entered by a dynamic recorder
        self._paused = 0  # > 0 while the recorder's own work runs ops (fake conversion)
        self._n_placeholders = 0
        self._finished = False

    # ---- building ---------------------------------------------------------------------

    @property
    def converting(self) -> bool:
        """True while the recorder's own unrecorded ops run (making an input's fake)."""
        return self._paused > 0

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Run ops that make an input's fake (not recorded; :attr:`converting`)."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    @property
    def shape_env(self) -> ShapeEnv | None:
        """The ShapeEnv of a dynamic recorder (None for a static one)."""
        return self.symbols.shape_env if self.symbols is not None else None

    def add_input(self, tensor: torch.Tensor, spec: InputSpec,
                  dynamic_dims: Mapping[int, tuple[int, int | None]] | None = None
                  ) -> torch.Tensor:
        """Add a placeholder named ``spec.name`` for ``tensor`` (real or fake of this
        recorder's mode) and return the fake tensor that stands for it while recording.

        Args:
            dynamic_dims: dim -> inclusive ``(min, max)`` (max None: unbounded) for the
                dims that get a size symbol (dynamic recorders only); ``min`` is
                clipped to 2 and a size 0 or 1 stays static (it specialises).

        Raises:
            RecordingError: if the name is taken, the tensor is a fake of another mode,
                or ``dynamic_dims`` is given to a static recorder or out of range.
        """
        if spec.name in self._names:
            raise RecordingError(f"input name {spec.name!r} is used twice (or is 'output')")
        if not isinstance(tensor, torch.Tensor):
            raise RecordingError(f"input {spec.name!r} is a {type(tensor).__name__}, "
                                 "not a tensor")
        if dynamic_dims and self.symbols is None:
            raise RecordingError(f"input {spec.name!r}: dynamic_dims needs "
                                 "GraphRecorder(dynamic=True)")
        fake = self._to_fake(tensor, spec.name, dynamic_dims or {})
        meta = TensorMeta.of(tensor) if self.symbols is None else self.symbols.tensor_meta(
            fake, f"input {spec.name!r}")
        self._add_placeholder(fake, meta, spec)
        return fake

    def add_meta_input(self, meta: TensorMeta, spec: InputSpec,
                       symbols: Mapping[str, SymbolRange]) -> torch.Tensor:
        """Add a placeholder whose metadata is ``meta`` (sizes may be expressions over
        the IR symbols ``symbols``, which keep their names in the recorded graph) and
        return the fake tensor that stands for it (dynamic recorders only).

        Raises:
            RecordingError: for a static recorder, a taken name or an unknown symbol.
        """
        if self.symbols is None:
            raise RecordingError(f"input {spec.name!r}: add_meta_input needs "
                                 "GraphRecorder(dynamic=True)")
        if spec.name in self._names:
            raise RecordingError(f"input name {spec.name!r} is used twice (or is 'output')")
        with self.paused():
            fake = self.symbols.meta_fake(meta, symbols)
        self._add_placeholder(fake, meta, spec)
        return fake

    def symint_to_ir(self, value: int | torch.SymInt) -> SymInt:
        """An int or a SymInt of this recorder's ShapeEnv as an IR size (an int or
        canonical text over the graph's symbols).

        Raises:
            RecordingError: for a symbol the graph cannot bind or a torch function
                without an IR form.
        """
        if isinstance(value, int) or self.symbols is None:
            return int(value)
        return self.symbols.ir(value, f"size {value}")

    def _add_placeholder(self, fake: torch.Tensor, meta: TensorMeta, spec: InputSpec) -> None:
        alias = self._input_alias(fake, spec.name)
        if alias is not None:
            self.input_aliases[spec.name] = alias
        # NOTE: placeholders stay in front of the graph, also when added mid-recording.
        self._add_node(Node(spec.name, "placeholder", spec.name, meta=meta), fake,
                       name_is_final=True, position=self._n_placeholders)
        self._n_placeholders += 1
        self.input_specs.append(spec)

    def _input_alias(self, fake: torch.Tensor, name: str) -> InputAlias | None:
        """How input ``fake`` shares memory with an earlier input, or None: the earlier
        input's name and this one's sizes, strides and storage offset (absolute)."""
        storage = fake.untyped_storage()
        for spec in self.input_specs:
            earlier = self._results.get(spec.name)
            if isinstance(earlier, torch.Tensor) and earlier.untyped_storage() is storage:
                values = (*fake.shape, *fake.stride(), fake.storage_offset())
                if not all(isinstance(v, int) for v in values):
                    raise RecordingError(f"input {name!r} shares memory with input "
                                         f"{spec.name!r} and has symbolic sizes; make its "
                                         "dims static")
                return InputAlias(spec.name, tuple(int(s) for s in fake.shape),
                                  tuple(int(s) for s in fake.stride()),
                                  int(fake.storage_offset()))
        return None

    def set_source(self, location: SourceLocation | None) -> None:
        """Attach ``location`` to the nodes recorded from now on; None goes back to
        deriving it from the Python stack."""
        self._source = location

    def value_of(self, tensor: torch.Tensor) -> ValueRef | None:
        """The value a tracked fake tensor stands for, or None if it is not tracked."""
        entry = self._values.get(id(tensor))
        return entry[1] if entry is not None and entry[0] is tensor else None

    def tensor_sized_by(self, symbol: Any) -> tuple[torch.Tensor, int] | None:
        """A recorded tensor and dim of size ``symbol`` (``nonzero``'s rows), or None."""
        return next(((t, d) for t, _ in self._values.values() for d, size in enumerate(t.shape)
                     if isinstance(size, torch.SymInt) and size.node.expr == symbol), None)

    def __enter__(self) -> Self:
        if self._finished:
            raise RecordingError("this recorder has finished; make a new one")
        if self._mode is not None:
            raise RecordingError("the recorder is already entered")
        fake_mode: Any = self.fake_mode
        fake_mode.__enter__()
        self._mode = _RecordingMode(self)
        self._mode.__enter__()  # type: ignore[no-untyped-call]
        if self.symbols is not None:
            self._matmul = SymbolicMatmul()
            self._matmul.__enter__()  # type: ignore[no-untyped-call]
        return self

    def __exit__(self, *exc: object) -> None:
        mode, self._mode = self._mode, None
        assert mode is not None
        fake_mode: Any = self.fake_mode
        matmul, self._matmul = self._matmul, None
        try:
            if matmul is not None:  # entered last, left first
                matmul.__exit__(*exc)  # type: ignore[no-untyped-call]
            mode.__exit__(*exc)  # type: ignore[no-untyped-call]
        finally:
            fake_mode.__exit__(*exc)

    def finish(
        self,
        outputs: Sequence[torch.Tensor],
        output_specs: Sequence[OutputSpec] | None = None,
        graph_name: str = "forward",
    ) -> Program:
        """Close the graph with an ``output`` node returning ``outputs`` and build the
        Program (dialect ``aten``). ``output_specs`` default to USER_OUTPUT each.

        Raises:
            RecordingError: for an output that is not a tensor, or a fake tensor this
                recorder did not produce.
        """
        if self._finished:
            raise RecordingError("finish() was already called")
        refs: list[Argument] = []
        for i, out in enumerate(outputs):
            if not isinstance(out, torch.Tensor):
                raise RecordingError(
                    f"output {i} is a {type(out).__name__}; graph outputs must be tensors "
                    "(keep non-tensor results outside the graph)"
                )
            refs.append(self._ref_of(out, f"output {i}"))
        specs = list(output_specs) if output_specs is not None else [OutputSpec()] * len(refs)
        if len(specs) != len(refs):
            raise RecordingError(f"{len(specs)} output specs for {len(refs)} outputs")
        self._refresh_requires_grad()
        self._drop_unused_views(refs)
        self._add_node(Node("output", "output", "output", args=(tuple(refs),)), None,
                       name_is_final=True)
        if self.symbols is not None:
            self.symbols.finish(self.graph)
        self._finished = True
        return Program(
            graphs={graph_name: self.graph},
            signature=Signature(inputs={graph_name: list(self.input_specs)},
                                outputs={graph_name: specs}),
            dialect="aten",
            tensors=dict(self.tensors),
            files=dict(self.files),
            metadata=({INPUT_ALIASES_KEY: InputAliases(dict(self.input_aliases)).to_json()}
                      if self.input_aliases else {}),
        )

    # ---- recording ops ----------------------------------------------------------------

    def _record(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not is_op_overload(func):
            raise RecordingError(f"cannot record {func!r}: not an ATen operator overload")
        namespace, _, rest = op_schema(func).name.partition("::")
        if self._paused or namespace == "prim" or rest in _METADATA_QUERIES:
            return func(*args, **kwargs)
        decomposition = self.decompositions.get(func)
        if decomposition is not None:
            assert self._mode is not None
            with self._mode:  # record the ops the decomposition runs
                result = decomposition(*args, **kwargs)
            if result is not NotImplemented:
                return result
        rewrite = self.scalars.rewrite(func, args, kwargs)
        if rewrite is not None:
            assert self._mode is not None
            with self._mode:  # the ops reading the tensors are recorded
                return rewrite()
        if func in _LIFT_FRESH:
            # NOTE: lift_fresh aliases its argument; the copy keeps the stored constant
            # safe from in-place ops on the result.
            func = torch.ops.aten.lift_fresh_copy.default
        fake_args = [self._fakeify(a) for a in args]
        fake_kwargs = {k: self._fakeify(v) for k, v in kwargs.items()}
        ir_args = tuple(self._encode(a, func) for a in fake_args)
        ir_kwargs = {k: self._encode(v, func) for k, v in fake_kwargs.items()}
        target = qualified_name(func)
        with heuristics_unguarded(self.shape_env), symbolic_meta_kernels(self.shape_env):
            try:
                result = run_fake(func, target, fake_args, fake_kwargs)
            except (RuntimeError, NotImplementedError) as e:
                missing = missing_fake_kernel(target, e)  # a custom op without one
                if missing is None:
                    raise
                raise missing from e
            result = fake_result_fixed(target, result)
        if self.scalars.note(func, fake_args, result):
            return result  # a float read from a tensor: no node (rewrite uses the tensor)
        hidden = hidden_write_positions(target, fake_args)
        written = [ir_args[i] for i in hidden]
        ir_args = self._detached(ir_args, fake_args, hidden)
        base = target.split("::", 1)[1].split(".", 1)[0]
        node = Node(base, "call", target, args=ir_args, kwargs=ir_kwargs,
                    meta=self._meta_of(result, target), source=self._current_source())
        self._add_node(node, result)
        for i, ref in zip(hidden, written):  # later reads: the tensor, not its detach
            assert isinstance(ref, ValueRef)
            self._values[id(fake_args[i])] = (fake_args[i], ref)
        return result

    def _detached(self, ir_args: tuple[Argument, ...], fake_args: list[Any],
                  positions: list[int]) -> tuple[Argument, ...]:
        """``ir_args`` with those at ``positions`` read through a recorded ``detach``
        (a write under no_grad: tracing_grad.py)."""
        out = list(ir_args)
        for i in positions:
            detached = torch.ops.aten.detach.default(fake_args[i])
            node = Node("detach", "call", "aten::detach.default", args=(ir_args[i],),
                        meta=self._meta_of(detached, "aten::detach.default"),
                        source=self._current_source())
            self._add_node(node, detached)
            out[i] = ValueRef(node.name)
        return tuple(out)

    def _fakeify(self, value: Any) -> Any:
        """Replace real tensors (closure constants) by tracked fakes of constant nodes."""
        if isinstance(value, torch.Tensor) and not is_fake(value):
            ref = self._constant(value)
            return self._results[ref.node]
        if isinstance(value, (list, tuple)):
            return type(value)(self._fakeify(v) for v in value)
        return value

    def _constant(self, tensor: torch.Tensor) -> ValueRef:
        known = self._constants.get(id(tensor))
        if known is not None and known[0] is tensor:
            return known[1]
        spec = self.lift(tensor) if self.lift is not None else None
        if spec is not None:
            self.add_input(tensor, spec)
            self.lifted.append((tensor, spec))
            self._constants[id(tensor)] = (tensor, ValueRef(spec.name))
            return ValueRef(spec.name)
        fake = self._to_fake(tensor, "a constant")
        node = Node(self._fresh("_tensor_constant", numbered=True), "constant", "",
                    meta=TensorMeta.of(tensor), source=self._current_source())
        node.target = node.name
        with unset_fake_temporarily():
            self.tensors[node.name] = tensor.detach()
        self._add_node(node, fake, name_is_final=True)
        ref = ValueRef(node.name)
        self._constants[id(tensor)] = (tensor, ref)
        return ref

    def _encode(self, value: Any, func: Any) -> Argument:
        if isinstance(value, torch.Tensor):
            return self._ref_of(value, f"an argument of {qualified_name(func)}")
        if isinstance(value, (list, tuple)):
            return tuple(self._encode(v, func) for v in value)
        if isinstance(value, torch.SymInt) and self.symbols is not None:
            return self.symbols.argument(value, f"an argument of {qualified_name(func)}")
        if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
            raise SymbolicValueError(f"{qualified_name(func)} got a symbolic value {value} "
                                 f"({type(value).__name__}); the IR holds symbolic ints "
                                 "only, and only in a dynamic recorder")
        if value is None or isinstance(
            value, (bool, int, float, str, complex, torch.dtype, torch.device,
                    torch.memory_format, torch.layout)
        ):
            return value
        raise RecordingError(f"cannot record {type(value).__name__} argument {value!r} "
                             f"of {qualified_name(func)}")

    def _ref_of(self, tensor: torch.Tensor, what: str) -> ValueRef:
        ref = self.value_of(tensor)
        if ref is not None:
            return ref
        if not is_fake(tensor):
            return self._constant(tensor)
        raise RecordingError(f"{what} is a fake tensor the recorder did not produce "
                             f"(shape {tuple(tensor.shape)}, {tensor.dtype}); pass it "
                             "through add_input first")

    def _to_fake(self, tensor: torch.Tensor, what: str,
                 dynamic_dims: Mapping[int, tuple[int, int | None]] | None = None
                 ) -> torch.Tensor:
        if is_fake(tensor):
            if getattr(tensor, "fake_mode", None) is not self.fake_mode:
                raise RecordingError(f"{what} is a fake tensor of another FakeTensorMode")
            return tensor
        with self.paused():
            if self.symbols is None:
                return self.fake_mode.from_tensor(tensor)
            if dynamic_dims:
                return self.symbols.fake_of(tensor, what, dynamic_dims)
            return self.symbols.static_fake(tensor, what)

    def _meta_of(self, result: Any, target: str) -> Meta:
        if isinstance(result, (tuple, list)):
            return tuple(self._single_meta(r, target) for r in result)
        return self._single_meta(result, target)

    def _single_meta(self, value: Any, target: str) -> TensorMeta | ScalarMeta | None:
        if self.symbols is not None and isinstance(value, torch.Tensor):
            return self.symbols.tensor_meta(value, f"the result of {target}")
        if self.symbols is not None and isinstance(value, torch.SymInt):
            return self.symbols.scalar_meta(value)
        return _single_meta(value, target)

    # ---- bookkeeping ------------------------------------------------------------------

    def _add_node(self, node: Node, result: Any, name_is_final: bool = False,
                  position: int | None = None) -> None:
        if not name_is_final:
            node.name = self._fresh(node.name)
        self._names.add(node.name)
        if position is None:
            self.graph.nodes.append(node)
        else:
            self.graph.nodes.insert(position, node)
        self._results[node.name] = result
        self._grad_mode[node.name] = torch.is_grad_enabled()
        if isinstance(result, torch.Tensor):
            self._values[id(result)] = (result, ValueRef(node.name))
        elif isinstance(result, (tuple, list)):
            for i, r in enumerate(result):
                if isinstance(r, torch.Tensor):
                    self._values[id(r)] = (r, ValueRef(node.name, i))

    def _fresh(self, base: str, numbered: bool = False) -> str:
        counter = self._name_counts.setdefault(base, itertools.count())
        while True:
            i = next(counter)
            name = f"{base}{i}" if numbered else (base if i == 0 else f"{base}_{i}")
            if name not in self._names:
                return name

    def _current_source(self) -> SourceLocation | None:
        return self._source if self._source is not None else user_source_location()

    def _drop_unused_views(self, outputs: list[Argument]) -> None:
        """Remove views and detaches nobody reads (autograd's saved tensors, view replay)
        and unused truth-value reads (``any(t)`` reads one, then breaks; an ``int`` read
        may bind a symbol later sizes use)."""
        used = {r.node for r in outputs if isinstance(r, ValueRef)}
        kept: list[Node] = []
        for node in reversed(self.graph.nodes):
            if node.op == "call" and node.name not in used and (
                    _is_pure_view(node.target) or _is_truth_read(node)):
                continue
            used.update(r.node for r in node.inputs())
            kept.append(node)
        self.graph.nodes = kept[::-1]

    def _refresh_requires_grad(self) -> None:
        """Read ``requires_grad`` from the fake results now that autograd has set it."""
        for node in (n for n in self.graph.nodes if n.op == "call"):
            node.meta = with_requires_grad(node.meta, self._results.get(node.name))
        mark_copies_below_autograd(self.graph, self._grad_mode)


def _is_pure_view(target: str) -> bool:
    return is_view(target) and not writes_arguments(target)


def _is_truth_read(node: Node) -> bool:
    return node.target == "aten::_local_scalar_dense.default" and node.meta == ScalarMeta("bool")


def _single_meta(value: Any, target: str) -> TensorMeta | ScalarMeta | None:
    if isinstance(value, torch.Tensor):
        return TensorMeta.of(value)
    if value is None:
        return None
    for kind, name in ((bool | torch.SymBool, "bool"), (int | torch.SymInt, "int"),
                       (float | torch.SymFloat, "float")):  # bool first: a bool is an int
        if isinstance(value, kind):
            return ScalarMeta(name)
    raise RecordingError(f"{target} returned a {type(value).__name__}, which the IR "
                         "cannot describe")
