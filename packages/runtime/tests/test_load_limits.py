""".ember loading is bounded (issue 11, item 8): crafted files fail with an
IRFormatError naming the member and the limit, before they cost memory or time."""

from __future__ import annotations

import copy
import io
import json
import secrets
import time
import tracemalloc
import zipfile
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
import torch
from ember.runtime.ir import IRFormatError, load, parse_program, print_program, save, serialize
from ember.runtime.ir.archive import write_archive
from ember.runtime.ir.limits import DEFAULT_LIMITS, LoadLimits
from ir_samples import mlp


def members_of(program: Any = None, doc: Any = None) -> dict[str, bytes]:
    """The members of a valid file of ``program`` (default: the mlp program), with
    program.json replaced by ``doc`` when given."""
    program = program if program is not None else mlp()
    buffer = io.BytesIO()
    save(program, buffer)
    with zipfile.ZipFile(buffer) as zf:
        members = {n: zf.read(n) for n in zf.namelist() if n != "manifest.json"}
    if doc is not None:
        members["program.json"] = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return members


def mlp_doc() -> dict[str, Any]:
    return copy.deepcopy(json.loads(members_of()["program.json"]))


def write(path: Path, members: dict[str, bytes]) -> Path:
    write_archive(str(path), members, frozenset(members) - {"tensors.safetensors"})
    return path


