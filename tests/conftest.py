"""Test-wide settings: hypothesis runs derandomized under CI (the `ci` profile, chosen when the
CI environment variable is set, as .ci/run's environment has it), so a failure there replays;
`HYPOTHESIS_PROFILE` picks a profile explicitly; the shipped tuning database is off."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else
                                     "dev"))

# the tests' deliberately faulty kernel template (crashes, hangs, wrong results), by name for
# the tuner's worker processes too (engines/halide/templates.EXTRA_ENV)
os.environ["WOODPECKER_TEMPLATES"] = "faulty=tests.tune.faulty_template"

# Tests compile from the logs they write: the shipped tuning database stays out unless a test
# names one (tests/tune/test_database.py), so a plan depends on its test's log alone.
os.environ["WOODPECKER_DATABASE"] = "off"
