"""Symbolic programs in the IR: JSON and text encodings of hints, guards and symbolic
arguments; the verifier's symbol rules; SymbolBinder and its ShapeError messages."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest
import torch
from ember.runtime.ir import (
    IRFormatError,
    ShapeGuard,
    SourceLocation,
    SymbolRange,
    SymExpr,
    ValueRef,
    VerificationError,
    load,
    parse_program,
    print_program,
    program_from_json,
    program_to_json,
    save,
    verify,
)
from ember.runtime.ir.symbolic import ShapeError, SymbolBinder, UnbackedSite
from ir_samples import assert_same_program, mlp, symbolic, tmeta


def test_symbolic_sample_verifies_and_round_trips_through_a_file() -> None:
    program = symbolic()
    verify(program)
    buf = io.BytesIO()
    save(program, buf)
    buf.seek(0)
    loaded = load(buf)
    assert_same_program(program, loaded)
    assert print_program(loaded) == print_program(program)


def test_json_encodings_of_symbolic_parts() -> None:
    graph = program_to_json(symbolic())["graphs"]["forward"]  # type: ignore[index]
    assert graph["symbols"] == {"s0": {"lower": 2, "upper": 1024, "hint": 8},
                                "u0": {"lower": 0, "upper": None}}
    assert graph["guards"] == [
        {"expr": "s0%16 == 0", "source": {"file": "model.py", "line": 3,
                                          "function": "forward",
                                          "text": "if x.shape[0] % 16 == 0:"}},
        {"expr": "s0 > 4", "source": None}]
    assert graph["nodes"][2]["args"][1] == {"tuple": [{"sym": "4*s0"}]}


def test_static_program_json_has_no_symbolic_keys() -> None:
    graph = program_to_json(mlp())["graphs"]["forward"]  # type: ignore[index]
    assert set(graph) == {"nodes", "symbols"} and graph["symbols"] == {}


def test_schema_1_1_document_without_hints_or_guards_loads() -> None:
    doc = program_to_json(symbolic())
    graph = doc["graphs"]["forward"]  # type: ignore[index]
    del graph["guards"]
    del graph["symbols"]["s0"]["hint"]
    graph["nodes"][2]["args"][1] = {"tuple": [4]}
    doc["schema_version"] = "1.1"
    loaded = program_from_json(json.loads(json.dumps(doc)))
    assert loaded.forward.guards == []
    assert loaded.forward.symbols["s0"] == SymbolRange(2, 1024)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("guards", [{"expr": 3, "source": None}], r"guards\[0\]\.expr: expected a string"),
    ("guards", [{"expr": "s0 > 1"}], r"guards\[0\]: missing key\(s\) \['source'\]"),
    ("guards", {"expr": "s0 > 1"}, r"guards: expected a JSON array"),
])
def test_bad_guard_encodings_are_refused(key: str, value: object, message: str) -> None:
    doc = program_to_json(symbolic())
    doc["graphs"]["forward"][key] = value  # type: ignore[index]
    with pytest.raises(IRFormatError, match=message):
        program_from_json(doc)


def test_bad_sym_argument_encoding_is_refused() -> None:
    doc = program_to_json(symbolic())
    doc["graphs"]["forward"]["nodes"][2]["args"][1] = {"sym": 4}  # type: ignore[index]
    with pytest.raises(IRFormatError, match=r"nodes\[2\]\.args\[1\]\.sym: expected a string"):
        program_from_json(doc)


def test_text_parse_of_symbolic_lines() -> None:
    text = print_program(symbolic())
    parsed = parse_program(text)
    assert parsed.forward.guards[0] == ShapeGuard("s0%16 == 0", SourceLocation(
        "model.py", 3, "forward", "if x.shape[0] % 16 == 0:"))
    assert parsed.forward.node("z").args[1] == (SymExpr("Max(4, s0)"),)
    with pytest.raises(IRFormatError, match=r"line 7.*expected '\)' closing sym"):
        parse_program(text.replace("sym(4*s0)", "sym(4*s0"))


# ---- verifier --------------------------------------------------------------------------


def _rejects(program: object, pattern: str) -> None:
    with pytest.raises(VerificationError, match=pattern):
        verify(program)  # type: ignore[arg-type]


def test_symbol_bound_only_by_an_expression_is_rejected() -> None:
    program = symbolic()
    program.forward.node("x").meta = tmeta("s0+1", 4)
    program.forward.node("y").meta = tmeta("2*s0", 4)
    _rejects(program, r"node %x: size expression 's0\+1' uses symbol 's0', which no "
                      r"placeholder .* nothing binds it")


def test_unbacked_symbol_used_before_it_is_bound_is_rejected() -> None:
    program = symbolic()
    program.forward.node("v").args = (ValueRef("x"), (SymExpr("4*u0"),))
    _rejects(program, r"node %v \(aten::view.default\): symbolic argument sym\(4\*u0\) "
                      r"uses symbol 'u0', which no placeholder")


def test_unknown_symbols_in_arguments_and_guards_are_rejected() -> None:
    program = symbolic()
    program.forward.node("half").args = (ValueRef("y"), 0, 0, SymExpr("s7"))
    _rejects(program, r"%half .*symbolic argument sym\(s7\) uses symbol 's7', which is "
                      r"not in graph.symbols")
    program = symbolic()
    program.forward.guards.append(ShapeGuard("s0 < s9"))
    _rejects(program, r"guard 's0 < s9' uses symbol 's9', which is not in graph.symbols")


def test_guard_and_sizes_outside_the_grammar_are_rejected() -> None:
    program = symbolic()
    program.forward.guards.append(ShapeGuard("s0.bit_length() > 2"))
    _rejects(program, r"guard 's0.bit_length\(\) > 2': .*the only calls allowed")
    program = symbolic()
    program.forward.node("nz").meta = tmeta("u0", "floor(s0/2)", dtype=torch.int64)
    _rejects(program, r"%nz .*size expression 'floor\(s0/2\)' is not in the size grammar")


def test_hint_outside_its_range_is_rejected() -> None:
    program = symbolic()
    program.forward.symbols["s0"] = SymbolRange(2, 1024, hint=2000)
    _rejects(program, r"symbol 's0' has hint 2000 outside its range \[2, 1024\]")


# ---- binding ---------------------------------------------------------------------------


def test_binder_binds_backed_symbols_and_knows_unbacked_sites() -> None:
    binder = SymbolBinder(symbolic().forward)
    assert binder.bind([torch.zeros(32, 4), torch.zeros(64, 4)]) == {"s0": 32}
    assert binder.bind_sizes([(48, 4), (96, 4)]) == {"s0": 48}
    assert binder.unbacked == {"u0": UnbackedSite("nz", None, 0)}
    env = {"s0": 32}
    binder.bind_unbacked(env, "nz", None, (5, 2))
    assert env == {"s0": 32, "u0": 5}


@pytest.mark.parametrize(("sizes", "message"), [
    ([(32, 4), (63, 4)], "input 'y' dim 0: size 63, expected 2\\*s0 = 64 \\(with s0=32\\)"),
    ([(32, 5), (64, 4)], "input 'x' dim 1: size 5, expected 4"),
    ([(32,), (64, 4)], r"input 'x': expected 2 dims \[s0, 4\], got 1 dims \(32,\)"),
    ([(2048, 4), (4096, 4)], (r"input 'x' dim 0: size 2048 is outside the range "
                              r"\[2, 1024\] of symbol s0")),
    ([(1, 4), (2, 4)], r"input 'x' dim 0: size 1 is outside the range \[2, 1024\]"),
    ([(24, 4), (48, 4)], ("guard 's0%16 == 0' fails for s0=24 from input 'x' dim 0; it "
                          "comes from model.py:3 in forward: 'if x.shape\\[0\\] % 16 == 0:'")),
    ([(32, 4)], "the graph takes 2 inputs, got 1"),
])
def test_binder_errors_name_input_dim_symbol_and_value(sizes: list[tuple[int, ...]],
                                                       message: str) -> None:
    binder = SymbolBinder(symbolic().forward)
    with pytest.raises(ShapeError, match=message):
        binder.bind_sizes(sizes)


def test_binder_equal_dims_and_unbacked_ranges() -> None:
    program = symbolic()
    program.forward.node("y").meta = tmeta("s0", 4)
    program.forward.guards = [ShapeGuard("u0 <= s0")]
    program.forward.symbols["u0"] = SymbolRange(0, 100)
    binder = SymbolBinder(program.forward)
    with pytest.raises(ShapeError, match="input 'y' dim 0: size 8, but symbol s0 is 16 "
                                         "\\(input 'x' dim 0\\); the graph needs them equal"):
        binder.bind_sizes([(16, 4), (8, 4)])
    env = binder.bind_sizes([(16, 4), (16, 4)])
    with pytest.raises(ShapeError, match=r"the result of 'nz' dim 0: size 101 is outside the "
                                         r"range \[0, 100\] of symbol u0"):
        binder.bind_unbacked(dict(env), "nz", None, (101, 2))
    with pytest.raises(ShapeError, match=r"guard 'u0 <= s0' fails for s0=16 from input 'x' "
                                         r"dim 0, u0=17 from the result of 'nz' dim 0"):
        binder.bind_unbacked(dict(env), "nz", None, (17, 2))


def test_shape_errors_carry_the_values_of_the_failed_range_or_guard() -> None:
    program = symbolic()
    program.forward.guards = [ShapeGuard("u0 <= s0")]
    program.forward.symbols["u0"] = SymbolRange(0, 100)
    binder = SymbolBinder(program.forward)
    env = binder.bind_sizes([(16, 4), (32, 4)])
    with pytest.raises(ShapeError) as failed:
        binder.bind_unbacked(dict(env), "nz", None, (101, 2))
    assert failed.value.values == {"u0": 101}
    with pytest.raises(ShapeError) as failed:
        binder.bind_unbacked(dict(env), "nz", None, (17, 2))
    assert failed.value.values == {"s0": 16, "u0": 17}
    with pytest.raises(ShapeError) as failed:  # not a symbol's: no values
        binder.bind_sizes([(32, 5), (64, 4)])
    assert failed.value.values == {}


def test_static_graph_binder_checks_sizes() -> None:
    graph = mlp().forward
    binder = SymbolBinder(graph)
    x = graph.placeholders[0]
    good = [tuple(int(s) for s in n.meta.sizes) for n in graph.placeholders]
    assert binder.bind_sizes(good) == {}
    bad = list(good)
    bad[0] = (99,) + bad[0][1:]
    with pytest.raises(ShapeError, match=f"input '{x.name}' dim 0: size 99"):
        binder.bind_sizes(bad)


def test_graph_copy_keeps_guards() -> None:
    program = symbolic()
    copy = program.copy()
    assert copy.forward.guards == program.forward.guards
    assert dataclasses.replace(program.forward, nodes=[]).guards == program.forward.guards
