import os

import pytest
from hypothesis import HealthCheck, settings

# Property tests: a thorough profile for CI, a quick one for local iteration
# (HYPOTHESIS_PROFILE=dev).
settings.register_profile("ci", max_examples=300, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=50, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(config, items):
    if os.geteuid() != 0:
        skip = pytest.mark.skip(reason="needs root to create network namespaces")
        for item in items:
            if "netns" in item.keywords:
                item.add_marker(skip)
