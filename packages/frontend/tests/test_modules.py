"""Modules: parameters and buffers are live inputs, training, autograd, CompiledModule."""

from __future__ import annotations

import ember.frontend as ef
import pytest
import torch
from ember.frontend import capture_modes
from ember.runtime.ir import InputKind, InputSpec
from torch import nn


@pytest.fixture(autouse=True)
def _tracing_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests cover the tracing capture mode's guards and cache; the strict mode's
    have their own (test_strict_guards.py)."""
    monkeypatch.setattr(capture_modes, "DEFAULT_CAPTURE_MODE", "trace")



class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.norm = nn.BatchNorm1d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.fc(x)).relu()


def test_parameters_and_buffers_are_labelled_inputs() -> None:
    p = ef.capture(Net().eval(), torch.randn(2, 4))
    specs = p.signature.inputs["forward"]
    assert specs == [
        InputSpec("p_fc_weight", InputKind.PARAMETER, "fc.weight"),
        InputSpec("p_fc_bias", InputKind.PARAMETER, "fc.bias"),
        InputSpec("p_norm_weight", InputKind.PARAMETER, "norm.weight"),
        InputSpec("p_norm_bias", InputKind.PARAMETER, "norm.bias"),
        InputSpec("b_norm_running_mean", InputKind.BUFFER, "norm.running_mean"),
        InputSpec("b_norm_running_var", InputKind.BUFFER, "norm.running_var"),
        InputSpec("b_norm_num_batches_tracked", InputKind.BUFFER, "norm.num_batches_tracked"),
        InputSpec("x"),
    ]
    assert [n.op for n in p.forward.nodes].count("constant") == 0  # nothing baked in
    assert p.forward.node("p_fc_weight").meta.requires_grad is True  # type: ignore[union-attr]


def test_optimizer_updates_are_seen_without_recompiling() -> None:
    model = Net().train()
    compiled = ef.compile(model, backend="eager")
    opt = torch.optim.SGD(compiled.parameters(), lr=0.1)
    reference = Net().train()
    reference.load_state_dict(model.state_dict())
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(3):
        x = torch.randn(5, 4)
        loss = compiled(x).square().mean()
        ref_loss = reference(x).square().mean()
        assert torch.equal(loss, ref_loss)
        for o, lo in ((opt, loss), (ref_opt, ref_loss)):
            o.zero_grad()
            lo.backward()
            o.step()
        for (name, a), b in zip(model.state_dict().items(), reference.state_dict().values()):
            assert torch.equal(a, b), name
    assert compiled.stats.compiles == 1 and compiled.stats.cache_hits == 2


def test_tied_weights_are_one_input() -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(10, 4)
            self.head = nn.Linear(4, 10, bias=False)
            self.head.weight = self.emb.weight

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.head(self.emb(ids))

    model = Tied()
    p = ef.capture(model, torch.randint(0, 10, (2, 3)))
    assert [s.target for s in p.signature.inputs["forward"]] == ["emb.weight", None]
    compiled = ef.compile(model, backend="eager")
    ids = torch.randint(0, 10, (2, 3))
    assert torch.equal(compiled(ids), model(ids))


def test_compiled_module_is_a_module_view_of_the_original() -> None:
    model = Net()
    compiled = ef.compile(model, backend="eager")
    assert isinstance(compiled, nn.Module) and isinstance(compiled, ef.CompiledModule)
    assert list(compiled.parameters()) == list(model.parameters())
    assert compiled.fc is model.fc  # attributes fall through to the original
    compiled.eval()
    assert model.training is False and model.norm.training is False
    x = torch.randn(3, 4)
    assert torch.equal(compiled(x), model(x))
    compiled.train()
    x = torch.randn(3, 4)
    expected = Net()
    expected.load_state_dict(model.state_dict())
    assert torch.equal(compiled(x), expected.train()(x))
    assert compiled.stats.compiles == 2


def test_bound_method_takes_the_module_state_as_inputs() -> None:
    model = Net().eval()
    p = ef.capture(model.forward, torch.randn(2, 4))
    assert p.signature.inputs["forward"][0] == InputSpec("p_fc_weight", InputKind.PARAMETER,
                                                         "fc.weight")
    compiled = ef.compile(model.forward, backend="eager")
    x = torch.randn(2, 4)
    assert torch.equal(compiled(x), model(x))


def test_gradients_match_eager() -> None:
    model = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1))
    x = torch.randn(4, 3, requires_grad=True)
    ref_x = x.detach().clone().requires_grad_()
    compiled = ef.compile(model, backend="eager")
    compiled(x).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]  # type: ignore[union-attr]
    model.zero_grad()
    model(ref_x).sum().backward()
    for g, p in zip(grads, model.parameters()):
        assert torch.equal(g, p.grad)  # type: ignore[arg-type]
    assert torch.equal(x.grad, ref_x.grad)  # type: ignore[arg-type]


def test_decorated_forward_method() -> None:
    class Decorated(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)

        @ef.compile(backend="eager")
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x).sigmoid()

    a, b = Decorated(), Decorated()
    x = torch.randn(2, 3)
    assert torch.equal(a(x), torch.sigmoid(a.fc(x)))
    assert torch.equal(b(x), torch.sigmoid(b.fc(x)))
    assert a.forward.stats.compiles == 1 and a.forward is a.forward
    with torch.no_grad():
        a.fc.weight.mul_(2)  # a live parameter, not a constant
    assert torch.equal(a(x), torch.sigmoid(a.fc(x)))
    assert a.forward.stats.cache_hits == 1
    assert Decorated.forward.__name__ == "forward"


def test_module_passed_as_an_argument_has_live_parameters() -> None:
    def loss_fn(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return model(x).square().mean()

    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)).train()
    p = ef.capture(loss_fn, model, torch.randn(5, 4))
    specs = p.signature.inputs["forward"]
    assert [s.target for s in specs] == [
        "model.0.weight", "model.0.bias", "model.1.weight", "model.1.bias",
        "model.1.running_mean", "model.1.running_var", "model.1.num_batches_tracked", None]
    assert specs[0] == InputSpec("p_model_0_weight", InputKind.PARAMETER, "model.0.weight")
    assert [n.op for n in p.forward.nodes].count("constant") == 0

    compiled = ef.compile(loss_fn, backend="eager")
    reference = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)).train()
    reference.load_state_dict(model.state_dict())
    for _ in range(2):
        x = torch.randn(5, 4)
        assert torch.equal(compiled(model, x), loss_fn(reference, x))
        with torch.no_grad():  # an update that replaces nothing: seen through live inputs
            model[0].weight.add_(0.5)
            reference[0].weight.add_(0.5)
    for a, b in zip(model.state_dict().values(), reference.state_dict().values()):
        assert torch.equal(a, b)
    assert compiled.stats.compiles == 1 and compiled.stats.cache_hits == 1
    other = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)).train()
    compiled(other, torch.randn(5, 4))  # another module object: guarded by identity
    assert compiled.stats.compiles == 2
    failure = compiled._last_failure(_call_parts(model, torch.randn(5, 4)))
    # NOTE: the identity guard is the strict capture's ``id`` kind (one guard model):
    # shown with the object's type and address, and the object seen on failure
    assert failure is not None and failure.guard.describe().startswith("model is <Sequential at 0x")
    assert str(failure).endswith(f"(got <Sequential at 0x{id(model):x}>)")


def _call_parts(*args):  # type: ignore[no-untyped-def]
    from ember.frontend.pytree import flatten
    from ember.frontend.trace_guards import TraceCall

    leaves, spec = flatten((args, {}))
    return TraceCall(leaves, [], spec)


def test_parameters_read_from_a_closure_are_lifted_inputs() -> None:
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh())
    reference = nn.Sequential(nn.Linear(4, 3), nn.Tanh())
    reference.load_state_dict(model.state_dict())
    offset = torch.randn(3)  # does not require grad: stays a constant

    def train_step(x: torch.Tensor) -> torch.Tensor:
        return (model(x) + offset).square().sum()

    p = ef.capture(train_step, torch.randn(2, 4))
    lifted = [s for s in p.signature.inputs["forward"] if s.kind is InputKind.PARAMETER]
    assert [s.name for s in lifted] == ["p_lifted", "p_lifted_1"]
    assert [n.op for n in p.forward.nodes].count("constant") == 1

    compiled = ef.compile(train_step, backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(2):
        x = torch.randn(2, 4)
        loss = compiled(x)
        ref_loss = (reference(x) + offset).square().sum()
        assert torch.equal(loss, ref_loss)
        for o, lo in ((opt, loss), (ref_opt, ref_loss)):
            o.zero_grad()
            lo.backward()
            o.step()
        for a, b in zip(model.parameters(), reference.parameters()):
            assert torch.equal(a, b)
    assert compiled.stats.compiles == 1
