"""The Ember model zoo: small, self-contained models the bench harness, the demo and the
integration tests run.

Every model is a factory ``make(device, dtype, suite) -> (module, example_inputs)``:

- ``suite="test"``: tiny inputs, for the integration tests (milliseconds in eager);
- ``suite="quick"``: CPU-sized, the whole quick suite runs in minutes on 2 cores;
- ``suite="full"``: sized for an H200 (kernels that take milliseconds).

Modules come back in ``eval()`` mode with deterministic weights (seeded), and inputs are
fresh random values (never zeros). Models that need an optional package (``transformers``,
``torchvision``) are only registered when it imports.

Import: ``integration_tests/conftest.py`` puts ``tools/`` on ``sys.path``; from a script in
``tools/`` it is importable as ``zoo``.
"""

from zoo.registry import SUITES, ModelSpec, get, names, register

# Importing the model modules registers their factories; the import order is the order of
# the suites' tables (simple models first), so it is kept as written.
# isort: off
from zoo import basic as _basic  # noqa: F401
from zoo import convnet as _convnet  # noqa: F401
from zoo import transformer as _transformer  # noqa: F401
from zoo import hf as _hf  # noqa: F401
from zoo import vision as _vision  # noqa: F401
# isort: on

__all__ = ["SUITES", "ModelSpec", "get", "names", "register"]
