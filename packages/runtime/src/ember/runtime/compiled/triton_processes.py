"""Triton builds in worker processes, for the warm-up of a program's kernels.

The inductor's ``precompile_triton`` builds every Triton kernel of a program on a pool
of threads (:func:`.triton_aot.warm_kernel`). Triton's compiler turns the kernel's AST
into MLIR in Python, under the interpreter lock, so those threads overlap only in the
native passes and ``ptxas`` (on the H200, 62 kernels of HF BERT's training step took
7.9 s on 16 threads against 21 s one by one). This module moves the compile itself into
worker processes (:mod:`ember.runtime.triton_worker`):

1. in the build thread, Triton's JIT computes the launch's specialization as it would
   for the first launch (``fn.warmup`` with the same arguments) and hands it to its JIT
   cache hook, which this module installs: for a thread that asked
   (:func:`specialization_of`) the hook keeps Triton's ``specialization_data`` and tells
   the JIT not to compile; every other compile passes through to the hook that was
   installed before, if any;
2. a worker compiles that specialization for the parent's GPU target, into Triton's
   on-disk cache (:func:`build`);
3. the build thread runs ``fn.warmup`` again, which now finds the binary on disk.

Step 3 compares the binary's cache key with the worker's: a difference (a Triton whose
specialization data does not round-trip) means the thread compiled it itself, correct
and as slow as before; it is counted (``triton process builds unused``) and logged under
``stages``. A worker that fails or dies is counted (``triton process builds failed``) and
the thread compiles the kernel itself.

Workers are separate Python processes started with ``python -m`` (never forked from a
process that holds CUDA, and never re-running the user's script the way
``multiprocessing`` does), started when a program's first Triton kernel is about to be
built (:func:`prestart`) and kept for the life of the process. ``EMBER_TRITON_WORKERS``
sets how many (``0``: none, every kernel compiles in its build thread).
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import subprocess
import sys
import threading
from typing import IO, Any

from ember.runtime.compiled.parallel_build import compile_threads
from ember.runtime.compiled.triton_kernel import TritonKernelSpec
from ember.runtime.config import config
from ember.runtime.logs import log
from ember.runtime.phases import count

#: the most workers the default (``EMBER_TRITON_WORKERS`` unset) starts
MAX_DEFAULT_WORKERS = 16


def worker_count() -> int:
    """How many worker processes to use: ``config.triton_workers``, or (-1, the default)
    one per build thread, at most :data:`MAX_DEFAULT_WORKERS`, none with one thread."""
    if config.triton_workers >= 0:
        return config.triton_workers
    threads = compile_threads()
    return 0 if threads <= 1 else min(threads, MAX_DEFAULT_WORKERS)


def _triton_cache_dir() -> str | None:
    """The directory of Triton's on-disk cache in this process (None when unknown)."""
    try:
        import triton

        return str(triton.knobs.cache.dir)
    except Exception:  # noqa: BLE001 - an older Triton: the environment decides
        return None


