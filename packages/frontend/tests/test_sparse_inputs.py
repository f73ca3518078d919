"""Tensors that are not strided (sparse COO/CSR) as arguments: the strict capture runs
each such call eagerly (logged and counted, ``FullGraphError`` under ``fullgraph``), the
trace capture refuses them naming the argument. Before, both crashed inside the capture
("Cannot access storage of SparseTensorImpl")."""

from __future__ import annotations

import ember.frontend as ef
import pytest
import torch
from ember.frontend.bytecode import FullGraphError
from ember.frontend.trace import CaptureError
from ember.runtime.config import patch


def _sparse() -> torch.Tensor:
    indices = torch.tensor([[0, 1, 2], [2, 0, 1]])
    return torch.sparse_coo_tensor(indices, torch.tensor([1.0, 2.0, 3.0]), (3, 3),
                                   check_invariants=True)


def _fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.sparse.mm(x, w).relu() + 1


def test_a_sparse_argument_runs_the_call_eagerly_and_says_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    compiled = ef.compile(_fn)
    w = torch.randn(3, 4)
    with patch(logs=frozenset({"graph_breaks"})):
        torch.testing.assert_close(compiled(_sparse(), w), _fn(_sparse(), w))
        torch.testing.assert_close(compiled(_sparse().to_sparse_csr(), w),
                                   _fn(_sparse().to_sparse_csr(), w))
        # a dense call of the same function is compiled
        dense = torch.randn(3, 3)
        torch.testing.assert_close(compiled(dense, w), (dense @ w).relu() + 1)
    assert compiled.stats.eager_fallback_calls == 2 and compiled.stats.graphs == 1
    assert "an argument is a tensor of layout torch.sparse_coo" in capsys.readouterr().err


def test_a_sparse_tensor_inside_a_list_is_found_and_fullgraph_names_it() -> None:
    compiled = ef.compile(lambda xs, w: torch.sparse.mm(xs[0], w), fullgraph=True)
    with pytest.raises(FullGraphError, match="layout torch.sparse_coo"):
        compiled([_sparse()], torch.randn(3, 2))


def test_the_trace_capture_refuses_a_sparse_argument_by_name() -> None:
    compiled = ef.compile(_fn, options={"capture": "trace"})
    with pytest.raises(CaptureError, match=r"argument x is a tensor of layout "
                                           r"torch.sparse_coo"):
        compiled(_sparse(), torch.randn(3, 4))
