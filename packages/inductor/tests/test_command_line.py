"""``python -m ember.inductor``: a refused or unreadable input, or an output path that
cannot be written, is one ``error:`` line on stderr and exit status 1 (it was a Python
traceback)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from ember.inductor.__main__ import main
from ember.runtime.ir import save

sys.path.insert(0, str(Path(__file__).parent))

from helpers import trace  # noqa: E402


def test_an_aten_program_is_refused_in_one_line(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "aten.ember"
    program = trace(lambda x: (x + 1,), [torch.randn(3)])
    program.dialect = "aten"  # what a capture writes (before the aot stage)
    save(program, source)
    assert main([str(source), "-o", str(tmp_path / "out.ember")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "run the aot stage first" in err
    assert "Traceback" not in err and err.count("\n") == 1


@pytest.mark.parametrize("content", [b"", b"not a zip file"])
def test_a_file_that_is_no_program(content: bytes, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "garbage.ember"
    source.write_bytes(content)
    assert main([str(source), "-o", str(tmp_path / "out.ember")]) == 1
    assert capsys.readouterr().err.startswith("error: ")


def test_a_missing_input_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "missing.ember"), "-o", str(tmp_path / "out.ember")]) == 1
    assert capsys.readouterr().err.startswith("error: ")


def test_a_node_declaring_more_than_its_operator_makes_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Compiled from that metadata, the kernels read past their buffers."""
    import dataclasses

    program = trace(lambda x: (torch.relu(x) * 2,), [torch.randn(2, 4)])
    relu = next(n for n in program.forward.nodes if n.target == "aten::relu.default")
    relu.meta = dataclasses.replace(relu.meta, sizes=(2000, 4))  # type: ignore[arg-type]
    source = tmp_path / "crafted.ember"
    save(program, source)
    assert main([str(source), "-o", str(tmp_path / "out.ember")]) == 1
    err = capsys.readouterr().err
    assert "declares torch.float32 sizes (2000, 4)" in err
    assert "makes torch.float32 sizes (2, 4)" in err
    assert not (tmp_path / "out.ember").exists()
