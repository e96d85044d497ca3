"""Fixtures of the authentication tests."""

import pytest
from django.core.cache import cache


@pytest.fixture(autouse=True)
def _fresh_throttle_counters():
    """The token endpoint counts failures in the cache, which outlives each test's transaction."""
    cache.clear()
    yield
    cache.clear()

