"""ProgramCallable (the input-mutation epilogue) and the backend pipeline."""

from __future__ import annotations

from pathlib import Path

import ember.runtime.pipeline as pipeline_module
import ember.runtime.stages as stages_module
import pytest
import torch
from ember.runtime.callable import ProgramCallable
from ember.runtime.config import patch
from ember.runtime.ir import (
    InputKind,
    Node,
    OutputKind,
    OutputSpec,
    Program,
    VerificationError,
    load,
)
from ember.runtime.pipeline import compile_program, list_backends
from ember.runtime.stages import EagerGraphWarning, Stage, StageDeclined, StageNotInstalledError
from handbuilt import ProgramBuilder, mlp_program


def _mutating_program() -> Program:
    """def f(x, buf): buf.add_(x); return x * buf   (functionalized by hand)."""
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3), name="x")
    buf = pb.input(torch.randn(3), InputKind.BUFFER, "buf", name="buf")
    new_buf = pb.call("aten::add.Tensor", buf, x)
    out = pb.call("aten::mul.Tensor", x, new_buf)
    return pb.finish(out, new_buf, kinds=[
        OutputSpec(OutputKind.USER_OUTPUT), OutputSpec(OutputKind.MUTATED_INPUT, "buf"),
    ])


def test_callable_returns_user_outputs() -> None:
    program, ex = mlp_program()
    fn = ProgramCallable(program)
    assert fn.program is program
    x = torch.randn(2, 4)
    (out,) = fn([x, ex["w"], ex["b"]])
    torch.testing.assert_close(out, torch.relu(x @ ex["w"].T + ex["b"]) * 2)


def test_callable_copies_mutated_inputs_back_and_hides_them() -> None:
    fn = ProgramCallable(_mutating_program())
    x, buf = torch.randn(3), torch.randn(3)
    expected_buf = buf + x
    outputs = fn([x, buf])
    assert len(outputs) == 1
    torch.testing.assert_close(buf, expected_buf)
    torch.testing.assert_close(outputs[0], x * expected_buf)


def test_callable_hides_saved_tensors() -> None:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3))
    s = pb.call("aten::sin.default", x)
    c = pb.call("aten::cos.default", x)
    program = pb.finish(s, c, kinds=[OutputSpec(), OutputSpec(OutputKind.SAVED_TENSOR)])
    t = torch.randn(3)
    (out,) = ProgramCallable(program)([t])
    torch.testing.assert_close(out, t.sin())


def test_callable_rejects_mutation_of_unknown_input() -> None:
    program = _mutating_program()
    program.signature.outputs["forward"][1] = OutputSpec(OutputKind.MUTATED_INPUT, "nope")
    with pytest.raises(ValueError, match="'nope', which is not a placeholder"):
        ProgramCallable(program)


def test_callable_uses_the_executor_factory() -> None:
    program, _ = mlp_program()
    seen: list[str] = []

    def factory(p: Program, graph: str):  # type: ignore[no-untyped-def]
        seen.append(graph)
        return lambda inputs: [inputs[0] + 1]

    (out,) = ProgramCallable(program, executor_factory=factory)([torch.ones(2, 4)])
    assert seen == ["forward"]
    torch.testing.assert_close(out, torch.full((2, 4), 2.0))


# -- the pipeline ---------------------------------------------------------------------

class RecordingStage(Stage):
    """A fake stage: copies the program, relabels its dialect and records what it saw."""

    def __init__(self, name: str, consumes: str, produces: str,
                 seen: list[tuple[str, Program, dict[str, object]]],
                 breaks: bool = False) -> None:
        self.name, self.consumes, self.produces = name, consumes, produces
        self.seen = seen
        self.breaks = breaks

    def run(self, program: Program, options: dict[str, object]) -> Program:
        self.seen.append((self.name, program, options))
        out = program.copy()
        out.dialect = self.produces
        if self.breaks:  # an in-place op: not core-functional
            add = out.forward.node("v6")
            out.forward.nodes[out.forward.nodes.index(add)] = Node(
                add.name, "call", "aten::mul_.Tensor", add.args, meta=add.meta)
        return out


@pytest.fixture
def fake_stages(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Program, dict[str, object]]]:
    seen: list[tuple[str, Program, dict[str, object]]] = []
    fakes = {"aot": RecordingStage("aot", "aten", "core-functional", seen)}
    monkeypatch.setattr(pipeline_module, "load_stage", lambda name: fakes[name])
    return seen


