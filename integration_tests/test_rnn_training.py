"""Recurrent layers train under Ember as in eager (CPU: mkldnn's RNN layer).

mkldnn's ``mkldnn_rnn_layer`` returns the workspace its backward needs only with grad
mode on. The compiled wrapper runs inside autograd's Function, without grad, so the
workspace came back None and the backward raised ("Expected a proper Tensor but got
None ... 'workspace'"). Such ops are now called with grad mode on
(``codegen/wrapper.GRAD_MODE_EXTERNS``)."""

from __future__ import annotations

import copy

import ember.frontend as ef
import pytest
import torch
from torch import nn


@pytest.mark.parametrize("make", [
    lambda: nn.LSTM(8, 16, num_layers=2, batch_first=True),
    lambda: nn.GRU(8, 16, bidirectional=True, batch_first=True),
    lambda: nn.RNN(8, 16, nonlinearity="relu"),
], ids=["lstm", "gru", "rnn"])
def test_a_recurrent_layer_trains_as_in_eager(make: object) -> None:
    torch.manual_seed(0)
    eager = make()  # type: ignore[operator]
    model = copy.deepcopy(eager)
    compiled = ef.compile(model)
    for _ in range(2):
        x = torch.randn(2, 5, 8)
        x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
        want, got = eager(x1)[0], compiled(x2)[0]
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        want.sum().backward()
        got.sum().backward()
        torch.testing.assert_close(x2.grad, x1.grad, rtol=1e-4, atol=1e-5)
        for (name, p), q in zip(eager.named_parameters(), model.parameters()):
            assert q.grad is not None, name
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)
    assert compiled.stats.graph_breaks == 0


@pytest.mark.parametrize("make", [
    lambda: nn.LSTM(4, 6, batch_first=True),
    lambda: nn.LSTM(4, 6, num_layers=2, bidirectional=True, batch_first=True),
], ids=["lstm", "lstm_2_layers_bidirectional"])
def test_a_batch_first_lstm_over_symbolic_sizes_matches_eager(make: object) -> None:
    # the layer reads its input permuted to (time, batch) through a clone the lowering
    # elides; the fallback got the permuted view, not the contiguous copy it reads as
    # memory, and returned wrong values (symbolic layouts were not restored)
    torch.manual_seed(0)
    model = make().eval()  # type: ignore[operator]
    compiled = ef.compile(lambda x: model(x)[0], dynamic=True)
    with torch.no_grad():
        for shape in ((2, 5, 4), (3, 7, 4)):
            x = torch.randn(*shape)
            torch.testing.assert_close(compiled(x), model(x)[0], rtol=1e-5, atol=1e-6)
    assert compiled.stats.compiles == 1
