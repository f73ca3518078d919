"""The compile cache is private: created 0700; a root that is a symbolic link, belongs to
another user or is writable by group/others is refused (naming it and EMBER_CACHE_DIR);
links inside it are never followed; temporary files are removed, also on failure; a
truncated library is detected by its SHA-256 and rebuilt; kernel sources and cache keys
do not depend on PYTHONHASHSEED.

Crafted entries hold a library whose constructor (or a module whose import) creates a
marker file: the tests assert that the marker never appears and that nothing is written
outside the cache.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import stat
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from ember.runtime.compiled import cpp_build, triton_cache
from ember.runtime.compiled.private_cache import CacheDirError
from ember.runtime.config import patch

SOURCE = 'extern "C" int ember_answer(void) { return 42; }\n'
TRITON_SOURCE = "import triton\n# a kernel module\n"


def _payload(marker: Path) -> str:
    """C++ whose library creates ``marker`` when it is loaded."""
    return ('#include <stdio.h>\n'
            f'__attribute__((constructor)) static void on_load(void) {{\n'
            f'  FILE* f = fopen("{marker}", "w"); if (f) fclose(f); }}\n'
            'extern "C" int ember_answer(void) { return 666; }\n')


def _build_outside(tmp_path: Path, marker: Path) -> tuple[Path, bytes]:
    """A library built from :func:`_payload` outside the cache, and its bytes."""
    outside = tmp_path / "outside"
    outside.mkdir()
    with patch(cache_dir=tmp_path / "scratch"):
        built = cpp_build.compile_cpp(_payload(marker))
    data = built.read_bytes()
    (outside / "kernel.so").write_bytes(data)
    return outside, data


def _manifest(data: bytes) -> str:
    return json.dumps({"sha256": hashlib.sha256(data).hexdigest()})


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file()}


@pytest.fixture
def no_warnings() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def _private_tree(root: Path, sub: str) -> Path:
    """``root/sub`` made by hand, both private (as a cache that is already in use)."""
    (root / sub).mkdir(parents=True)
    root.chmod(0o700)
    (root / sub).chmod(0o700)
    return root / sub


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# -- the cache root -------------------------------------------------------------------

def test_a_new_cache_is_created_private(tmp_path: Path) -> None:
    root = tmp_path / "home" / "cache"
    with patch(cache_dir=root):
        lib = cpp_build.compile_cpp(SOURCE)
        kernel = triton_cache.kernel_source_path(TRITON_SOURCE, "interpret")
    assert ctypes.CDLL(str(lib)).ember_answer() == 42
    for d in (root, root / "cpp", lib.parent, root / "triton", kernel.parent):
        assert _mode(d) == 0o700, d


@pytest.mark.parametrize("mode", [0o775, 0o757, 0o777])
def test_a_root_writable_by_others_is_refused(tmp_path: Path, mode: int) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    root.chmod(mode)
    with patch(cache_dir=root):
        with pytest.raises(CacheDirError, match="writable by group or others") as e:
            cpp_build.compile_cpp(SOURCE)
        with pytest.raises(CacheDirError, match="writable by group or others"):
            triton_cache.kernel_source_path(TRITON_SOURCE, "interpret")
    assert str(root) in str(e.value) and "EMBER_CACHE_DIR" in str(e.value)
    assert list(root.iterdir()) == []


def test_a_root_of_another_user_is_refused(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    if os.getuid() == 0:
        os.chown(root, 65534, 65534)
    else:
        monkeypatch.setattr(os, "getuid", lambda: os.stat(root).st_uid + 1)
    with patch(cache_dir=root), pytest.raises(CacheDirError, match="another user") as e:
        cpp_build.compile_cpp(SOURCE)
    assert str(root) in str(e.value) and "EMBER_CACHE_DIR" in str(e.value)
    assert list(root.iterdir()) == []


def test_a_subdirectory_writable_by_others_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    (root / "cpp").mkdir(parents=True)
    root.chmod(0o700)
    (root / "cpp").chmod(0o777)
    with patch(cache_dir=root), pytest.raises(CacheDirError, match=r"cpp is writable"):
        cpp_build.compile_cpp(SOURCE)
    assert list((root / "cpp").iterdir()) == []


def test_a_symlinked_root_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o700)
    root = tmp_path / "cache"
    root.symlink_to(outside)
    with patch(cache_dir=root):
        with pytest.raises(CacheDirError, match="is a symbolic link") as e:
            cpp_build.compile_cpp(SOURCE)
        with pytest.raises(CacheDirError, match="is a symbolic link"):
            triton_cache.kernel_source_path(TRITON_SOURCE, "interpret")
    assert "EMBER_CACHE_DIR" in str(e.value)
    assert list(outside.iterdir()) == []


# -- links inside the cache -----------------------------------------------------------

def test_a_symlinked_cpp_entry_is_replaced_not_followed(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    outside, data = _build_outside(tmp_path, marker)
    (outside / "manifest.json").write_text(_manifest(data))
    before = _tree(outside)
    root = tmp_path / "cache"
    entry = _private_tree(root, "cpp") / cpp_build.cache_key(SOURCE)
    entry.symlink_to(outside, target_is_directory=True)
    with patch(cache_dir=root), pytest.warns(cpp_build.CppCacheWarning):
        lib = cpp_build.compile_cpp(SOURCE)
    assert ctypes.CDLL(str(lib)).ember_answer() == 42
    assert not entry.is_symlink() and lib.parent == entry
    assert _tree(outside) == before
    assert not marker.exists()


def test_a_symlinked_library_is_rebuilt_not_loaded(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    outside, data = _build_outside(tmp_path, marker)
    before = _tree(outside)
    root = tmp_path / "cache"
    entry = _private_tree(root, "cpp") / cpp_build.cache_key(SOURCE)
    entry.mkdir(mode=0o700)
    (entry / "kernel.so").symlink_to(outside / "kernel.so")
    (entry / "manifest.json").write_text(json.dumps({  # matches the link's target
        "key": entry.name, "library": "kernel.so", "sha256": hashlib.sha256(data).hexdigest()}))
    with patch(cache_dir=root), pytest.warns(cpp_build.CppCacheWarning):
        lib = cpp_build.compile_cpp(SOURCE)
    assert not lib.is_symlink()
    assert ctypes.CDLL(str(lib)).ember_answer() == 42
    assert _tree(outside) == before
    assert not marker.exists()


def test_a_symlinked_triton_entry_is_replaced_not_followed(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    outside = tmp_path / "outside"
    outside.mkdir()
    payload = f"open({str(marker)!r}, 'w').close()\n".encode()
    (outside / "kernel.py").write_bytes(payload)
    (outside / "manifest.json").write_text(_manifest(payload))
    before = _tree(outside)
    root = tmp_path / "cache"
    entry = _private_tree(root, "triton") / triton_cache.cache_key(TRITON_SOURCE, "interpret")
    entry.symlink_to(outside, target_is_directory=True)
    with (patch(cache_dir=root),
          pytest.warns(triton_cache.TritonCacheWarning, match="symbolic link")):
        path = triton_cache.kernel_source_path(TRITON_SOURCE, "interpret")
    assert path == entry / "kernel.py" and not entry.is_symlink()
    assert path.read_text() == TRITON_SOURCE
    assert _tree(outside) == before
    assert not marker.exists()


OTHER_SOURCE = 'extern "C" int ember_answer(void) { return 7; }\n'


def test_swapped_cpp_entries_are_rebuilt_not_loaded(tmp_path: Path) -> None:
    """Two entries' folders swapped: each manifest matched its library, so the other
    kernel was loaded (a silently wrong result). The manifest names its key now."""
    with patch(cache_dir=tmp_path):
        a, b = cpp_build.compile_cpp(SOURCE).parent, cpp_build.compile_cpp(OTHER_SOURCE).parent
        a.rename(tmp_path / "swap")
        b.rename(a)
        (tmp_path / "swap").rename(b)
        with pytest.warns(cpp_build.CppCacheWarning, match="corrupt"):
            lib = cpp_build.compile_cpp(SOURCE)
        assert ctypes.CDLL(str(lib)).ember_answer() == 42


def test_a_cpp_entry_writable_by_others_is_rebuilt(tmp_path: Path) -> None:
    with patch(cache_dir=tmp_path):
        entry = cpp_build.compile_cpp(SOURCE).parent
        entry.chmod(0o777)
        with pytest.warns(cpp_build.CppCacheWarning, match="corrupt"):
            lib = cpp_build.compile_cpp(SOURCE)
        assert ctypes.CDLL(str(lib)).ember_answer() == 42


def test_a_triton_entry_holding_another_source_is_replaced(tmp_path: Path) -> None:
    with patch(cache_dir=tmp_path):
        other = TRITON_SOURCE + "# another kernel\n"
        a = triton_cache.kernel_source_path(TRITON_SOURCE, "interpret").parent
        b = triton_cache.kernel_source_path(other, "interpret").parent
        a.rename(tmp_path / "swap")
        b.rename(a)
        (tmp_path / "swap").rename(b)
        with pytest.warns(triton_cache.TritonCacheWarning, match="another kernel's source"):
            path = triton_cache.kernel_source_path(TRITON_SOURCE, "interpret")
        assert path.read_text() == TRITON_SOURCE


def test_files_of_another_user_are_not_read(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A C++ entry's library and manifest, or a wrapper's code, that belong to another
    user (put there by someone who could) were loaded and run."""
    from ember.runtime.compiled import private_cache

    path = tmp_path / "f"
    path.write_bytes(b"x")
    path.chmod(0o600)
    assert private_cache.read_file(path) == b"x"
    if os.getuid() == 0:
        os.chown(path, 65534, 65534)
    else:
        monkeypatch.setattr(os, "getuid", lambda: os.stat(path).st_uid + 1)
    with pytest.raises(PermissionError, match="belongs to another user"):
        private_cache.read_file(path)


