"""Dynamic shapes end to end (issue #15, "Done when"), on the CPU:

* a batch sweep 1..64 of a small MLP under the default ``dynamic=None`` compiles at most
  twice (the first size static, then one symbolic compile), matches eager, never hits the
  recompile limit and never runs eagerly;
* HF GPT-2 (tiny config) ``generate`` of 32 tokens with ``forward`` compiled compiles at
  most three times (prefill, first decode step, dynamic decode) and gives eager's tokens;
* a symbolic program from ``capture(..., dynamic_shapes=...)`` round-trips through
  ``.ember`` (same text), and ``python -m ember.runtime run`` (its ``main``, in this
  process) runs it at two sizes (same values as eager) and refuses sizes its ranges or
  guards exclude, naming them; loaded and compiled by inductor, it is one compiled program
  for every allowed size, refusing the others with the guard's source line;
* relation guards (a branch on a size, a ``view`` that needs an even total): the guards
  of the program accept exactly the sizes the program is right for, each with its line;
* unbacked sizes (``nonzero``): one compile serves every count of nonzeros, the program
  carries an unbacked symbol and runs from its ``.ember`` file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import ember.frontend
import pytest
import torch
from benchlib import generate
from ember.runtime.__main__ import main as cli_main
from ember.runtime.interpreter import run_program
from ember.runtime.ir import Program, load, print_program, save, symbolic
from ember.runtime.ir.symbolic import ShapeError
from ember.runtime.pipeline import compile_program

TOL = 1e-5


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                               torch.nn.Linear(32, 8)).eval()


def test_batch_sweep_1_to_64_compiles_at_most_twice() -> None:
    model = _mlp()
    compiled = ember.frontend.compile(model)  # dynamic=None, the default: automatic
    with torch.no_grad():
        for batch in range(1, 65):
            x = torch.randn(batch, 16)
            torch.testing.assert_close(compiled(x), model(x), atol=TOL, rtol=TOL,
                                       msg=f"batch {batch}")
    stats = compiled.stats
    assert stats.compiles <= 2, stats
    assert stats.recompile_limit_fallbacks == 0 and stats.eager_fallback_calls == 0, stats


def test_hf_gpt2_generate_compiles_at_most_three_times_and_matches_eager() -> None:
    pytest.importorskip("transformers")
    config = generate.TINY  # 2 layers, 64 wide, batch 2, 8-token prompts, 32 new tokens
    cpu = torch.device("cpu")
    model = generate.build_model(config, cpu, torch.float32)
    ids = generate.prompt_ids(config, cpu)
    _, reference = generate.run_compiler("eager", model, ids, config, None)
    row, _ = generate.run_compiler("ember", model, ids, config, reference)
    assert row.error == ""
    assert (row.tokens_equal, row.tokens) == (config.batch * 32, config.batch * 32)
    assert row.compiles is not None and row.compiles <= 3, row
    assert row.recompile_limit_hit is False and row.eager_fallback_calls == 0, row


def _cat_view_branch(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    z = torch.cat([x, y]) * 2
    if x.shape[0] > 4:
        z = z + 1
    return z.view(2, -1, 4).sum(1)


def _capture_cat_view_branch() -> Program:
    x, y = torch.randn(8, 4), torch.randn(6, 4)
    return ember.frontend.capture(_cat_view_branch, x, y,
                                  dynamic_shapes={"x": {0: (2, 64)}, "y": {0: (2, 64)}})


def _symbols_of_inputs(program: Program) -> list[str]:
    """The symbol of dim 0 of each placeholder (the test's inputs are ``[s, 4]``)."""
    names = []
    for node in program.forward.placeholders:
        size = node.meta.sizes[0]  # type: ignore[union-attr]
        assert isinstance(size, str), f"{node.name}: dim 0 is not symbolic: {size!r}"
        names.append(size)
    return names


def _accepts(program: Program, env: dict[str, int]) -> bool:
    return all(symbolic.holds(g.expr, env) for g in program.forward.guards)


def test_relation_guards_accept_exactly_the_sizes_the_program_is_right_for() -> None:
    program = _capture_cat_view_branch()
    sx, sy = _symbols_of_inputs(program)
    assert sx != sy, print_program(program)
    ranges = program.forward.symbols
    assert (ranges[sx].lower, ranges[sx].upper, ranges[sx].hint) == (2, 64, 8)
    # the traced branch (x.shape[0] > 4) and the view (an even number of rows)
    for nx in range(2, 12):
        for ny in range(2, 12):
            expected = nx > 4 and (nx + ny) % 2 == 0
            assert _accepts(program, {sx: nx, sy: ny}) == expected, (nx, ny)
    branch = [g for g in program.forward.guards if g.source is not None
              and "x.shape[0] > 4" in (g.source.text or "")]
    assert branch, "no guard names the branch's line:\n" + print_program(program)


def test_symbolic_program_round_trips_through_ember_and_runs_at_two_sizes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    safetensors_torch = pytest.importorskip("safetensors.torch")
    program = _capture_cat_view_branch()
    path = tmp_path / "cat_view.ember"
    save(program, path)
    loaded = load(path)
    assert print_program(loaded) == print_program(program)
    inputs, out = tmp_path / "in.safetensors", tmp_path / "out.safetensors"
    command = ["run", str(path), "--inputs", str(inputs), "--out", str(out)]

    def run_cli(x: torch.Tensor, y: torch.Tensor) -> tuple[int, str]:
        """``python -m ember.runtime run`` in this process; (exit status, stderr)."""
        safetensors_torch.save_file({"x": x, "y": y}, str(inputs))
        out.unlink(missing_ok=True)
        status = cli_main(command)
        return status, capsys.readouterr().err

    for nx, ny in ((8, 6), (13, 3)):  # both inside the ranges and guards
        x, y = torch.randn(nx, 4), torch.randn(ny, 4)
        status, err = run_cli(x, y)
        assert status == 0, err
        result = safetensors_torch.load_file(str(out))["out0"]
        torch.testing.assert_close(result, _cat_view_branch(x, y), atol=TOL, rtol=TOL)
        (api,) = run_program(loaded, [x, y])  # the runtime API gives the same
        torch.testing.assert_close(api, result, atol=0, rtol=0)
    status, err = run_cli(torch.randn(65, 4), torch.randn(3, 4))  # x above its range
    assert status == 1 and "'x'" in err and "[2, 64]" in err and "65" in err, err
    status, err = run_cli(torch.randn(8, 4), torch.randn(5, 4))  # 13 rows: no even split
    assert status == 1 and "guard" in err and "z.view(2, -1, 4)" in err, err


def test_loaded_symbolic_program_compiles_once_for_every_allowed_size(tmp_path: Path) -> None:
    save(_capture_cat_view_branch(), tmp_path / "cat_view.ember")
    fn = compile_program(load(tmp_path / "cat_view.ember"), backend="inductor")
    assert fn.program.dialect == "compiled"
    for nx, ny in ((8, 6), (13, 3), (5, 63)):
        x, y = torch.randn(nx, 4), torch.randn(ny, 4)
        (out,) = fn([x, y])
        torch.testing.assert_close(out, _cat_view_branch(x, y), atol=TOL, rtol=TOL)
    with pytest.raises(ShapeError, match=r"^guard .* fails for s0=8 .* s1=5 .*z\.view"):
        fn([torch.randn(8, 4), torch.randn(5, 4)])
    with pytest.raises(ShapeError, match=r"^guard 's0 > 4' fails for s0=4 .*x\.shape\[0\] > 4"):
        fn([torch.randn(4, 4), torch.randn(4, 4)])  # the other side of the branch


def test_compiled_function_with_a_branch_on_a_size_recompiles_only_across_it() -> None:
    compiled = ember.frontend.compile(_cat_view_branch, dynamic=True)
    sizes = [(8, 6), (10, 4), (7, 5), (3, 5), (2, 4), (9, 9)]
    for nx, ny in sizes:
        x, y = torch.randn(nx, 4), torch.randn(ny, 4)
        torch.testing.assert_close(compiled(x, y), _cat_view_branch(x, y), atol=TOL, rtol=TOL)
    # one graph per side of `x.shape[0] > 4`; the sizes inside one side share it
    assert compiled.stats.compiles == 2, compiled.stats
    assert compiled.stats.recompile_limit_fallbacks == 0


def _nonzero_rows(x: torch.Tensor) -> torch.Tensor:
    rows = torch.nonzero(x > 0)
    return rows.float() * 2 + 1


def _with_positives(count: int, size: int = 12) -> torch.Tensor:
    x = -torch.rand(size)
    x[torch.randperm(size)[:count]] = 1.0
    return x


@pytest.mark.parametrize("counts", [(3, 7, 0, 12)])
def test_unbacked_sizes_one_compile_for_every_count(counts: tuple[int, ...]) -> None:
    compiled: Callable[[torch.Tensor], torch.Tensor] = ember.frontend.compile(_nonzero_rows)
    for count in counts:
        x = _with_positives(count)
        out = compiled(x)
        assert out.shape == (count, 1)
        torch.testing.assert_close(out, _nonzero_rows(x), atol=0, rtol=0)
    stats = compiled.stats  # type: ignore[attr-defined]
    assert stats.compiles == 1 and stats.graph_breaks == 0, stats
    assert stats.eager_fallback_calls == 0, stats


def test_unbacked_program_saves_loads_and_runs(tmp_path: Path) -> None:
    program = ember.frontend.capture(_nonzero_rows, _with_positives(5),
                                     dynamic_shapes={"x": {0: (2, 64)}})
    (unbacked,) = [s for s in program.forward.symbols if s.startswith("u")]
    text = print_program(program)
    assert f"[{unbacked}, 1]" in text, text
    path = tmp_path / "nonzero.ember"
    save(program, path)
    loaded = load(path)
    assert print_program(loaded) == text
    for count, size in ((2, 12), (9, 20)):  # another count, another size
        x = _with_positives(count, size)
        (out,) = run_program(loaded, [x])
        torch.testing.assert_close(out, _nonzero_rows(x), atol=0, rtol=0)


def scaled_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    # 1.0 / q.size(0) is a SymFloat while captured: a 0-dim tensor over the size
    return (q @ k.transpose(-1, -2)) / q.size(-1) ** 0.5 * (1.0 / q.size(0))


@pytest.mark.parametrize("capture", ["strict", "trace"])
def test_floats_computed_from_symbolic_sizes_serve_every_size(capture: str) -> None:
    fast = ember.frontend.compile(scaled_scores, dynamic=True, options={"capture": capture})
    for n, m in ((4, 3), (6, 5), (9, 2)):
        q, k = torch.randn(n, m, 8), torch.randn(n, m, 8)
        torch.testing.assert_close(fast(q, k), scaled_scores(q, k), msg=f"n={n}")
    assert (fast.stats.compiles, fast.stats.graph_breaks) == (1, 0)
