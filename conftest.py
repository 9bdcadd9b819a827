"""Root conftest: hypothesis profiles for the suite (pytester is enabled by ``-p pytester`` in
pyproject.toml, not here, because pytest also loads this file when the plugin collects the gate
file of an editable install from another folder)."""

import os

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # the plugin in an editable install, run without the test extras
    settings = None

# Examples per test, by profile and suite: the one place the suite's hypothesis counts are set. ``default`` is the
# profile's own max_examples (every @given test that names no suite). Each other suite is registered as the profile
# ``PROFILE.SUITE`` (PROFILE's settings, the suite's count) and, for the profile loaded, as ``SUITE``: its tests take
# ``settings.get_profile(SUITE)`` as their settings' parent.
#   fuzz     tests/helpers.py FUZZ (test_fuzz.py, test_torch_bin.py): cheap examples, the most of them
#   convert  fuzz_converter on our own converter (test_convert.py): each example converts and forward-verifies
#   fix      test_fix.py's drawn drafters: each example runs fix until it converges
#   every    test_fix.py's aux-id verdicts under every reading: each example gates 5 times and fixes once
EXAMPLES = {
    "ci": {"default": 60, "fuzz": 100, "convert": 8, "fix": 25, "every": 40},
    "thorough": {"default": 2000, "fuzz": 10_000, "convert": 100, "fix": 500, "every": 400},
}

if settings is not None:
    for name, counts in EXAMPLES.items():
        settings.register_profile(name, max_examples=counts["default"], derandomize=name == "ci", deadline=None,
                                  suppress_health_check=[HealthCheck.too_slow])
        for suite, n in counts.items():
            if suite != "default":
                settings.register_profile(f"{name}.{suite}", settings.get_profile(name), max_examples=n)
    PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
    settings.load_profile(PROFILE)
    for suite in EXAMPLES[PROFILE].keys() - {"default"}:
        settings.register_profile(suite, settings.get_profile(f"{PROFILE}.{suite}"))