def write_bomb(path: Path, member: str, size: int) -> Path:
    """A valid mlp file whose ``member`` is replaced by ``size`` zero bytes, deflated
    (about a thousandfold), written in chunks so the test itself stays small."""
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members_of().items():
            if name != member:
                zf.writestr(name, data, compress_type=zipfile.ZIP_DEFLATED)
        info = zipfile.ZipInfo(member)
        info.compress_type = zipfile.ZIP_DEFLATED
        chunk = bytes(1 << 20)
        with zf.open(info, "w", force_zip64=True) as f:
            for _ in range(size // len(chunk)):
                f.write(chunk)
    return path


def load_measured(path: Path, **kwargs: Any) -> tuple[IRFormatError, float, int]:
    """The IRFormatError that loading ``path`` raises, the seconds it took and the peak
    bytes Python allocated meanwhile."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        load(path, **kwargs)
    except IRFormatError as e:
        error = e
    else:
        raise AssertionError("the file loaded")
    finally:
        elapsed = time.perf_counter() - start
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return error, elapsed, peak


# ---- the zip container ----------------------------------------------------------------------


@pytest.mark.parametrize("member", ["program.json", "tensors.safetensors"])
def test_zip_bomb_is_refused_without_inflating(tmp_path: Path, member: str) -> None:
    path = write_bomb(tmp_path / "bomb.ember", member, 64 << 20)
    assert path.stat().st_size < 1 << 20
    error, elapsed, peak = load_measured(path)
    assert f"member {member!r} inflates" in str(error)
    assert "LoadLimits.max_ratio" in str(error)
    assert peak < 4 << 20, f"{peak} bytes allocated"
    assert elapsed < 2.0


def test_member_over_its_size_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    doc = mlp_doc()
    doc["metadata"] = {"padding": secrets.token_hex(1 << 20)}  # 2 MiB, deflates ~2-fold
    path = write(tmp_path / "big.ember", members_of(doc=doc))
    limits = LoadLimits(max_program_bytes=1 << 20)
    error, _, peak = load_measured(path, limits=limits)
    assert "member 'program.json' inflates to" in str(error)
    assert "LoadLimits.max_program_bytes" in str(error)
    assert peak < 1 << 20
    # a caller with bigger programs raises the limit
    assert load(path, limits=LoadLimits(max_program_bytes=4 << 20)).metadata == doc["metadata"]
    assert load(path).metadata == doc["metadata"]


def test_files_are_limited_together(tmp_path: Path) -> None:
    program = mlp()
    program.files = {f"k{i}.cpp": bytes(600) for i in range(4)}
    path = tmp_path / "files.ember"
    save(program, path)
    with pytest.raises(IRFormatError, match=r"files/ inflate to more than 2000 bytes "
                                            r"together \(LoadLimits.max_file_bytes\)"):
        load(path, limits=LoadLimits(max_file_bytes=2000))
    assert load(path).files == program.files


def test_too_many_members(tmp_path: Path) -> None:
    program = mlp()
    program.files = {f"f{i}": b"" for i in range(DEFAULT_LIMITS.max_members)}
    path = tmp_path / "many.ember"
    save(program, path)
    with pytest.raises(IRFormatError, match=r"holds 4099 members, more than 4096 "
                                            r"\(LoadLimits.max_members\)"):
        load(path)
    assert load(path, limits=LoadLimits(max_members=5000)).files == program.files


def test_undeclared_member_is_refused_before_it_is_read(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    members = members_of()
    members["files/payload.py"] = b"import os; os.system('touch pwned')"
    path = write(tmp_path / "extra.ember", members)
    opened: list[str] = []
    real_open = zipfile.ZipFile.open

    def spy(self: zipfile.ZipFile, name: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(name if isinstance(name, str) else name.filename)
        return real_open(self, name, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "open", spy)
    with pytest.raises(IRFormatError, match=r"member\(s\) \['files/payload.py'\] that "
                                            "program.json does not declare"):
        load(path)
    assert "files/payload.py" not in opened
    assert "program.json" in opened


def test_member_outside_the_layout_is_refused(tmp_path: Path) -> None:
    members = members_of()
    members["../escape"] = b""
    with pytest.raises(IRFormatError, match=r"unexpected member '\.\./escape'"):
        load(write(tmp_path / "odd.ember", members))


@pytest.mark.parametrize("keep", [0.5, 0.9, 0.99])
def test_truncated_file(tmp_path: Path, keep: float) -> None:
    path = tmp_path / "t.ember"
    save(mlp(), path)
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])
    with pytest.raises(IRFormatError, match="not a valid .ember zip archive"):
        load(path)


def test_member_cut_short_inside_the_file(tmp_path: Path) -> None:
    """Bytes cut from inside the file, the directory kept: the members no longer sit where
    the directory says, and the error names a member."""
    path = tmp_path / "t.ember"
    save(mlp(), path)
    with zipfile.ZipFile(path) as zf:
        start = zf.getinfo("tensors.safetensors").header_offset
    data = path.read_bytes()
    path.write_bytes(data[:start + 40] + data[start + 240:])
    with pytest.raises(IRFormatError, match=r"member '[a-z.]+' (is corrupt or truncated|"
                                            r"extends past the end)"):
        load(path)


# ---- program.json -------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [200, 100_000])
def test_deeply_nested_json(tmp_path: Path, depth: int) -> None:
    text = json.dumps(mlp_doc())
    nested = "[" * depth + "]" * depth
    text = text.replace('"metadata": {', f'"metadata": {{"deep": {nested}, ', 1)
    with pytest.raises(IRFormatError, match=r"program.json: JSON nested deeper than 128 "
                                            r"levels \(LoadLimits.max_json_depth\)"):
        load(write(tmp_path / "deep.ember", members_of(doc=text.encode())))


@pytest.mark.parametrize("number, message", [
    ("1" * 5000, "a number of 5000 digits is out of range"),
    ("1" * 60, "a number of 60 digits is out of range"),
    ("1e999", "out of range"),
    ("-1e999", "out of range"),
    ("NaN", "NaN is not JSON"),
    ("Infinity", "Infinity is not JSON"),
])
def test_huge_numbers(tmp_path: Path, number: str, message: str) -> None:
    text = json.dumps(mlp_doc()).replace('"metadata": {', f'"metadata": {{"n": {number}, ', 1)
    with pytest.raises(IRFormatError, match=f"program.json: .*{message}"):
        load(write(tmp_path / "num.ember", members_of(doc=text.encode())))


def test_huge_tensor_shape(tmp_path: Path) -> None:
    doc = mlp_doc()
    name = next(iter(doc["tensors"]))
    doc["tensors"][name]["shape"] = [2**62, 2**62]
    with pytest.raises(IRFormatError, match=name):
        load(write(tmp_path / "shape.ember", members_of(doc=doc)))


def test_memory_error_while_decoding_names_the_member(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "ok.ember", members_of())

    def exhausted(*args: Any, **kwargs: Any) -> Any:
        raise MemoryError

    monkeypatch.setattr(serialize, "program_from_json", exhausted)
    with pytest.raises(IRFormatError, match="program.json describes an impossible program: "
                                            "MemoryError"):
        load(path)


def test_defaults_hold_a_7b_parameter_model() -> None:
    assert DEFAULT_LIMITS.max_tensor_bytes >= 7_000_000_000 * 4  # float32 weights
    assert DEFAULT_LIMITS.max_ratio >= 1  # tensors are stored, not deflated


def test_large_stored_tensors_load(tmp_path: Path) -> None:
    """Stored (not deflated) tensor bytes are not held to the ratio limit, whatever
    their size: the file on disk is as large as what is read."""
    program = mlp()
    program.tensors["big"] = torch.zeros(3 << 20)  # 12 MiB of zeros: deflate would crush it
    path = tmp_path / "big.ember"
    save(program, path)
    assert load(path).tensors["big"].shape == (3 << 20,)


# ---- the text form ----------------------------------------------------------------------------


def _text_with(line_from: str, line_to: str) -> str:
    text = print_program(mlp())
    assert line_from in text
    return text.replace(line_from, line_to, 1)


def _first_scalar_arg() -> tuple[str, str]:
    """A call line of the mlp text, and a template of it with one more argument ``@``."""
    text = print_program(mlp())
    line = next(line for line in text.splitlines() if "aten::t.default(%w)" in line)
    return line, line.replace("(%w)", "(%w, @)")


@pytest.mark.parametrize("depth", [200, 100_000])
def test_text_deep_brackets(depth: int) -> None:
    line, template = _first_scalar_arg()
    text = _text_with(line, template.replace("@", "[" * depth + "1" + "]" * depth))
    with pytest.raises(IRFormatError, match=r"brackets nested deeper than 128 levels"):
        parse_program(text)


def test_text_huge_integer() -> None:
    line, template = _first_scalar_arg()
    with pytest.raises(IRFormatError, match=r"line \d+, column \d+: unreadable value: "
                                            "ValueError"):
        parse_program(_text_with(line, template.replace("@", "9" * 5000)))


def test_text_deep_metadata() -> None:
    text = print_program(mlp())
    meta = next(line for line in text.splitlines() if line.startswith("metadata "))
    deep = "[" * 500 + "]" * 500
    with pytest.raises(IRFormatError, match=r"(nested deeper than 128|brackets nested)"):
        parse_program(text.replace(meta, f'metadata {{"deep": {deep}}}', 1))


def test_text_huge_tensor_shape() -> None:
    text = print_program(mlp())
    decl = next(line for line in text.splitlines() if line.startswith("tensor "))
    head, _, tail = decl.partition("[")
    huge = f"{head}[{10**30}, {10**30}]{tail.partition(']')[2]}"
    with pytest.raises(IRFormatError, match="tensor 'fc.weight': impossible shape"):
        parse_program(text.replace(decl, huge, 1))


def test_limits_are_documented_keyword_arguments() -> None:
    for fn in (load, parse_program):
        assert "limits" in (fn.__doc__ or "")
    assert safetensors.torch  # the tensors member stays a safetensors file
