"""Hypothesis profiles: "ci" (the default in make test: fixed examples, so CI is reproducible)
and "deep" (HYPOTHESIS_PROFILE=deep: 5,000 random examples, for exploration)."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "deep", max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
