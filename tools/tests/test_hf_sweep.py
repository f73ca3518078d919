"""tools/hf_sweep.py: a row per model and mode, values compared with eager."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

import hf_sweep  # noqa: E402


def test_a_model_that_compiles_whole_is_ok_in_both_modes() -> None:
    for mode in ("infer", "train"):
        row = hf_sweep.sweep_one("causal", "gpt_neo", mode, "aot_eager", 1e-3, 1e-4)
        assert (row.status, row.graphs, row.breaks, row.compiles) == ("ok", 1, 0, 1), row


def test_a_config_that_does_not_run_eagerly_is_the_sweeps_limitation() -> None:
    # LongCat-Flash's attention splits disagree with the shrunk sizes
    row = hf_sweep.sweep_one("causal", "longcat_flash", "infer", "aot_eager", 1e-3, 1e-4)
    assert row.status == "eager-error" and row.graphs is None, row


def test_a_changed_value_is_reported_as_a_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    real = hf_sweep._run

    def off_by_one_when_compiled(model, call, kw, mode):  # type: ignore[no-untyped-def]
        out = real(model, call, kw, mode)
        if call is not model:  # the compiled calls
            out.logits = out.logits + 1
        return out

    monkeypatch.setattr(hf_sweep, "_run", off_by_one_when_compiled)
    row = hf_sweep.sweep_one("causal", "gpt_neo", "infer", "aot_eager", 1e-3, 1e-4)
    assert row.status == "mismatch" and row.detail.startswith("logits differs"), row


def test_an_unknown_model_type_is_refused() -> None:
    with pytest.raises(SystemExit):
        hf_sweep.main(["--family", "causal", "--models", "not_a_model"])


def test_a_break_is_reported_with_its_reason_and_line() -> None:
    # FSMT's encoder asks `if not padding_mask.any():` (a data-dependent branch)
    row = hf_sweep.sweep_one("seq2seq", "fsmt", "infer", "aot_eager", 1e-3, 1e-4)
    assert row.status == "breaks" and row.breaks, row
    assert row.detail.startswith("data-dependent branch") and "padding_mask.any()" in row.detail


def test_nested_configs_are_shrunk_too() -> None:
    config = hf_sweep._config("fuyu", shrink=True)  # its text model is a nested config
    assert (config.text_config.hidden_size, config.text_config.num_hidden_layers) == (32, 2)
