"""The hypothesis profiles of conftest.py (EXAMPLES, the one place the suite's example counts are set): the thorough
profile raises every count of the default ci profile, and HYPOTHESIS_PROFILE decides the counts the tests read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).parent.parent
SUITES = ("fuzz", "convert", "fix")  # besides each profile's own count


def test_thorough_raises_every_count():
    assert settings.get_profile("thorough").max_examples > settings.get_profile("ci").max_examples
    for suite in SUITES:
        assert settings.get_profile(f"thorough.{suite}").max_examples > settings.get_profile(f"ci.{suite}").max_examples


@pytest.mark.parametrize("profile", [None, "ci", "thorough"])
def test_the_profile_named_in_the_environment_sets_the_counts_the_tests_read(profile):
    """In a fresh interpreter: the loaded profile's count, and each suite's as its tests read it (helpers.FUZZ, the
    suite profiles), are the table's for HYPOTHESIS_PROFILE (ci when unset)."""
    code = ("import conftest, helpers; from hypothesis import settings; "
            f"print(settings.default.max_examples, helpers.FUZZ.max_examples, "
            f"*(settings.get_profile(s).max_examples for s in {SUITES!r}))")
    env = {k: v for k, v in os.environ.items() if k not in ("HYPOTHESIS_PROFILE", "PYTHONPATH")}
    if profile is not None:
        env["HYPOTHESIS_PROFILE"] = profile
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    name = profile or "ci"
    expected = [settings.get_profile(name).max_examples,
                *(settings.get_profile(f"{name}.{s}").max_examples for s in ("fuzz", *SUITES))]
    assert [int(n) for n in proc.stdout.split()] == expected
