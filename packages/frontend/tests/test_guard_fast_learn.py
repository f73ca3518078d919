"""When the guards' fast path is written: at the first passing call by default, at the
second for a capture-cache hit (``learn_after=2``: a process's first call is checked in
full, as a call that captured is)."""

from __future__ import annotations

from ember.frontend.guards import compile_matcher
from strict_helpers import LinearStack as Stack
from strict_helpers import captured_call


def test_the_fast_path_is_written_at_the_call_asked_for() -> None:
    guards, inputs, call = captured_call(Stack(24))
    for learn_after in (1, 2):
        match = compile_matcher(guards, inputs, learn_after=learn_after)
        full_text = match.__ember_source__
        written = []
        for _ in range(3):
            assert match(*call) is not None
            written.append(match.__ember_source__ != full_text)
        assert written == [n >= learn_after for n in (1, 2, 3)], (learn_after, written)
        assert match.__ember_stamps__  # type: ignore[attr-defined]
