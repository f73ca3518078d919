"""A process that compiles Triton kernels into Triton's on-disk cache.

Triton's compiler is partly Python (the kernel's AST is turned into MLIR by Python code)
and holds the interpreter lock while it does so, so build threads in one process overlap
only in its native passes and ``ptxas``. :mod:`.triton_processes` runs a few of these
workers beside a compiling process: each takes a kernel with the exact specialization a
launch in the parent would build (captured there from Triton's own JIT,
``specialization_data``), compiles it for the parent's GPU target and leaves the binary
in Triton's on-disk cache, which the parent then loads instead of compiling.

Protocol (one JSON object a line): the worker prints ``{"ready": true}`` once its imports
are done, then answers each request line ``{"id", "source", "name",
"specialization", "target"}`` with ``{"id", "ok": true, "hash": ...}`` (the binary's
cache key) or ``{"id", "ok": false, "error": ...}``; it exits at the end of its input.
Anything else the process writes goes to its standard error.

    python -m ember.runtime.triton_worker

The worker imports Triton but not torch (this module sits outside
``ember.runtime.compiled``, whose package imports torch, and it imports that package's
``triton_math``, which generated kernels use, without the package's ``__init__``:
:func:`bare_compiled_package`), so it starts in a fraction of a second. Triton's binary does not depend on the module a kernel is imported as (its cache
key hashes the function's source, dependencies and first line), so the worker imports
each kernel source from a file of its own.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import types
from pathlib import Path
from typing import Any, TextIO

_folder: Path | None = None
_modules: dict[str, Any] = {}


def _jit_function(source: str, name: str) -> Any:
    """The ``@triton.jit`` function ``name`` of kernel module ``source``, imported from a
    file in this process's own folder (once a source)."""
    global _folder
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()[:32]
    module = _modules.get(digest)
    if module is None:
        if _folder is None:
            _folder = Path(tempfile.mkdtemp(prefix="ember-triton-worker-"))
        path = _folder / f"k{digest}.py"
        path.write_text(source, encoding="utf-8")
        spec = importlib.util.spec_from_file_location(f"ember_triton_worker_{digest}", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import the Triton kernel file {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _modules[digest] = module
    fn = getattr(module, name, None)
    if fn is None:
        raise AttributeError(f"the Triton kernel source has no function {name!r}")
    return fn


def _decode_constant(value: Any) -> Any:
    """One constexpr value of Triton's serialized specialization, as the JIT had it: a
    dtype name, a ``{"constexpr": v}`` wrapper, or a plain value (tuples come back from
    JSON as lists)."""
    import triton.language as tl

    if isinstance(value, str) and tl.dtype.is_dtype(value):
        return tl.dtype(value)
    if isinstance(value, dict) and "constexpr" in value:
        inner = value["constexpr"]
        return tl.constexpr(tuple(inner) if isinstance(inner, list) else inner)
    return tuple(value) if isinstance(value, list) else value


def compile_specialized(source: str, name: str, specialization: str,
                        target: tuple[str, int, int]) -> str:
    """Compile the kernel ``name`` of module ``source`` as Triton's JIT would for the launch described by
    ``specialization`` (the ``specialization_data`` Triton passes its JIT cache hook)
    for GPU ``target`` (backend, capability, warp size), leaving the binary in Triton's
    on-disk cache; returns its cache key (``CompiledKernel.hash``).

    Raises:
        ValueError: the specialization names another kernel.
        Exception: whatever Triton's compiler raises for this kernel.
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.compiler.compiler import make_backend

    fn = _jit_function(source, name)
    data = json.loads(specialization)
    if str(data["name"]).rpartition(".")[2] != name:
        raise ValueError(f"the specialization is of {data['name']}, not of {name}")
    constexprs = {tuple(k): _decode_constant(v)
                  for k, v in zip(data["constant_keys"], data["constant_vals"])}
    attrs = {tuple(k): v for k, v in zip(data["attrs_keys"], data["attrs_vals"])}
    signature = {k: tuple(v) if isinstance(v, list) else v
                 for k, v in data["signature"].items()}
    gpu = GPUTarget(*target)
    options = make_backend(gpu).parse_options(
        {k: tuple(v) if isinstance(v, list) else v for k, v in data["options"].items()})
    compiled = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=gpu,
                              options=options.__dict__)
    return str(compiled.hash)


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    try:
        backend, arch, warp = request["target"]
        key = compile_specialized(str(request["source"]), str(request["name"]),
                                  str(request["specialization"]),
                                  (str(backend), int(arch), int(warp)))
    except Exception as e:  # noqa: BLE001 - every failure is the parent's to report
        return {"id": request.get("id"), "ok": False, "error": f"{type(e).__name__}: {e}"}
    return {"id": request.get("id"), "ok": True, "hash": key}


def serve(requests: TextIO, answers: TextIO) -> None:
    """Answer ``requests`` (one JSON object a line) on ``answers`` until the input ends."""
    answers.write(json.dumps({"ready": True}) + "\n")
    answers.flush()
    for line in requests:
        if not line.strip():
            continue
        answers.write(json.dumps(_answer(json.loads(line))) + "\n")
        answers.flush()


def bare_compiled_package() -> None:
    """Make ``ember.runtime.compiled`` importable here without running its ``__init__``.

    Generated kernels import ``ember.runtime.compiled.triton_math`` (libdevice), which
    needs only Triton and NumPy, but the package's ``__init__`` imports the artifact
    loader and with it torch (seconds per worker). The worker registers the package as
    a bare module over the same folder, so its submodules import alone."""
    name = "ember.runtime.compiled"
    if name in sys.modules:
        return
    import ember.runtime

    folder = Path(ember.runtime.__file__).parent / "compiled"
    package = types.ModuleType(name)
    package.__path__ = [str(folder)]
    package.__package__ = name
    sys.modules[name] = package


def main() -> None:
    # the protocol keeps the real standard output; prints of Triton or torch go to the
    # standard error
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    sys.stdout = sys.stderr
    bare_compiled_package()
    import triton  # noqa: F401 - imported before answering ready

    try:
        serve(sys.stdin, answers)
    finally:
        # the kernel files were only the JIT's source; the binaries are in Triton's cache
        if _folder is not None:
            shutil.rmtree(_folder, ignore_errors=True)


if __name__ == "__main__":
    main()
