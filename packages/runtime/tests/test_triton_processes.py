"""Triton builds in worker processes (``triton_processes``, ``triton_worker``): a worker
compiles the specialization Triton's JIT serialized to the same binary (the same cache
key) that the parent's own compile of it gets, so the parent loads it from Triton's
on-disk cache; the protocol; the JIT cache hook that captures a specialization without
compiling. Compiled for sm_90 without a GPU (Triton ships ``ptxas``); the CUDA test of
the whole warm-up is in the inductor's ``test_compile_time.py``."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ember.runtime.compiled import triton_processes
from ember.runtime.compiled.triton_kernel import TritonKernelSpec, jit_function_from_source
from ember.runtime.config import patch

triton = pytest.importorskip("triton")

SOURCE = """import triton
import triton.language as tl

from ember.runtime.compiled.triton_math import libdevice_for_this_import

libdevice = libdevice_for_this_import()


@triton.jit
def kernel0(in_ptr0, out_ptr0, XBLOCK: tl.constexpr):
    offsets = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    mask = offsets < 1000
    x = tl.load(in_ptr0 + offsets, mask=mask)
    tl.store(out_ptr0 + offsets, tl.exp(x) * 2.0, mask=mask)
"""
SPEC = TritonKernelSpec("kernel0", SOURCE, {"in_ptr0": "*fp32", "out_ptr0": "*fp32"},
                        {"XBLOCK": 256}, num_warps=4, num_stages=1)
SM90 = ("cuda", 90, 32)
ALIGNED = [["tt.divisibility", 16]]


def _specialization(name: str = "ember_triton_x_jit.kernel0") -> str:
    """What Triton's JIT serializes for launching ``kernel0`` with two 16-byte aligned
    float32 tensors (``serialize_specialization_data``'s fields)."""
    return json.dumps({
        "name": name,
        "signature": {"in_ptr0": "*fp32", "out_ptr0": "*fp32", "XBLOCK": "constexpr"},
        "constant_keys": [[2]], "constant_vals": [256],
        "attrs_keys": [[0], [1]], "attrs_vals": [ALIGNED, ALIGNED],
        "options": {"num_warps": 4, "num_stages": 1},
        "key": "unused",
    })


@pytest.fixture(autouse=True)
def own_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setattr(triton.knobs.cache, "dir", str(tmp_path / "triton"), raising=False)
    with patch(cache_dir=tmp_path / "ember"):
        yield


def _parent_compile() -> Any:
    """The parent's own compile of the same launch (what ``fn.warmup`` does on a GPU)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = jit_function_from_source(SPEC, interpret=False, device="cuda-test")
    source = ASTSource(fn, {"in_ptr0": "*fp32", "out_ptr0": "*fp32", "XBLOCK": "constexpr"},
                       {(2,): 256}, {(0,): ALIGNED, (1,): ALIGNED})
    return triton.compile(source, target=GPUTarget(*SM90),
                          options={"num_warps": 4, "num_stages": 1})


def test_a_worker_compiles_the_binary_the_parent_would() -> None:
    from ember.runtime.triton_worker import compile_specialized

    key = compile_specialized(SOURCE, "kernel0", _specialization(), SM90)
    compiled = _parent_compile()
    assert compiled.hash == key  # the parent finds it in Triton's on-disk cache
    assert ".target sm_90" in compiled.asm["ptx"]


def test_a_specialization_of_another_kernel_is_refused() -> None:
    from ember.runtime.triton_worker import compile_specialized

    with pytest.raises(ValueError, match="not of kernel0"):
        compile_specialized(SOURCE, "kernel0", _specialization("m.kernel7"), SM90)


def test_the_protocol_answers_each_request_and_reports_errors() -> None:
    from ember.runtime.triton_worker import serve

    good = {"id": 1, "source": SOURCE, "name": "kernel0",
            "specialization": _specialization(), "target": list(SM90)}
    broken = dict(good, id=2, source=SOURCE.replace("tl.exp", "tl.nope"))
    answers = io.StringIO()
    serve(io.StringIO(json.dumps(good) + "\n\n" + json.dumps(broken) + "\n"), answers)
    lines = [json.loads(line) for line in answers.getvalue().splitlines()]
    assert lines[0] == {"ready": True}
    assert lines[1]["id"] == 1 and lines[1]["ok"] and lines[1]["hash"] == _parent_compile().hash
    assert lines[2]["id"] == 2 and not lines[2]["ok"] and "nope" in lines[2]["error"]


def test_a_worker_process_builds_into_the_parents_cache() -> None:
    triton_processes.shutdown()  # workers an earlier test started
    with patch(triton_workers=1):
        try:
            assert triton_processes.prestart() == 1
            key = triton_processes.build(SPEC, _specialization(), SM90)
            with pytest.raises(RuntimeError, match="(?s)kernel0: .*nope"):
                triton_processes.build(
                    TritonKernelSpec("kernel0", SOURCE.replace("tl.exp", "tl.nope"),
                                     SPEC.signature, SPEC.constexprs),
                    _specialization(), SM90)
        finally:
            triton_processes.shutdown()
    assert _parent_compile().hash == key
    with patch(triton_workers=0):
        assert triton_processes.prestart() == 0
        with pytest.raises(RuntimeError, match="no Triton worker"):
            triton_processes.build(SPEC, _specialization(), SM90)


def test_a_worker_removes_its_kernel_files_when_it_ends(tmp_path: Path) -> None:
    """The worker imports each kernel from a file in a temporary folder of its own; the
    folder goes when its input ends (one was left in the temporary directory for each
    worker process)."""
    temp = tmp_path / "temp"
    temp.mkdir()
    request = {"id": 1, "source": SOURCE, "name": "kernel0",
               "specialization": _specialization(), "target": list(SM90)}
    out = subprocess.run([sys.executable, "-m", "ember.runtime.triton_worker"],
                         input=json.dumps(request) + "\n", capture_output=True, text=True,
                         check=True, timeout=120,
                         env={**os.environ, "TMPDIR": str(temp),
                              "PYTHONPATH": os.pathsep.join(sys.path)})
    assert [json.loads(line)["ok"] for line in out.stdout.splitlines()[1:]] == [True]
    assert list(temp.iterdir()) == []


def test_the_hook_captures_only_for_the_asking_thread() -> None:
    seen: list[Any] = []

    def previous(**kwargs: Any) -> bool:
        seen.append(kwargs["compile"]["specialization_data"])
        return False

    hook = triton_processes._CaptureHook(previous)
    call = {"compile": {"specialization_data": "{...}"}}
    assert hook(**call) is False and seen == ["{...}"]  # not capturing: passed through
    box: list[Any] = []
    triton_processes._capturing.box = box
    try:
        assert hook(**call) is True  # captured: Triton skips the compile
    finally:
        triton_processes._capturing.box = None
    assert box == ["{...}"] and seen == ["{...}"]


def test_the_worker_count_follows_the_setting() -> None:
    with patch(triton_workers=3):
        assert triton_processes.worker_count() == 3
    with patch(triton_workers=-1, compile_threads=1):
        assert triton_processes.worker_count() == 0
    with patch(triton_workers=-1, compile_threads=40):
        assert triton_processes.worker_count() == triton_processes.MAX_DEFAULT_WORKERS


def test_a_worker_and_the_kernels_it_imports_do_not_import_torch() -> None:
    """A worker starts in a fraction of a second: neither it nor what generated kernels
    import (``ember.runtime.compiled.triton_math``) imports torch."""
    code = ("import sys, ember.runtime.triton_worker as w; w.bare_compiled_package(); "
            "import ember.runtime.compiled.triton_math; "
            "print(sorted(m for m in ('torch', 'ember.runtime.compiled.loader') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.strip() == "[]"
