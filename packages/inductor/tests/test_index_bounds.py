"""Out-of-range indexes raise like eager (issue 11, item 5), in the C++ kernels and in the
Triton kernels (run by Triton's interpreter on CPU tensors); indexes whose range is known
at compile time get no check at all (the generated text has none).

Eager on CPU (checked by ``test_eager_raises_what_the_table_says``):

| op                  | valid indexes  | out of range raises |
|---------------------|----------------|---------------------|
| gather              | [0, size)      | RuntimeError        |
| index_select        | [0, size)      | IndexError (dim 0)  |
| embedding           | [0, size)      | IndexError          |
| x[idx] (index)      | [-size, size)  | IndexError          |
| take (-> index)     | [-numel, numel)| IndexError          |
| index_put           | [-size, size)  | IndexError          |
| scatter, scatter_add, scatter_reduce, index_add | [0, size) | RuntimeError |
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))

from helpers import compile_and_load, compile_for, trace

# name -> (fn(x, idx), x shape, valid idx, out-of-range idx values, eager's exception)
Case = tuple[Callable[..., Any], tuple[int, ...], list[int], list[int], type[Exception]]
CASES: dict[str, Case] = {
    "gather": (lambda x, i: x.gather(1, i.view(1, -1).expand(4, -1)) * 2, (4, 5),
               [0, 4, 2], [5, -1], RuntimeError),
    "index_select": (lambda x, i: x.index_select(0, i) + 1, (4, 5), [3, 0, 3], [4, -1],
                     IndexError),
    "embedding": (lambda w, i: F.embedding(i, w) * 3, (6, 4), [5, 0, 2], [6, -1], IndexError),
    "index": (lambda x, i: x[i] - 1, (4, 5), [-4, 3, -1], [4, -5], IndexError),
    "take": (lambda x, i: torch.take(x, i) + 1, (4, 5), [19, -20, 0], [20, -21], IndexError),
    "index_put": (lambda x, i: x.index_put((i,), torch.tensor(7.0, device=i.device)),
                  (4, 5), [-4, 3], [4, -5], IndexError),
    "index_put_acc": (lambda x, i: x.index_put((i,), torch.tensor(7.0, device=i.device),
                                               accumulate=True),
                      (4, 5), [-1, 1, -1], [9, -5], IndexError),
    "scatter": (lambda x, i: x.scatter(1, i.view(1, -1), 2.0), (4, 5), [4, 0], [5, -1],
                RuntimeError),
    "scatter_add": (lambda x, i: x.scatter_add(1, i.view(1, -1),
                                                torch.ones(1, i.numel(), device=i.device)),
                    (4, 5), [4, 4, 0], [5, -1], RuntimeError),
    "scatter_reduce": (lambda x, i: x.scatter_reduce(1, i.view(1, -1),
                                                     torch.ones(1, i.numel(), device=i.device),
                                                     "sum"),
                       (4, 5), [1, 1], [7, -2], RuntimeError),
    "index_add": (lambda x, i: x.index_add(0, i, torch.ones(i.numel(), 5, device=i.device)),
                  (4, 5), [3, 3], [4, -1], RuntimeError),
}




def _text(compiled: Any) -> str:
    return "\n".join(f.decode() for f in compiled.files.values())


@pytest.mark.parametrize("name", sorted(CASES))
def test_eager_raises_what_the_table_says(name: str) -> None:
    fn, shape, _, bad, exc = CASES[name]
    for v in bad:
        with pytest.raises(exc):
            fn(torch.randn(shape), torch.tensor([0, v]))


@pytest.mark.parametrize("name", sorted(CASES))
def test_out_of_range_index_raises_like_eager(name: str, backend: str) -> None:
    fn, shape, good, bad, exc = CASES[name]
    x = torch.randn(shape)
    compiled, run = compile_for(fn, x, torch.tensor(good), backend=backend)
    torch.testing.assert_close(run(x, torch.tensor(good))[0], fn(x, torch.tensor(good)))
    size = shape[0] * shape[1] if name == "take" else shape[0 if name != "gather" and
                                                            "scatter" not in name else 1]
    for v in bad:
        idx = torch.tensor(good)
        idx[len(good) // 2] = v
        with pytest.raises(exc) as info:
            run(x, idx)
        message = str(info.value)
        assert f"index {v} is out of bounds" in message and f"with size {size}" in message
        assert "aten::" in message  # names the op


def test_index_select_of_a_0d_tensor(backend: str) -> None:
    # the OpInfo sample: a 0-d source, so a 0-d result (the rule used to crash)
    x = torch.tensor(3.0)
    compiled, run = compile_for(lambda x, i: x.index_select(0, i) * 2, x, torch.tensor([0]),
                             backend=backend)
    assert run(x, torch.tensor([0]))[0].tolist() == 6.0
    with pytest.raises(IndexError, match="index 1 is out of bounds"):
        run(x, torch.tensor([1]))


def test_first_failing_kernel_raises_and_later_calls_still_work(backend: str) -> None:
    w = torch.randn(10, 3)
    compiled, run = compile_for(lambda w, i: F.embedding(i, w).sum(0), w,
                             torch.tensor([1, 2]), backend=backend)
    with pytest.raises(IndexError, match="aten::embedding.default: index 10 is out"):
        run(w, torch.tensor([1, 10]))
    # the error buffer is zeroed per call: a good call after a bad one succeeds
    torch.testing.assert_close(run(w, torch.tensor([9, 0]))[0], w[[9, 0]].sum(0))


def test_index_out_of_range_under_a_mask_is_not_reported(backend: str) -> None:
    # cat reads the gathered part only where its rows lie: a masked-off element of the
    # index (0 there) is never an error, and a real one still is
    x = torch.randn(4, 5)

    def fn(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        return torch.cat([x.index_select(0, i), x], 0) * 2

    compiled, run = compile_for(fn, x, torch.tensor([0, 3]), backend=backend)
    torch.testing.assert_close(run(x, torch.tensor([3, 1]))[0], fn(x, torch.tensor([3, 1])))
    with pytest.raises(IndexError):
        run(x, torch.tensor([3, 4]))


# -- bounds known at compile time: no check in the generated code ------------------------
PROVEN: dict[str, tuple[Callable[..., Any], tuple[int, ...]]] = {
    "gather_argmax": (lambda x: x.gather(1, x.argmax(1, keepdim=True)) + 1, (4, 5)),
    "index_arange": (lambda x: x[torch.arange(4)] * 2, (4, 5)),
    "index_arange_negative": (lambda x: x[torch.arange(-4, 0)] * 2, (4, 5)),
    "index_select_argmin": (lambda x: x.index_select(0, x.sum(1).argmin().view(1)) + 1,
                            (4, 5)),
    "scatter_arange": (lambda x: x.scatter(1, torch.arange(5).view(1, 5), 1.0),
                       (4, 5)),
    "index_put_argmax": (lambda x: x.index_put((x[:, 0].argmax().view(1),), torch.tensor(0.0)),
                         (4, 5)),
}


@pytest.mark.parametrize("name", sorted(PROVEN))
def test_provable_bounds_emit_no_check(name: str, backend: str) -> None:
    fn, shape = PROVEN[name]
    x = torch.randn(shape)
    compiled, run = compile_for(fn, x, backend=backend)
    torch.testing.assert_close(run(x)[0], fn(x))
    text = _text(compiled)
    assert "kernel_errors" not in text and "a run-time check failed" not in text, text


def test_unknown_bounds_emit_a_check(backend: str) -> None:
    # the counterpart of the test above: the same gather from an input index is checked
    x = torch.randn(4, 5)
    compiled, _ = compile_for(lambda x, i: x.gather(1, i) + 1, x, torch.zeros(4, 1, dtype=torch.long),
                           backend=backend)
    text = _text(compiled)
    assert "kernel_errors" in text and "a run-time check failed" in text


_CUDA_CHILD = """
import sys, torch
sys.path.insert(0, {here!r})
from helpers import compile_and_load, trace
from test_index_bounds import CASES
fn, shape, good, bad, exc = CASES[{name!r}]
x = torch.randn(shape, device="cuda")
ok = torch.tensor(good, device="cuda")
_, run = compile_and_load(trace(fn, [x, ok]))
torch.testing.assert_close(run(x, ok)[0], fn(x, ok))
torch.cuda.synchronize()
print("GOOD-OK", flush=True)
idx = ok.clone()
idx[len(good) // 2] = bad[0]
run(x, idx)  # returns at once: the check is a device-side assert, no synchronization
print("RETURNED", flush=True)
torch.cuda.synchronize()
print("NOT-RAISED", flush=True)
"""


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("name", sorted(CASES))
def test_cuda_out_of_range_index_asserts_on_device(name: str) -> None:
    """On CUDA the wrapper ends the graph with one device-side assert over the error
    buffer, as eager's own CUDA index checks: the call does not synchronize, and the
    failure surfaces at the next synchronization as a "device-side assert triggered"
    error (in a child process: the assert leaves the CUDA context unusable, as in eager)."""
    import subprocess

    child = _CUDA_CHILD.format(here=str(Path(__file__).parent), name=name)
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                         timeout=300, check=False)
    assert "GOOD-OK" in out.stdout, out.stderr[-2000:]
    assert "RETURNED" in out.stdout, out.stderr[-2000:]
    assert "NOT-RAISED" not in out.stdout
    assert out.returncode != 0
    assert "device-side assert" in out.stderr, out.stderr[-2000:]


def test_cuda_wrapper_asserts_instead_of_synchronizing() -> None:
    """The CUDA wrapper's check is one ``_assert_checks_passed`` call (no ``.any()`` or
    ``.tolist()`` on the error buffer, which would synchronize every call)."""
    from ember.inductor.codegen.wrapper import WrapperWriter
    from ember.inductor.lowering.graph_lowering import GraphLowering
    from ember.inductor.scheduler import schedule

    fn = CASES["embedding"][0]
    w, i = torch.randn(6, 4), torch.tensor([5, 0, 2])
    lowered = GraphLowering(trace(fn, [w, i]), "forward", torch.device("cpu")).run()
    text = WrapperWriter(lowered, schedule(lowered), "cuda").write()
    assert "_assert_checks_passed(kernel_errors, " in text
    assert "kernel_errors.any()" not in text and ".tolist()" not in text



def test_cpu_wrapper_reads_the_flags_through_a_numpy_view() -> None:
    """The CPU wrapper tests each checking kernel's flags through a NumPy view of the
    error buffer (a tensor ``.any()`` per kernel cost ~50 us a call); the raise paths
    are the tests above."""
    from ember.inductor.codegen.wrapper import WrapperWriter
    from ember.inductor.lowering.graph_lowering import GraphLowering
    from ember.inductor.scheduler import schedule

    fn = CASES["embedding"][0]
    w, i = torch.randn(6, 4), torch.tensor([5, 0, 2])
    lowered = GraphLowering(trace(fn, [w, i]), "forward", torch.device("cpu")).run()
    text = WrapperWriter(lowered, schedule(lowered), "cpu").write()
    assert "kernel_errors_flags = kernel_errors.numpy()" in text
    assert "if kernel_errors_flags[0]:  # a run-time check failed" in text
    assert ".any()" not in text

@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_cuda_provable_bounds_emit_no_check() -> None:
    x = torch.randn(64, 128, device="cuda")
    compiled, run = compile_and_load(trace(PROVEN["gather_argmax"][0], [x]))
    torch.testing.assert_close(run(x)[0], PROVEN["gather_argmax"][0](x))
    assert "kernel_errors" not in _text(compiled)
