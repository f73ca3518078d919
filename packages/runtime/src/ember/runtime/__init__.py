"""ember.runtime: the IR, its serialization, the reference interpreter, the pipeline
that composes the stages, and the loader of compiled artifacts."""

from ember.runtime.compiled.artifact import load_artifact  # noqa: E402,F401
from ember.runtime.cudagraphs_pool import (  # CUDA graphs: a training step begins
    mark_step_begin as cudagraph_mark_step_begin,
)
from ember.runtime.export_import import import_exported as import_exported  # noqa: E402
from ember.runtime.fx_import import import_fx as import_fx  # noqa: E402

__all__ = ["cudagraph_mark_step_begin", "import_exported", "import_fx", "load_artifact"]
