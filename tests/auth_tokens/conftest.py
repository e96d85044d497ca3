"""Fixtures of the authentication tests."""

import pytest
from django.core.cache import caches


@pytest.fixture(autouse=True)
def _fresh_throttle_counters():
    """The token endpoint counts failures in the caches, which outlive each test's transaction."""
    for alias in ("default", "local"):
        caches[alias].clear()
    yield
    for alias in ("default", "local"):
        caches[alias].clear()

