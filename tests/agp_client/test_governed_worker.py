"""A plain function governed by ``agp.govern`` end to end with a real Celery worker
(tests/execution/worker.py): the ``external`` connector, the worker hands the action back, the
function runs, its receipt is posted with the output's hash. The REST one call's execution is
tests/execution/test_one_call.py's, in process."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from agp_client import AGPClient, PrerequisiteFailedError
from agp_client.governed import output_hash
from agp_project.signing import get_signer
from tests.agp_client.conftest import pem_of
from tests.agp_client.server import LiveServer, database_url
from tests.execution.worker import module_worker, test_broker  # noqa: F401 - fixtures

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("live_db")]

OPERATOR, OPERATOR_SECRET = "operator", "operator-secret-0123456789"
RULESET = """package refunds

import rego.v1

default allow := false

allow if input.action.parameters.amount <= 100
"""
TOMORROW = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def live_db(transactional_db):
    from core.models import LedgerHead

    LedgerHead.objects.get_or_create(pk=1)


@pytest.fixture(scope="module")
def agp_url(django_db_setup, django_db_blocker, tmp_path_factory, test_broker, module_worker):  # noqa: F811
    workdir = tmp_path_factory.mktemp("governed")
    with django_db_blocker.unblock():
        db_url = database_url(workdir)
    server = LiveServer.start(workdir, db_url=db_url, env={
        "AGP_AUTH_SECRET": "governed-test-secret-0123456789abcdef", "AGP_CLIENT_ID": OPERATOR,
        "AGP_CLIENT_SECRET": OPERATOR_SECRET, "AGP_SIGNING_KEY": pem_of(get_signer().private_key),
        "AGP_BROKER_URL": test_broker.url, "AGP_CELERY_QUEUE": test_broker.queue})
    yield server.url
    server.stop()


@pytest.fixture
def agent(agp_url):
    """An agent client of a new tenant, delegated payments:* and crm:*, with a task governed by RULESET;
    ``payments`` is executed in process (external), ``crm`` by the worker (noop)."""
    run = uuid.uuid4().hex[:8]
    tenant, agent_id = f"acme-{run}", f"agent-{run}"
    operator = AGPClient(agp_url, OPERATOR, OPERATOR_SECRET)
    made = operator.clients.create(kind="agent", agent_id=agent_id, tenants=[tenant])
    api = AGPClient(agp_url, made["client_id"], made["client_secret"], verify_signatures=True)
    delegation = operator.delegations.create(root_principal=tenant, delegator_agent=tenant, delegate_agent=agent_id,
                                             authority_scope=["payments:*", "crm:*"], expires_at=TOMORROW)
    for tool_id, connector, operation in (("payments", "external", "refund"), ("crm", "noop", "update")):
        operator.capabilities.create(agent_id=agent_id, delegation_id=delegation["delegation_id"], tool_id=tool_id,
                                     operations=[operation], expires_at=TOMORROW)
        operator.skills.create(agent_id=agent_id, name=tool_id, version="1", tool_id=tool_id, connector=connector)
    policy_set = operator.policy_sets.create(name=f"refunds-{run}", version="1", ruleset=RULESET,
                                             root_principal=tenant)
    api.task = api.tasks.create(root_principal=tenant, title="Refunds", risk_level="low", action_class="write",
                                policy_set_id=policy_set["policy_set_id"])
    api.operator = operator
    return api


def test_a_governed_function_runs_once_cleared_and_its_receipt_holds_the_outputs_hash(agent):
    ran = []

    @agent.govern(task_id=agent.task["task_id"], tool_id="payments")
    def refund(amount: int, currency: str = "EUR") -> dict:
        ran.append(amount)
        return {"refunded": amount, "currency": currency}

    assert refund(25) == {"refunded": 25, "currency": "EUR"}
    assert ran == [25]
    [envelope] = list(agent.action_envelopes.list(task_id=agent.task["task_id"], tool_id="payments"))
    assert (envelope["operation"], envelope["parameters"]) == ("refund", {"amount": 25, "currency": "EUR"})
    receipt = next(agent.receipts.list(action_id=envelope["action_id"]))
    assert receipt["status"] == "succeeded"
    assert receipt["result"] == {"output_hash": output_hash({"refunded": 25, "currency": "EUR"})}

    with pytest.raises(PrerequisiteFailedError) as refused:
        refund(500)
    assert ran == [25]  # never run
    assert "policy_evaluation" in {item["check"] for item in refused.value.failed_checks}
