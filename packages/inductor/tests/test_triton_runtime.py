"""The runtime side of Triton kernels: the on-disk cache, loading, interpreter launches
and ahead-of-time compilation for sm_90, on a hand-written kernel."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
from ember.runtime import config as config_module
from ember.runtime.compiled import triton_cache
from ember.runtime.compiled.triton_aot import TritonAotError, compile_for_target
from ember.runtime.compiled.triton_kernel import TritonKernelSpec, load_triton_kernel

triton = pytest.importorskip("triton")

ADD_SOURCE = '''
import triton
import triton.language as tl


@triton.jit
def scaled_add(x_ptr, y_ptr, out_ptr, alpha, n, XBLOCK: tl.constexpr):
    offs = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + alpha * y, mask=mask)
'''

ADD_SPEC = TritonKernelSpec(
    name="scaled_add",
    source=ADD_SOURCE,
    signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "alpha": "fp32",
               "n": "i32"},
    constexprs={"XBLOCK": 64},
)


@pytest.fixture
def cache_dir(tmp_path: Path):
    with config_module.patch(cache_dir=tmp_path, cache_enabled=True):
        yield tmp_path


def test_interpreter_launch_matches_eager(cache_dir: Path) -> None:
    kernel = load_triton_kernel(ADD_SPEC, "cpu")
    assert kernel.interpret
    x, y = torch.randn(100), torch.randn(100)
    out = torch.empty(100)
    kernel.launch((triton.cdiv(100, 64),), x, y, out, 0.5, 100)
    torch.testing.assert_close(out, x + 0.5 * y)


def test_launch_checks_argument_count(cache_dir: Path) -> None:
    kernel = load_triton_kernel(ADD_SPEC, "cpu")
    with pytest.raises(TypeError, match="takes 5 arguments"):
        kernel.launch((1,), torch.randn(3))


def test_cache_entry_written_once_and_reused(cache_dir: Path) -> None:
    p1 = triton_cache.kernel_source_path(ADD_SOURCE, "interpret")
    mtime = p1.stat().st_mtime_ns
    p2 = triton_cache.kernel_source_path(ADD_SOURCE, "interpret")
    assert p1 == p2 and p1.read_text() == ADD_SOURCE
    assert p2.stat().st_mtime_ns == mtime
    manifest = json.loads((p1.parent / "manifest.json").read_text())
    assert manifest["triton"] == triton.__version__ and manifest["torch"] == torch.__version__
    # no temporary directories are left behind
    assert [p.name for p in p1.parent.parent.iterdir()] == [p1.parent.name]


def test_cache_key_depends_on_source_versions_and_device(monkeypatch) -> None:
    base = triton_cache.cache_key(ADD_SOURCE, "cuda-sm90")
    assert triton_cache.cache_key(ADD_SOURCE + "\n", "cuda-sm90") != base
    assert triton_cache.cache_key(ADD_SOURCE, "cuda-sm80") != base
    monkeypatch.setattr(triton_cache, "triton_version", lambda: "0.0.0")
    assert triton_cache.cache_key(ADD_SOURCE, "cuda-sm90") != base
    monkeypatch.undo()
    monkeypatch.setattr(torch, "__version__", "0.0.0")
    assert triton_cache.cache_key(ADD_SOURCE, "cuda-sm90") != base


def test_corrupt_cache_entry_is_a_miss_with_warning(cache_dir: Path) -> None:
    path = triton_cache.kernel_source_path(ADD_SOURCE, "interpret")
    path.write_text("garbage = 1\n")
    with pytest.warns(triton_cache.TritonCacheWarning, match="corrupt Triton cache entry"):
        again = triton_cache.kernel_source_path(ADD_SOURCE, "interpret")
    assert again.read_text() == ADD_SOURCE
    (again.parent / "manifest.json").write_text("{not json")
    with pytest.warns(triton_cache.TritonCacheWarning, match="unreadable entry"):
        third = triton_cache.kernel_source_path(ADD_SOURCE, "interpret")
    assert third.read_text() == ADD_SOURCE
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        triton_cache.kernel_source_path(ADD_SOURCE, "interpret")


def test_disabled_cache_uses_a_process_directory(tmp_path: Path) -> None:
    with config_module.patch(cache_dir=tmp_path / "never", cache_enabled=False):
        path = triton_cache.kernel_source_path(ADD_SOURCE, "interpret")
    assert not (tmp_path / "never").exists()
    assert path.read_text() == ADD_SOURCE


def test_spec_json_round_trip_and_errors() -> None:
    data = json.loads(json.dumps(ADD_SPEC.to_json()))
    assert TritonKernelSpec.from_json(data) == ADD_SPEC
    with pytest.raises(ValueError, match="malformed Triton kernel spec"):
        TritonKernelSpec.from_json({"name": "k"})
    with pytest.raises(ValueError, match="constexpr XBLOCK"):
        TritonKernelSpec.from_json({**data, "constexprs": {"XBLOCK": "64"}})


def test_aot_compile_for_sm90_without_gpu(cache_dir: Path) -> None:
    result = compile_for_target(ADD_SPEC)
    assert "ptx" in result.asm and ".target sm_90" in result.asm["ptx"]
    assert result.num_warps == 4
    assert "cubin" in result.asm and len(result.asm["cubin"]) > 0


def test_aot_compile_error_names_the_kernel(cache_dir: Path) -> None:
    bad = TritonKernelSpec(
        name="broken",
        source=ADD_SOURCE.replace("scaled_add", "broken").replace("x + alpha * y",
                                                                   "tl.dot(x, y)"),
        signature=dict(ADD_SPEC.signature),
        constexprs={"XBLOCK": 64},
    )
    with pytest.raises(TritonAotError, match="Triton kernel broken does not compile"):
        compile_for_target(bad)


def test_launcher_rejects_malformed_entries() -> None:
    from ember.runtime.compiled.triton_launcher import load_kernel

    meta = {"signature": dict(ADD_SPEC.signature), "constexprs": {"XBLOCK": 64},
            "grid": [2, 1, 1], "num_warps": 4, "num_stages": 1}
    files = {"k.py": ADD_SOURCE.encode()}
    entry = {"name": "k", "lang": "triton", "entry": "scaled_add", "source": "k.py",
             "meta": meta}
    with pytest.raises(ValueError, match="source file 'missing.py' is not in"):
        load_kernel({**entry, "source": "missing.py"}, files)
    with pytest.raises(ValueError, match="no launch metadata"):
        load_kernel({**entry, "meta": None}, files)
    with pytest.raises(ValueError, match="grid"):
        load_kernel({**entry, "meta": {**meta, "grid": "2"}}, files)
    with pytest.raises(ValueError, match="not UTF-8"):
        load_kernel(entry, {"k.py": b"\xff\xfe"})


def test_compiled_program_with_triton_kernels_round_trips_through_a_file(
        cache_dir: Path, tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from ember.inductor.codegen.triton.testing import triton_for_cpu
    from ember.inductor.compile import compile_program
    from ember.runtime.compiled import load_artifact
    from ember.runtime.ir import save
    from helpers import trace

    x, w = torch.randn(6, 32), torch.randn(32)

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * w, -1)

    with triton_for_cpu():
        compiled = compile_program(trace(fn, [x, w]), {"precompile": False})
    entries = compiled.metadata["compiled"]["graphs"]["forward"]["kernels"]  # type: ignore[index]
    assert [e["lang"] for e in entries] == ["triton"]
    save(compiled, tmp_path / "softmax.ember")
    loaded = load_artifact(tmp_path / "softmax.ember", trusted=True)
    (out,) = loaded(x, w)
    torch.testing.assert_close(out, fn(x, w))
    # the kernel source went through the on-disk cache
    assert len(list((cache_dir / "triton").iterdir())) == 1
