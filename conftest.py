"""Root conftest: hypothesis profiles for the suite (pytester is enabled by ``-p pytester`` in
pyproject.toml, not here, because pytest also loads this file when the plugin collects the gate
file of an editable install from another folder)."""

import os

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # the plugin in an editable install, run without the test extras
    settings = None

if settings is not None:
    settings.register_profile("ci", max_examples=60, derandomize=True, deadline=None,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.register_profile("thorough", max_examples=2000, deadline=None,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
