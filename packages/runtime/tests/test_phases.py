"""The stage profile (ember.runtime.phases): phase nesting, counts, one table per
compile, and a compile that runs inside a phase (the strict capture's case)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from ember.runtime import phases
from ember.runtime.config import patch
from ember.runtime.phases import (
    CompileProfile,
    PhaseTiming,
    compile_profile,
    count,
    last_compile_profile,
    phase,
    timed,
)


@pytest.fixture(autouse=True)
def _no_pending() -> Iterator[None]:
    phases.discard_pending()
    yield
    phases.discard_pending()


def test_phases_nest_in_entry_order_and_counts_add_up() -> None:
    with compile_profile() as profile:
        with phase("aot"):
            with phase("functionalize"):
                pass
            with phase("partition"):
                pass
        with phase("inductor"):
            for _ in range(2):
                with phase("lowering"):
                    count("cpp builds")
    assert list(profile.phases) == ["aot", "aot/functionalize", "aot/partition",
                                    "inductor", "inductor/lowering"]
    assert profile.phases["inductor/lowering"].calls == 2
    assert profile.counts == {"cpp builds": 2}
    assert last_compile_profile() is profile
    assert profile.total_s >= profile.seconds("aot") + profile.seconds("inductor")


def test_capture_before_the_compile_is_adopted_by_it() -> None:
    timed("capture")(time.sleep)(0.01)
    with compile_profile() as profile, phase("aot"):
        pass
    assert list(profile.phases) == ["capture", "aot"]
    assert profile.seconds("capture") >= 0.01
    assert profile.total_s >= profile.seconds("capture")
    with compile_profile() as second:  # the capture belongs to the first compile only
        pass
    assert "capture" not in second.phases


def test_a_compile_inside_a_phase_finishes_with_it_and_is_not_counted_in_it() -> None:
    """The strict capture compiles each graph while capturing: the capture's time is
    its own work only, and its table comes out once the capture is done."""
    seen: list[CompileProfile | None] = []
    with phase("capture"):
        with compile_profile() as profile, phase("aot"):
            time.sleep(0.05)
        seen.append(last_compile_profile())
    assert seen[0] is not profile  # not done while the capture goes on
    assert last_compile_profile() is profile
    assert list(profile.phases) == ["capture", "aot"]  # aot is not capture/aot
    assert profile.seconds("capture") < 0.05 <= profile.seconds("aot")
    assert profile.total_s >= profile.seconds("aot") + profile.seconds("capture")


def test_a_nested_compile_adds_to_the_outer_profile() -> None:
    with compile_profile() as outer, compile_profile() as inner:
        count("deduped kernels", 3)
    assert inner is outer and outer.counts == {"deduped kernels": 3}


def test_the_table_lists_phases_indented_with_their_share() -> None:
    profile = CompileProfile(
        phases={"aot": PhaseTiming("aot", 0.5, 1),
                "aot/autograd": PhaseTiming("aot/autograd", 0.25, 1),
                "inductor": PhaseTiming("inductor", 1.5, 1),
                "inductor/kernel builds": PhaseTiming("inductor/kernel builds", 1.0, 1)},
        counts={"cpp builds": 2, "build threads": 2}, total_s=2.0)
    assert profile.format() == "\n".join([
        "compile profile: 2.000 s",
        "  phase                               seconds  share calls",
        "  aot                                   0.500  25.0%     1",
        "    autograd                            0.250  12.5%     1",
        "  inductor                              1.500  75.0%     1",
        "    kernel builds                       1.000  50.0%     1",
        "  counts: cpp builds 2, build threads 2",
    ])
    assert profile.to_json() == {
        "total_s": 2.0, "counts": {"cpp builds": 2, "build threads": 2},
        "phases": {"aot": 0.5, "aot/autograd": 0.25, "inductor": 1.5,
                   "inductor/kernel builds": 1.0}}


def test_the_table_is_printed_once_per_compile_under_stages(
        capsys: pytest.CaptureFixture[str]) -> None:
    with patch(logs=frozenset({"stages"})), compile_profile(), phase("aot"):
        pass
    err = capsys.readouterr().err
    assert len(re.findall(r"compile profile: \d+\.\d{3} s", err)) == 1
    assert re.search(r"\n  aot +\d+\.\d{3} ", err)
    with compile_profile():
        pass
    assert capsys.readouterr().err == ""  # the topic is off


def test_counts_outside_a_compile_belong_to_none() -> None:
    """A kernel library loaded while a program runs (a cache hit) is no compile's."""
    count("cpp cache hits")
    with compile_profile() as profile:
        count("cpp builds")
    count("cpp cache hits")
    assert profile.counts == {"cpp builds": 1}