def test_each_stage_gets_the_later_stages_pre_grad_passes() -> None:
    """run_stages hands a backend's later stages' pre-grad passes to each earlier stage
    (options[PRE_GRAD_PASSES]); the last stage gets none."""
    from ember.runtime.pipeline import run_stages
    from ember.runtime.stages import PRE_GRAD_PASSES, PreGradPass

    rewrite = PreGradPass("keep", lambda p: p, lambda p: True)

    class WithPasses(RecordingStage):
        def pre_grad_passes(self) -> tuple[PreGradPass, ...]:
            return (rewrite,)

    seen: list[tuple[str, Program, dict[str, object]]] = []
    first = RecordingStage("aot", "aten", "core-functional", seen)
    last = WithPasses("inductor", "core-functional", "core-functional", seen)
    program, _ = mlp_program()
    run_stages(program, [first, last], {"k": 1, PRE_GRAD_PASSES: ("from a caller",)})
    assert [(name, opts) for name, _, opts in seen] == [
        ("aot", {"k": 1, PRE_GRAD_PASSES: (rewrite,)}), ("inductor", {"k": 1})]


def test_list_backends() -> None:
    assert list_backends() == ["eager", "aot_eager", "inductor"]


def test_eager_backend_runs_the_interpreter() -> None:
    program, ex = mlp_program()
    fn = compile_program(program, backend="eager")
    x = torch.randn(2, 4)
    (out,) = fn([x])
    torch.testing.assert_close(out, torch.relu(x @ ex["w"].T + ex["b"]) * 2)


def test_unknown_backend_lists_the_valid_ones() -> None:
    program, _ = mlp_program()
    with pytest.raises(ValueError, match="unknown Ember backend 'tvm'; backends: eager, "
                                         "aot_eager, inductor"):
        compile_program(program, backend="tvm")


def test_unknown_mode_is_rejected() -> None:
    program, _ = mlp_program()
    with pytest.raises(ValueError, match="unknown mode 'fast'") as raised:
        compile_program(program, backend="eager", mode="fast")
    # NOTE: every torch.compile mode is implemented: no empty "not implemented yet: ()"
    assert ("not implemented yet" in str(raised.value)) == bool(
        [m for m in pipeline_module.MODE_FEATURES if m not in pipeline_module.implemented_modes()])


# NOTE: a mode is implemented once each feature it names is (pipeline.IMPLEMENTED_FEATURES)
@pytest.mark.parametrize("mode", [m for m in pipeline_module.MODE_FEATURES
                                  if m not in pipeline_module.implemented_modes()])
def test_unimplemented_torch_modes_are_errors_not_the_default(mode: str) -> None:
    program, _ = mlp_program()
    with pytest.raises(NotImplementedError, match=f"mode='{mode}'.*not implemented in Ember yet"):
        compile_program(program, backend="eager", mode=mode)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("mode", ["max-autotune", "max-autotune-no-cudagraphs"])
def test_an_autotuning_mode_without_the_inductor_is_an_error_not_ignored(
        backend: str, mode: str) -> None:
    program, _ = mlp_program()
    with pytest.raises(ValueError, match=f"mode='{mode}' asks for autotune, which the "
                                         f"inductor stage does; backend '{backend}' runs "
                                         "no inductor stage.*None, default, reduce-overhead$"):
        compile_program(program, backend=backend, mode=mode)
    pipeline_module.check_mode("reduce-overhead", backend)  # CUDA graphs: any backend


def test_missing_stage_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stages_module, "available_stages", dict)
    program, _ = mlp_program()
    with pytest.raises(StageNotInstalledError, match="pip install ember-aot"):
        compile_program(program, backend="aot_eager")


def test_invalid_input_program_is_rejected_before_any_stage(
    fake_stages: list[tuple[str, Program, dict[str, object]]],
) -> None:
    program, _ = mlp_program()
    program.forward.node("v5").target = "aten::nope.default"
    with pytest.raises(VerificationError, match="aten::nope"):
        compile_program(program, backend="aot_eager")
    assert fake_stages == []


def test_aot_eager_runs_the_stage_with_options_and_mode(
    fake_stages: list[tuple[str, Program, dict[str, object]]],
) -> None:
    program, ex = mlp_program()
    fn = compile_program(program, backend="aot_eager", options={"k": 1}, mode="default")
    assert [(name, opts) for name, _, opts in fake_stages] == [
        ("aot", {"k": 1, "mode": "default"})]
    assert fake_stages[0][1] is program  # no serialization by default
    assert fn.program.dialect == "core-functional"
    x = torch.randn(2, 4)
    torch.testing.assert_close(fn([x])[0], torch.relu(x @ ex["w"].T + ex["b"]) * 2)


def test_stage_returning_the_wrong_dialect_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    liar = RecordingStage("aot", "aten", "core-functional", [])
    liar.run = lambda p, o: p  # type: ignore[method-assign]  # returns the aten program as is
    monkeypatch.setattr(pipeline_module, "load_stage", lambda name: liar)
    program, _ = mlp_program()
    with pytest.raises(VerificationError, match="stage 'aot' should produce dialect "
                                                "'core-functional' but returned a 'aten'"):
        compile_program(program, backend="aot_eager")


