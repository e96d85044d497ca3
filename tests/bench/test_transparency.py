"""bench/transparency.py's own bookkeeping: rounds merged, the table's verdicts (no service involved)."""

import pytest

from bench.transparency import merged, table

pytestmark = pytest.mark.unit


def _run(latencies):
    return {"requests": len(latencies), "p50": sorted(latencies)[len(latencies) // 2], "latencies": sorted(latencies)}


def results(proof_p50: float, after_per_second: float) -> dict:
    def appends(per_second):
        return {"per_second": per_second, "p50": 2.0, "runs": [], "checkpoint_loops": [],
                "checkpoint_busy_share": 0.02}

    return {"baseline": {"p50": 2.0, "p95": 4.0}, "proof": {"p50": proof_p50, "p95": 9.0},
            "consistency": {"p50": 3.0, "p95": 6.0},
            "first_checkpoint": {"seconds": 25.0, "tree_size": 1_000_000},
            "checkpoint_10k": {"median_seconds": 0.2}, "verify_tree": {"seconds": 8.0, "tree_size": 1_030_000},
            "appends": {"before": appends(1000.0), "after": appends(after_per_second),
                        "every_second": appends(950.0)}}


def test_rounds_merge_into_percentiles_over_every_request():
    run = merged([_run([1.0, 2.0, 3.0]), _run([4.0, 5.0, 6.0])])
    assert run["requests"] == 6
    assert run["p50"] == 3.5
    assert run["rounds"] == [2.0, 5.0]


def test_the_table_says_whether_each_budget_is_met():
    met = table(results(proof_p50=5.9, after_per_second=905.0))
    missed = table(results(proof_p50=6.1, after_per_second=890.0))

    assert "p50 <= 3x baseline: 2.95x met" in met and ">= 90% of before: 90% met" in met
    assert "p50 <= 3x baseline: 3.05x MISSED" in missed and ">= 90% of before: 89% MISSED" in missed
    assert [line.split(" | ")[1].strip() for line in met.splitlines() if line.startswith("checkpoint after")] == [
        "0.200 s"]
