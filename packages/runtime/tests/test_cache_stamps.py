"""What the caches' keys know of installed code: an editable install (a checkout) by
its sources, an installed distribution by its version alone (its files change only
with it, and a process's first call must not stat them all)."""

from __future__ import annotations

from importlib import metadata

from ember.runtime.cache.key import distribution_stamp, is_editable


def test_an_installed_distribution_is_its_version_and_a_checkout_its_sources() -> None:
    assert not is_editable("safetensors") and not is_editable("no-such-distribution")
    version = metadata.version("safetensors")
    assert distribution_stamp("safetensors", "safetensors") == f"safetensors {version}"
    assert is_editable("ember-runtime")  # the repository's development install
    stamp = distribution_stamp("ember-runtime", "ember.runtime")
    assert stamp.startswith(f"ember-runtime {metadata.version('ember-runtime')} stamp ")