def test_a_declined_program_runs_eagerly_with_a_warning_and_a_count(
        monkeypatch: pytest.MonkeyPatch) -> None:
    declining = RecordingStage("aot", "aten", "core-functional", [])

    def decline(program: Program, options: dict[str, object]) -> Program:
        raise StageDeclined("its backward needs data")

    declining.run = decline  # type: ignore[method-assign]
    monkeypatch.setattr(pipeline_module, "load_stage", lambda name: declining)
    program, ex = mlp_program()
    with pytest.warns(EagerGraphWarning, match=r"declined this graph \(its backward needs "
                                                r"data\); its ops run eagerly"):
        fn = compile_program(program, backend="aot_eager")
    assert fn.program.metadata["fallbacks"] == {"graph runs eagerly": 1}
    assert "fallbacks" not in program.metadata  # the caller's program is not changed
    x = torch.randn(2, 4)
    (out,) = fn([x])
    torch.testing.assert_close(out, torch.relu(x @ ex["w"].T + ex["b"]) * 2)


def test_serialize_boundaries_round_trips_and_verifies(
    fake_stages: list[tuple[str, Program, dict[str, object]]],
) -> None:
    program, ex = mlp_program()
    with patch(serialize_boundaries=True):
        fn = compile_program(program, backend="aot_eager")
    (_, seen_program, _), = fake_stages
    assert seen_program is not program and seen_program == program
    assert fn.program.dialect == "core-functional"
    x = torch.randn(2, 4)
    torch.testing.assert_close(fn([x])[0], torch.relu(x @ ex["w"].T + ex["b"]) * 2)


def test_serialize_boundaries_catch_a_stage_breaking_its_dialect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bad = RecordingStage("aot", "aten", "core-functional", [], breaks=True)
    monkeypatch.setattr(pipeline_module, "load_stage", lambda name: bad)
    program, _ = mlp_program()
    with patch(serialize_boundaries=True), pytest.raises(
        VerificationError, match=r"%v6 \(aten::mul_.Tensor\): mutates"
    ):
        compile_program(program, backend="aot_eager")


def test_debug_dir_receives_each_stage_output(
    fake_stages: list[tuple[str, Program, dict[str, object]]], tmp_path: pytest.TempPathFactory,
) -> None:
    program, _ = mlp_program()
    with patch(debug_dir=tmp_path):
        compile_program(program, backend="aot_eager")
    saved = load(tmp_path / "1_aot.ember")
    assert saved.dialect == "core-functional" and saved.forward == program.forward


def test_debug_dir_keeps_every_compile(
    fake_stages: list[tuple[str, Program, dict[str, object]]], tmp_path: Path,
) -> None:
    """Each compile wrote the same file names: only the last compile of a process (a
    graph break or a recompile compiles several programs) was left."""
    program, _ = mlp_program()
    with patch(debug_dir=tmp_path):
        for _ in range(3):
            compile_program(program, backend="aot_eager")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "1_aot-2.ember", "1_aot-3.ember", "1_aot.ember"]
    with patch(debug_dir=tmp_path / "1_aot.ember"), pytest.raises(
            ValueError, match="EMBER_DEBUG_DIR=.*1_aot.ember: not a directory"):
        compile_program(program, backend="aot_eager")


def test_copy_back_does_not_attach_buffers_to_autograd() -> None:
    fn = ProgramCallable(_mutating_program())
    x = torch.randn(3, requires_grad=True)
    buf = torch.randn(3)
    expected_buf = buf + x.detach()
    (out,) = fn([x, buf])
    torch.testing.assert_close(buf, expected_buf)
    torch.testing.assert_close(out, x * expected_buf)
    assert out.requires_grad  # the user output keeps its autograd history
    assert not buf.requires_grad and buf.grad_fn is None


def test_copy_back_gives_a_written_user_input_the_new_values_history() -> None:
    """An accumulator that required no grad, written in place with a value that does
    (``acc.add_(x)``: an MoE's ``final.index_add_`` after a graph break), requires grad
    afterwards with the value's history, as eager's in-place op gives it."""
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3), name="x")
    acc = pb.input(torch.randn(3), name="acc")
    new_acc = pb.call("aten::add.Tensor", acc, x)
    program = pb.finish(new_acc, kinds=[OutputSpec(OutputKind.MUTATED_INPUT, "acc")])
    x = torch.randn(3, requires_grad=True)
    acc = torch.zeros(3)
    ProgramCallable(program)([x, acc])
    assert acc.requires_grad and acc.grad_fn is not None
    (acc * 2).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((3,), 2.0))