class _Worker:
    """One ``python -m ember.runtime.triton_worker`` process."""

    def __init__(self) -> None:
        env = dict(os.environ)
        # the parent may have found Ember through sys.path entries made at run time
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        cache = _triton_cache_dir()
        if cache:  # the parent's Triton cache, where it looks for the binaries
            env["TRITON_CACHE_DIR"] = cache
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ember.runtime.triton_worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env, text=True, encoding="utf-8", bufsize=1)
        self._ready = False
        self._next_id = 0

    def _stream(self, name: str) -> IO[str]:
        stream = getattr(self.process, name)
        assert stream is not None
        return stream  # type: ignore[no-any-return]

    def _read(self) -> dict[str, Any]:
        line = self._stream("stdout").readline()
        if not line:
            code = self.process.poll()
            raise RuntimeError(f"the Triton worker process ended (exit code {code})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def request(self, payload: dict[str, Any]) -> dict[str, Any]:
        if not self._ready:
            if not self._read().get("ready"):
                raise RuntimeError("the Triton worker did not start")
            self._ready = True
        self._next_id += 1
        self._stream("stdin").write(json.dumps({"id": self._next_id, **payload}) + "\n")
        self._stream("stdin").flush()
        answer = self._read()
        if answer.get("id") != self._next_id:
            raise RuntimeError("the Triton worker answered another request")
        return answer

    def close(self) -> None:
        try:
            self._stream("stdin").close()
            self.process.wait(timeout=5)
        except Exception:  # noqa: BLE001 - a worker that does not end is killed
            self.process.kill()


_lock = threading.Lock()
_idle: queue.Queue[_Worker] = queue.Queue()
_workers: list[_Worker] = []


def prestart() -> int:
    """Start the worker processes now (they import torch and Triton while the caller
    goes on); returns how many there are. Idempotent."""
    with _lock:
        wanted = worker_count()
        while len(_workers) < wanted:
            try:
                worker = _Worker()
            except OSError as e:
                log("stages", f"Triton worker processes not started ({e}): kernels "
                              "compile in the build threads")
                break
            if not _workers:
                atexit.register(shutdown)
            _workers.append(worker)
            _idle.put(worker)
        return len(_workers)


def shutdown() -> None:
    """End every worker process (at exit, or a test)."""
    with _lock:
        for worker in _workers:
            worker.close()
        _workers.clear()
        while not _idle.empty():
            _idle.get_nowait()


def build(spec: TritonKernelSpec, specialization: str, target: tuple[str, int, int]) -> str:
    """Compile ``spec`` for the launch ``specialization`` on GPU ``target`` in a worker
    process (waiting for an idle one); returns the binary's cache key.

    Raises:
        RuntimeError: no worker, a worker that died (it is dropped), or the compile's
            error (the kernel's name and Triton's message).
    """
    if not _workers:
        raise RuntimeError("no Triton worker processes")
    worker = _idle.get()
    try:
        answer = worker.request({"source": spec.source, "name": spec.name,
                                 "specialization": specialization, "target": list(target)})
    except (OSError, RuntimeError, ValueError) as e:
        with _lock:
            if worker in _workers:
                _workers.remove(worker)
        worker.close()
        raise RuntimeError(f"Triton kernel {spec.name}: {e}") from e
    _idle.put(worker)
    if not answer.get("ok"):
        raise RuntimeError(f"Triton kernel {spec.name}: {answer.get('error')}")
    return str(answer["hash"])


# ---- the JIT cache hook: Triton's specialization of a launch, without compiling --------

_capturing = threading.local()
_hook_lock = threading.Lock()


class _CaptureHook:
    """Triton's ``jit_cache_hook``: in a thread inside :func:`specialization_of`, keep the
    specialization and skip the compile; elsewhere, call the hook it replaced."""

    def __init__(self, previous: Any) -> None:
        self.previous = previous

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        box = getattr(_capturing, "box", None)
        if box is None:
            return self.previous(*args, **kwargs) if self.previous is not None else None
        data = (kwargs.get("compile") or {}).get("specialization_data")
        box.append(data)
        return data is not None  # True: Triton does not compile


def _install_hook() -> bool:
    """Make :class:`_CaptureHook` Triton's JIT cache hook (once; again if something
    replaced it); False on a Triton without the hook."""
    import triton

    runtime = getattr(getattr(triton, "knobs", None), "runtime", None)
    if runtime is None or not hasattr(runtime, "jit_cache_hook"):
        return False
    with _hook_lock:
        current = runtime.jit_cache_hook
        if not isinstance(current, _CaptureHook):
            runtime.jit_cache_hook = _CaptureHook(current)
    return True


def specialization_of(fn: Any, args: list[Any], options: dict[str, Any]) -> str | None:
    """Triton's serialized specialization of launching JIT function ``fn`` with ``args``
    and ``options`` on the current device, without compiling it; None when Triton has
    the binary in memory already or gives no specialization data."""
    if not _install_hook():
        return None
    box: list[str | None] = []
    _capturing.box = box
    try:
        fn.warmup(*args, grid=(1, 1, 1), **options)
    finally:
        _capturing.box = None
    return box[0] if box else None


def compile_elsewhere(spec: TritonKernelSpec, fn: Any, args: list[Any],
                      options: dict[str, Any]) -> str | None:
    """Have a worker process compile ``fn`` for this launch (see the module doc); returns
    the binary's cache key, or None when no worker did (no workers, no specialization, or
    a failure: counted and logged, the caller compiles)."""
    if not prestart():  # none wanted (EMBER_TRITON_WORKERS=0) or none started
        return None
    try:
        from triton.runtime import driver

        target = driver.active.get_current_target()
        data = specialization_of(fn, args, options)
        if data is None:
            return None
        return build(spec, data, (str(target.backend), int(target.arch),
                                  int(target.warp_size)))
    except Exception as e:  # noqa: BLE001 - the build thread compiles it instead
        count("triton process builds failed")
        log("stages", f"Triton kernel {spec.name}: not compiled by a worker process "
                      f"({type(e).__name__}: {e}); compiled in its build thread")
        return None


__all__ = ["MAX_DEFAULT_WORKERS", "build", "compile_elsewhere", "prestart", "shutdown",
           "specialization_of", "worker_count"]
