"""Test support shared by the packages' tests and ``integration_tests`` (not installed:
``pyproject.toml`` puts ``testing/`` on pytest's path).

- :mod:`ember_testing.mutation_corpus`: in-place ops and aliasing cases, and the check
  that a compiled function matches eager on outputs, inputs after the call and aliasing.
- :mod:`ember_testing.training`: small models and one optimizer step compared with eager.
- :mod:`ember_testing.compare`: what both use to compare with eager.
- :mod:`ember_testing.copies`: a counter of `aten::copy_` calls (in-place paths).

Only torch and the standard library are imported here, so any package's tests can use it
whatever else is installed.
"""