def test_a_symbolic_aliased_output_is_a_view_at_every_size() -> None:
    """An ALIASED_OUTPUT whose layout is an expression over the size symbols is rebuilt
    as the view eager gives, for each call's sizes."""
    from ember.runtime.ir import Graph, InputSpec, Signature, SymbolRange, TensorMeta, ValueRef
    from ember.runtime.ir.contracts import AliasedOutput, AotMetadata
    from ember.runtime.ir.graph import SymExpr

    cpu, f32 = torch.device("cpu"), torch.float32
    graph = Graph([
        Node("x", "placeholder", "x", meta=TensorMeta(f32, ("s0", 4), (4, 1), cpu)),
        Node("tail", "call", "aten::slice.Tensor", (ValueRef("x"), 0, 1, SymExpr("s0")),
             meta=TensorMeta(f32, ("s0-1", 4), (4, 1), cpu, storage_offset=4)),
        Node("output", "output", "output", ((ValueRef("tail"),),)),
    ], {"s0": SymbolRange(2, None, hint=3)})
    program = Program(graphs={"forward": graph}, dialect="core-functional",
                      signature=Signature(inputs={"forward": [InputSpec("x")]}, outputs={
                          "forward": [OutputSpec(OutputKind.ALIASED_OUTPUT, "x")]}))
    AotMetadata(aliased_outputs=(AliasedOutput(
        0, "input", "x", False, ("s0-1", 4), (4, 1), 4, (4, 1)),)).write_to(program)
    fn = ProgramCallable(program)
    for n in (2, 5):
        x = torch.randn(n, 4)
        (tail,) = fn([x])
        assert tail.shape == (n - 1, 4) and tail.data_ptr() == x[1:].data_ptr()
        assert tail._base is x  # a view of the input, not a copy
    # compiled: the symbols are read off the input sizes (the wrapper checked them)
    program.dialect = "compiled"
    fn = ProgramCallable(program, lambda p, g: lambda inputs: [inputs[0][1:].clone()])
    for n in (3, 6):
        x = torch.randn(n, 4)
        (tail,) = fn([x])
        assert tail.shape == (n - 1, 4) and tail._base is x


def test_static_programs_build_no_size_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    """The static fast path: no symbol binding is built or run for a static program."""
    import ember.runtime.callable as callable_module
    import ember.runtime.interpreter as interpreter_module

    def refuse(graph: object) -> None:
        raise AssertionError("a static program built a SizeBinding or SymbolReader")

    monkeypatch.setattr(callable_module, "SymbolReader", refuse)
    monkeypatch.setattr(interpreter_module, "SizeBinding", refuse)
    program, ex = mlp_program()
    x = torch.randn(2, 4)
    torch.testing.assert_close(ProgramCallable(program)([x])[0],
                               torch.relu(x @ ex["w"].T + ex["b"]) * 2)
    compiled, _ = mlp_program()
    compiled.dialect = "compiled"  # its executor: a stand-in for the loaded wrapper
    seen: list[list[object]] = []
    ProgramCallable(compiled, lambda p, g: lambda inputs: seen.append(inputs) or [x])([x])
    assert len(seen) == 1


def test_compiled_symbolic_inputs_are_left_to_the_wrapper_to_check() -> None:
    """A compiled symbolic program's sizes are checked once, by its wrapper (inline, a
    ShapeError naming the input): the callable binds nothing per call, so even sizes
    outside the symbols' ranges reach the executor."""
    from ember.runtime.ir import Graph, InputSpec, Signature, SymbolRange, TensorMeta

    cpu, f32 = torch.device("cpu"), torch.float32
    graph = Graph([
        Node("x", "placeholder", "x", meta=TensorMeta(f32, ("s0", 4), (4, 1), cpu)),
        Node("w", "placeholder", "w", meta=TensorMeta(f32, (4, 4), (4, 1), cpu)),
        Node("output", "output", "output", ((),)),
    ], {"s0": SymbolRange(2, 8, hint=3)})
    program = Program(graphs={"forward": graph}, dialect="compiled", signature=Signature(
        inputs={"forward": [InputSpec("x"), InputSpec("w", InputKind.PARAMETER, "w")]},
        outputs={"forward": []}))
    seen: list[list[torch.Tensor]] = []
    fn = ProgramCallable(program, lambda p, g: lambda inputs: seen.append(inputs) or [])
    fn([torch.randn(8, 4), torch.randn(4, 4)])
    fn([torch.randn(9, 4), torch.randn(4, 4)])  # out of range: the wrapper's to refuse
    assert [tuple(x.shape) for x, _ in seen] == [(8, 4), (9, 4)]