# -- temporary files ------------------------------------------------------------------

def test_a_failed_build_leaves_nothing_behind(tmp_path: Path) -> None:
    with patch(cache_dir=tmp_path / "cache"):
        with pytest.raises(cpp_build.CppCompileError):
            cpp_build.compile_cpp("this is not C++\n")
        assert list(cpp_build.cache_dir().iterdir()) == []


def test_a_failed_write_removes_its_temporary_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    with patch(cache_dir=tmp_path / "cache"):
        entries = cpp_build.cache_dir()
        monkeypatch.setattr(os, "replace", failing_replace)
        with pytest.raises(OSError, match="No space left"):
            cpp_build.compile_cpp(SOURCE)
    (entry,) = entries.iterdir()
    assert list(entry.iterdir()) == []  # no kernel.so.tmp*, no build directory


def test_a_disabled_cache_builds_in_a_directory_removed_at_exit(tmp_path: Path) -> None:
    code = ("from ember.runtime.compiled import cpp_build, triton_cache\n"
            f"lib = cpp_build.compile_cpp({SOURCE!r})\n"
            f"kernel = triton_cache.kernel_source_path({TRITON_SOURCE!r}, 'interpret')\n"
            "print(lib.parent.parent); print(kernel.parent.parent.parent)\n")
    env = dict(os.environ, EMBER_CACHE="0", EMBER_CACHE_DIR=str(tmp_path / "unused"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=300, check=True).stdout.split()
    assert len(out) == 2
    assert not any(Path(d).exists() for d in out)
    assert not (tmp_path / "unused").exists()


# -- corrupt libraries ----------------------------------------------------------------

def test_a_truncated_library_is_detected_and_rebuilt(tmp_path: Path,
                                                     no_warnings: None) -> None:
    with patch(cache_dir=tmp_path):
        lib = cpp_build.compile_cpp(SOURCE)
        manifest = json.loads((lib.parent / "manifest.json").read_text())
        assert manifest["sha256"] == hashlib.sha256(lib.read_bytes()).hexdigest()
        with open(lib, "r+b") as f:
            f.truncate(4096)
        with pytest.warns(cpp_build.CppCacheWarning, match="corrupt"):
            rebuilt = cpp_build.compile_cpp(SOURCE)
        assert rebuilt != lib and not lib.exists()
        assert ctypes.CDLL(str(rebuilt)).ember_answer() == 42
        assert cpp_build.compile_cpp(SOURCE) == rebuilt  # a clean hit now


_LOADED_THEN_TRUNCATED = f"""
import ctypes, os, sys, warnings
from ember.runtime.compiled import cpp_build
warnings.simplefilter("ignore")
source = {SOURCE!r} + "static volatile int pad[100000] = {{1}};\\n"
lib = cpp_build.compile_cpp(source)
assert ctypes.CDLL(str(lib)).ember_answer() == 42
with open(lib, "r+b") as f:
    f.truncate(4096)   # a library this process has loaded, truncated in place
print(ctypes.CDLL(str(cpp_build.compile_cpp(source))).ember_answer(), flush=True)
os._exit(0)  # NOTE: unloading the truncated library at exit would fault
"""


def test_a_library_truncated_after_loading_is_rebuilt_under_a_new_name(
        tmp_path: Path) -> None:
    # dlopen returns the library already loaded under a name: a rebuild under the same
    # name would hand back the truncated mapping (SIGBUS on the first call).
    env = dict(os.environ, EMBER_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", _LOADED_THEN_TRUNCATED], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["42"]


# -- determinism ----------------------------------------------------------------------

_COMPILE_AND_PRINT = """
import json, sys, torch
from ember.inductor.compile import compile_program
from ember.inductor.codegen.triton.testing import triton_for_cpu
from ember.runtime.compiled import cpp_build, triton_cache
from ember.runtime.ir import InputSpec
from ember.runtime.tracing import GraphRecorder

def f(x, w, idx):
    y = torch.softmax(x @ w, -1)
    z = torch.nn.functional.layer_norm(y, (8,)) * 2
    g = torch.gather(z, 1, idx)
    s = torch.zeros(4, 8).scatter_add(1, idx, g)
    return z.sum(0), g.amax(-1), torch.cat([y, s], 1), torch.where(s > 0, s, -s)

files = {}
for lang in ("cpp", "triton"):
    rec = GraphRecorder()
    ins = [rec.add_input(t, InputSpec(f"in{i}")) for i, t in enumerate(
        [torch.randn(4, 8), torch.randn(8, 8), torch.randint(0, 8, (4, 3))])]
    with rec:
        outs = f(*ins)
    program = rec.finish(list(outs))
    program.dialect = "core-functional"
    if lang == "cpp":
        compiled = compile_program(program, {"strict": True})
    else:
        with triton_for_cpu():
            compiled = compile_program(program, {"strict": True})
    for name, data in compiled.files.items():
        text = data.decode()
        key = (cpp_build.cache_key(text) if name.endswith(".cpp") else
               triton_cache.cache_key(text, "interpret") if "/triton_" in name else None)
        files[f"{lang}:{name}"] = [text, key]
print(json.dumps(files, sort_keys=True))
"""


def test_kernel_sources_and_cache_keys_do_not_depend_on_the_hash_seed() -> None:
    pytest.importorskip("ember.inductor")
    results = []
    for seed in ("1", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        proc = subprocess.run([sys.executable, "-c", _COMPILE_AND_PRINT], env=env,
                              capture_output=True, text=True, timeout=600, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        results.append(json.loads(proc.stdout))
    first, second = results
    assert any(k.startswith("cpp:") and v[1] for k, v in first.items())
    assert any(k.startswith("triton:") and v[1] for k, v in first.items())
    assert first == second
