"""ember.runtime: the IR, its serialization, the reference interpreter, the pipeline
that composes the stages, and the loader of compiled artifacts."""

from ember.runtime.compiled.artifact import load_artifact  # noqa: E402,F401
