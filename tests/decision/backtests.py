"""Backtests as the tests ask for and run them: through the API, then slice after slice as the worker would."""

from core.models import OutboxMessage
from decision.backtests import backtest_run
from execution.selectors import action_ids_citing

URL = "/agp/backtests"


# The candidate: denies above 100 (the recorded set, RULESET, above 1000), asks for approval
# above 50, and cannot evaluate a zero divisor.
CANDIDATE = """package agp.candidate

import rego.v1

default allow := false

default require_approval := false

allow if input.action_class in {"read", "write", "transact"}

require_approval if input.amount > 50

deny contains "amount over 100" if input.amount > 100

deny contains "weekend" if input.weekend == true

deny contains "bad ratio" if 100 / input.divisor < 0
"""


def start(api, **body):
    response = api.post(URL, body, format="json")
    assert response.status_code == 202, response.content
    return response.json()


def run(backtest_id):
    """Run a backtest to its end, slice after slice, as the worker would with each slice's message."""
    outcome = backtest_run(backtest_id=backtest_id, executor="test/pid-1", action_ids_of=action_ids_citing)
    while outcome == "continued":
        [(_, attempt, slice_number)] = [message.args for message in OutboxMessage.objects.order_by("-pk")[:1]]
        outcome = backtest_run(backtest_id=backtest_id, executor="test/pid-1", action_ids_of=action_ids_citing,
                               attempt=attempt, slice_number=slice_number)
    return outcome


def backtest_of(operation):
    return operation["result_url"].rsplit("/", 1)[1]
