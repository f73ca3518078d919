"""The bench harness's library: compiler adapters, accuracy (docs/architecture.md), timing, cold
compile measurement, per-model rows, the report, and the accuracy table.

``tools/bench.py`` and ``tools/demo.py`` are thin command lines over it; the integration
tests import it after ``integration_tests/conftest.py`` puts ``tools/`` on ``sys.path``.
"""
