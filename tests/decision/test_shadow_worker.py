"""Shadow policy sets with a real Celery worker (docs/reference/governance.md), on PostgreSQL and Redis: a live
evaluation is answered without waiting for its shadows, and the worker records them after,
from the background queue, a shadow that spins stopped at the engine's time limit."""

import statistics
import time

import pytest

from core.models import LedgerEvent
from decision.models import PolicyEvaluation
from tests.decision.test_shadow_policy_sets import SAME, SPINNING, evaluate
from tests.execution.factories import make_policy_set, make_world
from tests.execution.worker import test_broker, wait_for, worker_db, worker_factory  # noqa: F401

pytestmark = pytest.mark.postgres

ROUNDS = 11


def test_a_live_evaluation_with_a_slow_shadow_answers_as_fast_and_the_worker_records_the_shadow(
        api, worker_factory, worker_db):  # noqa: F811
    # Each shadow evaluation runs to the engine's limit on the worker: 150 ms, ten times a live evaluation
    # here (a live evaluation that waited for it would take as long), and short enough not to crowd
    # out this process on a small machine.
    worker = worker_factory.start(AGP_POLICY_TIMEOUT_MS="150")
    world = make_world()
    twin = make_policy_set(ruleset=SAME)  # the same rules, without a shadow
    make_policy_set(policy_set_id="ps-spinning", ruleset=SPINNING, shadow_of=world.policy_set)
    # Started before the timing: this process's engine process, its broker connection, the worker's engine process.
    evaluate(api, world, policy_set_id=twin.policy_set_id)
    first = evaluate(api, world)["evaluation_id"]
    wait_for(lambda: LedgerEvent.objects.filter(resource_id=first, event_type="policy_evaluation.shadowed").exists(),
             timeout=30, message="the worker to record a first shadow", worker=worker)

    def timed(policy_set_id):
        started = time.monotonic()
        body = evaluate(api, world, policy_set_id=policy_set_id, amount=500)
        return time.monotonic() - started, body

    # In turns, so both see the same load (the worker spinning on the shadows meanwhile included).
    alone, shadowed = [], []
    for _ in range(ROUNDS):
        alone.append(timed(twin.policy_set_id)[0])
        shadowed.append(timed(world.policy_set.policy_set_id))

    with_shadow = [seconds for seconds, _ in shadowed]
    assert statistics.median(with_shadow) < 2 * statistics.median(alone), (alone, with_shadow)
    evaluation_ids = [body["evaluation_id"] for _, body in shadowed]
    assert all(body["shadow_results"] == [{"policy_set_id": "ps-spinning", "allow": None, "matches": None}]
               for _, body in shadowed)
    # The worker spends the shadow's budget (the engine's limit) on each, after the answers.
    wait_for(lambda: LedgerEvent.objects.filter(resource_id__in=evaluation_ids,
                                                event_type="policy_evaluation.shadowed").count() == ROUNDS,
             timeout=30, message="the worker to record the shadows", worker=worker)
    assert [row.shadow_results for row in PolicyEvaluation.objects.filter(evaluation_id__in=evaluation_ids)] == [
        {"ps-spinning": {"allow": False, "matches": False}}] * ROUNDS
    assert "agp.evaluate_shadows" in worker.log_path.read_text()
    print(f"an evaluation took {statistics.median(alone) * 1000:.0f} ms alone and "
          f"{statistics.median(with_shadow) * 1000:.0f} ms with a shadow that spins (medians of {ROUNDS})")
