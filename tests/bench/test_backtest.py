"""bench/backtest.py's workload against the service as it is: its seed writes evaluations a
backtest can run over (PostgreSQL: the seed uses ``COPY``), with the recorded actions its
candidate judges."""

import pytest

from bench.backtest import recorded_action, recorded_input, request, seed
from decision.models import Backtest, PolicyEvaluation
from tests.decision.backtests import run

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

N = 200


def test_the_seeded_window_is_what_a_live_evaluation_would_have_recorded_and_backtests_over_it():
    seeded = seed(N)

    assert seeded["evaluations"] == N and PolicyEvaluation.objects.count() == N
    first = PolicyEvaluation.objects.get(evaluation_id="pe_bench_000000000")
    assert (first.input, first.action) == (recorded_input(0), recorded_action(0))
    # Amounts above 1000 are what the baseline denied.
    assert set(PolicyEvaluation.objects.filter(allowed=False).values_list("evaluation_id", flat=True)) == {
        f"pe_bench_{i:09d}" for i in range(N) if recorded_input(i)["amount"] > 1000}

    backtest_id = request(seeded["candidate"], seeded["baseline"])["backtest_id"]
    assert run(backtest_id) == "succeeded"

    backtest = Backtest.objects.get(backtest_id=backtest_id)
    assert backtest.evaluations == N and backtest.errors == 0
    # Evaluation 0 is a refund of 0 to a closed account: allowed then, denied by the candidate for its action.
    assert backtest.changes[0]["evaluation_id"] == "pe_bench_000000000"
    assert backtest.changes[0]["after"]["reasons"] == ["refund to a closed account"]
    assert backtest.by_reason["refund to a closed account"] >= 1
