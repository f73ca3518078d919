"""Triton binaries launched through torch's C++ launcher (``triton_static``, on by
default: ``config.torch_launcher``), without a GPU: the launch plan read from binaries
built for ``sm_90`` here (and checked against their PTX), the refusals, and the launch handed to a
stand-in for torch's launcher."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from ember.runtime.compiled import triton_binary, triton_static
from ember.runtime.compiled.triton_kernel import TritonKernelSpec
from ember.runtime.compiled.triton_static import NotStatic, launch_function, launch_plan
from ember.runtime.config import config, patch

pytest.importorskip("triton")

SOURCE = (
    "import triton\nimport triton.language as tl\n\n@triton.jit\n"
    "def add_static(x, y, n, m, BLOCK: tl.constexpr):\n"
    "    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
    "    tl.store(y + i, tl.load(x + i, mask=i < n) + m, mask=i < n)\n"
)
SPEC = TritonKernelSpec("add_static", SOURCE, {"x": "*fp32", "y": "*fp32", "n": "i32", "m": "i64"},
                        {"BLOCK": 128})
RUNTIME = ("x", "y", "n", "m")


@pytest.fixture(scope="module")
def built() -> Any:
    from ember.runtime.compiled.triton_aot import build_for_target

    return build_for_target(SPEC)


def _scratch_fields(compiled: Any) -> int:
    return sum(hasattr(compiled.metadata, f)
               for f in ("global_scratch_size", "profile_scratch_size"))


def test_the_plan_of_a_built_binary_matches_its_ptx(built: Any) -> None:
    plan = launch_plan(built, RUNTIME)  # raises NotStatic if the PTX disagreed
    scratch = _scratch_fields(built)
    assert (plan.name, plan.kept, plan.kinds, plan.scratch) == ("add_static", (0, 1, 2, 3),
                                                                "OOil", scratch)
    assert plan.arg_kinds == "OOil" + "O" * scratch
    assert (plan.warps, plan.shared) == (built.metadata.num_warps, built.metadata.shared)


def _fake(signature: dict[str, str], constants: dict[Any, Any], params: int | None,
          **metadata: Any) -> Any:
    md = dict(name="k", num_warps=4, shared=0, num_ctas=1, global_scratch_size=0,
              profile_scratch_size=0)
    md.update(metadata)
    asm: dict[str, Any] = {"cubin": b"\x7fELF fake"}
    if params is not None:
        asm["ptx"] = ".entry k(" + ",".join(f".param .u64 p{i}" for i in range(params)) + ")"
    return SimpleNamespace(metadata=SimpleNamespace(**md), asm=asm,
                           src=SimpleNamespace(signature=signature, constants=constants))


SIG = {"x": "*bf16", "y": "*bf16", "n": "i32", "BLOCK": "constexpr"}


def test_an_integer_specialized_to_one_is_no_parameter() -> None:
    # Triton makes an integer argument of 1 a constant: the binary takes x, y and the
    # two scratch pointers
    plan = launch_plan(_fake({**SIG, "n": "constexpr"}, {(2,): 1, (3,): 64}, 4), RUNTIME[:3])
    assert (plan.kept, plan.arg_kinds) == ((0, 1), "OOOO")
    plan = launch_plan(_fake(SIG, {(3,): 64}, 5), RUNTIME[:3])
    assert (plan.kept, plan.arg_kinds) == ((0, 1, 2), "OOiOO")


@pytest.mark.parametrize("metadata,constants,params,why", [
    (dict(global_scratch_size=256), {}, 5, "global_scratch_size 256"),
    (dict(num_ctas=2), {}, 5, "2 CTAs"),
    (dict(launch_pdl=True), {}, 5, "launch_pdl"),
    (dict(tensordesc_meta=[{"block": 1}]), {}, 5, "tensor descriptors"),
    ({}, {}, 4, "its PTX entry takes 4 parameters, the plan 5"),
    ({}, {(0, 1): 1}, 5, "a constant inside a tuple argument"),
])
def test_what_keeps_a_binary_on_tritons_launcher(metadata: dict[str, Any],
                                                 constants: dict[Any, Any], params: int,
                                                 why: str) -> None:
    with pytest.raises(NotStatic, match=why.replace("(", r"\(")):
        launch_plan(_fake(SIG, constants, params, **metadata), RUNTIME[:3])


def test_an_argument_out_of_the_sources_order_is_refused() -> None:
    with pytest.raises(NotStatic, match="argument 'n' is not parameter 1 of the source"):
        launch_plan(_fake(SIG, {}, 5), ("x", "n", "y"))


def test_the_launch_passes_the_kept_arguments_then_null_scratch() -> None:
    calls: list[tuple[Any, ...]] = []
    plan = launch_plan(_fake({**SIG, "n": "constexpr"}, {(2,): 1}, 4), RUNTIME[:3])
    c = launch_function(plan, lambda *a: calls.append(a))
    x, y = torch.zeros(4), torch.zeros(4)
    c(8, 1, 1, 1234, 99, x, y, 1)
    assert calls == [(99, 8, 1, 1, 4, 0, "OOOO", (x, y, None, None), 1234)]


def test_static_launch_loads_a_private_copy_of_the_binary(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    loads: list[tuple[Any, ...]] = []

    def load(path: str, name: str, shared: int, device: int) -> int:
        loads.append((Path(path).read_bytes(), Path(path).parent.stat().st_mode & 0o777,
                      name, shared, device))
        return 4242

    monkeypatch.setattr(triton_static, "static_cuda_launcher",
                        lambda: (load, lambda *a: None))
    compiled = _fake(SIG, {}, 5)
    with patch(torch_launcher=False):  # EMBER_TORCH_LAUNCHER=0: Triton's launcher
        assert triton_static.static_launch(compiled, RUNTIME[:3], 0) is None
    assert config.torch_launcher  # on by default
    got = triton_static.static_launch(compiled, RUNTIME[:3], 1)
    assert got is not None and got[1] == 4242
    assert loads == [(b"\x7fELF fake", 0o700, "k", 0, 1)]
    with patch(logs="cache"):  # a binary it does not take: Triton's launcher, logged
        assert triton_static.static_launch(_fake(SIG, {}, 5, num_ctas=2), RUNTIME[:3],
                                           0) is None
    assert "k: Triton's launcher, not torch's (NotStatic: 2 CTAs)" in capsys.readouterr().err


def test_a_binary_launch_through_torchs_launcher_has_no_flags_around_its_arguments(
        built: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # the direct launch's parts (what the one-frame launch calls): torch's launch, the
    # loaded function, nothing before or after the runtime arguments; Triton's own
    # launcher is not made (that would load the binary through Triton: no GPU here)
    monkeypatch.setattr(config, "torch_launcher", True)
    launches: list[tuple[Any, ...]] = []
    monkeypatch.setattr(triton_static, "static_cuda_launcher",
                        lambda: (lambda *a: 77, lambda *a: launches.append(a)))
    from triton.runtime import driver  # no GPU driver here: a stand-in for the stream

    monkeypatch.setattr(driver, "_active", SimpleNamespace(
        get_current_stream=lambda device: 5, get_current_device=lambda: 0))
    static = triton_static.static_launch(built, RUNTIME, 0)
    run = triton_binary.binary_launch(built, (128,), static)
    parts = triton_binary.direct_parts(run)
    assert parts is not None
    c, function, before, after = parts[:4]
    assert (function, before, after) == (77, (), ())
    x = torch.zeros(4)
    c(2, 1, 1, 5, function, x, x, 3, 4)
    assert launches == [(77, 2, 1, 1, built.metadata.num_warps, built.metadata.shared,
                         "OOil" + "O" * _scratch_fields(built), (x, x, 3, 4)
                         + (None,) * _scratch_fields(built), 5)]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_on_the_gpu_torchs_launcher_computes_what_tritons_does(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # the plan's arguments reach the binary: y = x + m where i < n, through the direct
    # launch and the one-frame launch, an integer of 1 (a Triton constant) included
    from ember.runtime.compiled._torch import static_cuda_launcher
    from ember.runtime.compiled.triton_launcher import TritonLaunch

    if static_cuda_launcher() is None:
        pytest.skip("this torch has no C++ launcher of Triton binaries")
    monkeypatch.setattr(config, "torch_launcher", True)
    launcher = TritonLaunch(SPEC, (2, 1, 1))
    fast = launcher.fast_call()
    x = torch.randn(256, device="cuda")
    with patch(logs="cache"):
        for m in (3, 1, 1, 3):
            y = torch.zeros_like(x)
            (launcher if m == 3 else fast)(x, y, 200, m)
            want = torch.where(torch.arange(256, device="cuda") < 200, x + m, 0)
            torch.testing.assert_close(y, want)
            fast(x, y, 200, m)
            torch.testing.assert_close(y, want)
    assert "not torch's" not in capsys.readouterr().err
    kernel = launcher.kernels_for(x.device)[0]
    launches = {parts[0].__code__.co_filename for parts in kernel.fast.values()}
    assert launches and all(f.startswith("<ember static launch ") for f in launches), launches
