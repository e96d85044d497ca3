"""Query counts kept in a baseline file, ``tests/query_counts.json``, per database vendor.

``with query_counts.pinned("name"):`` fails when the block runs another number of queries than
the baseline's ``name`` for this database; ``pytest --update-query-counts`` records what the run
measures instead (review the file's diff like any other change). ``query_counts.expected(name)``
reads a count, for a test that states a relation to it ("one query more than a plain check").
"""

import contextlib
import fcntl
import json
from pathlib import Path

from django.db import connection
from django.test.utils import CaptureQueriesContext

BASELINE = Path(__file__).with_name("query_counts.json")


def read_baseline() -> dict[str, dict[str, int]]:
    return json.loads(BASELINE.read_text()) if BASELINE.exists() else {}


def record(name: str, vendor: str, count: int) -> None:
    """Write one count into the baseline (several pytest processes may write at once)."""
    with open(BASELINE.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        counts = read_baseline()
        counts.setdefault(name, {})[vendor] = count
        BASELINE.write_text(json.dumps(counts, indent=1, sort_keys=True) + "\n")


class QueryCounts:
    def __init__(self, *, update: bool):
        self.update = update

    def expected(self, name: str) -> int:
        counts = read_baseline().get(name, {})
        if connection.vendor not in counts:
            raise AssertionError(f"no baseline for {name!r} on {connection.vendor}: run pytest --update-query-counts")
        return counts[connection.vendor]

    @contextlib.contextmanager
    def pinned(self, name: str):
        with CaptureQueriesContext(connection) as captured:
            yield
        count = len(captured.captured_queries)
        if self.update:
            record(name, connection.vendor, count)
            return
        expected = self.expected(name)
        queries = "\n".join(query["sql"] for query in captured.captured_queries)
        assert count == expected, (f"{name}: {count} queries, the baseline (tests/query_counts.json) says {expected}; "
                                   f"pytest --update-query-counts records an intended change\n{queries}")
