"""Strict capture of whole models: every zoo model, HF GPT-2 and BERT (small random
configs, offline) and a ResNet-style net; outputs equal eager, graph and break counts
asserted."""

from __future__ import annotations

import ember.frontend as ef
import pytest
import torch
import torch.nn.functional as F
import zoo
from torch import nn


def strict(model):
    compiled = ef.compile(model, backend="eager", options={"capture": "strict"})
    return compiled, getattr(compiled, "_compiled", compiled)


class BasicBlock(nn.Module):
    def __init__(self, c_in, c_out, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.down = None
        if stride != 1 or c_in != c_out:
            self.down = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False),
                                      nn.BatchNorm2d(c_out))

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + identity)


class TinyResNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8),
                                  nn.ReLU(inplace=True))
        self.layers = nn.ModuleList([BasicBlock(8, 8), BasicBlock(8, 16, 2),
                                     BasicBlock(16, 16)])
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = self.stem(x)
        for layer in self.layers:
            x = layer(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


@pytest.mark.parametrize("train", [False, True])
def test_resnet_strict(train):
    torch.manual_seed(0)
    model = TinyResNet().train(train)
    reference = TinyResNet().train(train)
    reference.load_state_dict(model.state_dict())
    compiled, inner = strict(model)
    for _ in range(2):
        x = torch.randn(2, 3, 16, 16)
        torch.testing.assert_close(compiled(x), reference(x), rtol=1e-4, atol=1e-4)
    # running statistics were updated the same way (train mode mutates buffers)
    torch.testing.assert_close(model.stem[1].running_mean, reference.stem[1].running_mean)
    assert inner.stats.graphs == 1 and inner.stats.graph_breaks == 0
    assert inner.stats.compiles == 1 and inner.stats.cache_hits == 1


# (graphs, graph breaks) of each zoo model in strict mode; a model not listed must
# capture as one graph without breaks.
ZOO_COUNTS: dict[str, tuple[int, int]] = {}


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("name", zoo.names("test"))
def test_zoo_model_strict(name, grad):
    module, inputs = zoo.get(name).make(torch.device("cpu"), torch.float32, "test")
    compiled, inner = strict(module)
    with torch.set_grad_enabled(grad):
        expected = module(*inputs)
        for _ in range(2):
            torch.testing.assert_close(compiled(*inputs), expected, rtol=1e-4, atol=1e-4)
    graphs, breaks = ZOO_COUNTS.get(name, (1, 0))
    assert (inner.stats.graphs, inner.stats.graph_breaks) == (graphs, breaks), inner.breaks
    assert inner.stats.compiles == graphs and inner.stats.cache_hits == graphs


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("name", [n for n in ("hf_gpt2", "hf_bert") if n in zoo.names("test")])
def test_hf_zoo_strict_backends(name, backend):
    """HF models through the real backends, with grad on (a backward graph) and off."""
    module, inputs = zoo.get(name).make(torch.device("cpu"), torch.float32, "test")
    compiled = ef.compile(module, backend=backend, options={"capture": "strict"})
    inner = getattr(compiled, "_compiled", compiled)
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            expected = module(*inputs)
            got = compiled(*inputs)
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
            assert got.requires_grad == grad
    # one graph per grad mode (grad mode is guarded), never a break
    assert inner.stats.graphs == 2 and inner.stats.graph_breaks == 0, inner.breaks


transformers = pytest.importorskip("transformers")


def test_gpt2_strict():
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100,
                                     n_positions=32, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2Model(config).eval()
    compiled, inner = strict(model)
    ids = torch.randint(0, 100, (2, 8))
    with torch.no_grad():
        expected = model(ids)
        for _ in range(2):
            got = compiled(ids)
            torch.testing.assert_close(got.last_hidden_state, expected.last_hidden_state)
            # the KV cache object made inside forward is rebuilt from the graph outputs
            for mine, ref in zip(got.past_key_values.layers, expected.past_key_values.layers):
                torch.testing.assert_close(mine.keys, ref.keys)
                torch.testing.assert_close(mine.values, ref.values)
    assert inner.stats.graphs == 1 and inner.stats.graph_breaks == 0
    assert inner.stats.compiles == 1 and inner.stats.cache_hits == 1


def test_bert_strict():
    torch.manual_seed(0)
    config = transformers.BertConfig(num_hidden_layers=2, num_attention_heads=2,
                                     hidden_size=32, intermediate_size=64, vocab_size=100,
                                     max_position_embeddings=32)
    model = transformers.BertModel(config).eval()
    compiled, inner = strict(model)
    ids = torch.randint(0, 100, (2, 8))
    with torch.no_grad():
        expected = model(ids)
        for _ in range(2):
            got = compiled(ids)
            torch.testing.assert_close(got.last_hidden_state, expected.last_hidden_state)
            torch.testing.assert_close(got.pooler_output, expected.pooler_output)
    assert inner.stats.graphs == 1 and inner.stats.graph_breaks == 0


def test_bert_layer_strict():
    torch.manual_seed(0)
    config = transformers.BertConfig(num_hidden_layers=1, num_attention_heads=2,
                                     hidden_size=32, intermediate_size=64, vocab_size=100,
                                     max_position_embeddings=32)
    model = transformers.BertModel(config).eval()
    x = torch.randn(2, 8, 32)
    for sub, args, graphs in [(model.embeddings, (torch.randint(0, 100, (2, 8)),), 1),
                              (model.encoder.layer[0].attention, (x,), 1),
                              (model.pooler, (x,), 1)]:
        compiled, inner = strict(sub)
        with torch.no_grad():
            got, expected = compiled(*args), sub(*args)
        got = got[0] if isinstance(got, tuple) else got
        expected = expected[0] if isinstance(expected, tuple) else expected
        torch.testing.assert_close(got, expected)
        assert inner.stats.graphs == graphs and inner.stats.graph_breaks == 0
