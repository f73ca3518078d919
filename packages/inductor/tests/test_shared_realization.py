"""A value that an extern op and the graph's outputs both read is computed once: the
output asks for the layout the extern's buffer already has. A decode step's KV-cache
``torch.cat``, read by attention and returned as the new cache, was computed twice per
layer (two launches and a second copy of the whole cache per key and value)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ember.inductor.compile import compile_program
from ember.runtime.config import patch
from ember.runtime.ir import load

GPT2_DECODE = Path(__file__).parent / "data" / "gpt2_decode_step_2_layers.ember"
"""The aot stage's program of a 2-layer HF GPT-2's dynamic decode step (768 wide, batch
4, the KV cache's length a symbol per layer; random weights, none stored), saved with
``EMBER_DEBUG_DIR``."""


def test_the_kv_cache_cats_of_a_gpt2_decode_step_are_computed_once_each(
        capsys: pytest.CaptureFixture[str]) -> None:
    program = load(GPT2_DECODE)
    cats = [n.name for n in program.forward.calls() if n.target == "aten::cat.default"]
    assert len(cats) == 4  # keys and values of two layers
    with patch(logs=frozenset({"output_code"})):
        compile_program(program, {"device": "cpu"})
    code = capsys.readouterr().err
    wrapper = code.split("def call(")[1].split("\nkernel ")[0]
    from_cat = [line for line in wrapper.splitlines()
                if line.strip().startswith("# kernel") and "from cat" in line]
    # before: 6, two of them computing again a cat the attention had read
    assert len(from_cat) == 4, from_cat
    returned = wrapper.split("return [")[1].split("]")[0]
    assert returned.count("buf") == 5  # the four new caches and the logits, as computed
