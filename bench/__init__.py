"""Benchmarks of the governance hot paths: ``python -m bench`` (see README, docs/performance.md)."""
