"""A program read from a file has each node's declared metadata checked against its
operator (``ember.runtime.ir.metadata_checks``, through ``verify``): a crafted file that
declared a ``[2000, 4]`` result of a ``[2, 4]`` relu verified, and the inductor compiled
kernels that read past their buffers."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from ember.runtime.__main__ import main
from ember.runtime.ir import Program, TensorMeta, VerificationError, load, save, verify
from handbuilt import mlp_program


def _lying(program: Program, node_name: str, **changes: object) -> Program:
    for node in program.forward.nodes:
        if node.name == node_name:
            assert isinstance(node.meta, TensorMeta)
            node.meta = dataclasses.replace(node.meta, **changes)  # type: ignore[arg-type]
            return program
    raise AssertionError(f"no node {node_name}")


def _relu_node(program: Program) -> str:
    return next(n.name for n in program.forward.nodes if n.target == "aten::relu.default")


def test_a_file_whose_metadata_agrees_with_its_ops_verifies(tmp_path: Path) -> None:
    program, _ = mlp_program()
    save(program, tmp_path / "mlp.ember")
    verify(load(tmp_path / "mlp.ember"))


@pytest.mark.parametrize("change,shown", [
    ({"sizes": (2000, 4), "strides": (4, 1)}, "sizes (2000, 4)"),
    ({"dtype": torch.float64}, "declares torch.float64"),
    ({"strides": (1, 2)}, "strides (1, 2)")])
def test_a_node_declaring_other_metadata_is_refused(change: dict[str, object], shown: str,
                                                     tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    program, _ = mlp_program()
    relu = _relu_node(program)
    path = tmp_path / "crafted.ember"
    save(_lying(program, relu, **change), path)
    with pytest.raises(VerificationError, match=rf"node %{relu} \(aten::relu.default\)"):
        verify(load(path))
    verify(load(path, trusted=True))  # the user's own file: as before
    assert main(["verify", str(path)]) == 1
    err = capsys.readouterr().err
    assert shown in err and "but the operator makes" in err and err.count("\n") == 1


def test_a_placeholder_no_tensor_can_have(tmp_path: Path) -> None:
    program, _ = mlp_program()
    first = program.forward.placeholders[0].name
    path = tmp_path / "huge.ember"
    save(_lying(program, first, sizes=(10**15, 10**15), strides=(10**15, 1)), path)
    with pytest.raises(VerificationError, match=rf"placeholder %{first}: no tensor has"):
        verify(load(path))
