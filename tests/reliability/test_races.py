"""Many clients racing over HTTP on a live gunicorn server (PostgreSQL), with a real worker.

Each test releases its client threads together (a barrier) against the same record and
checks the invariant afterwards in the database: exactly one winner of a policy-set
transition, no active delegation under a parent revoked mid-race, and a commerce session
whose executed payments (run by a real Celery worker) never exceed its limit. Every answer
is a success or a 4xx refusal: a 5xx fails the test. Races in process (row locks at the
service layer) are in tests/registry/test_concurrency.py, tests/execution/test_budgets.py
and tests/platform/test_idempotency.py (fifty parallel requests with one Idempotency-Key).
"""

from decimal import Decimal

import pytest
import requests
from cryptography.hazmat.primitives import serialization

from agp_project.signing import get_signer
from core.ledger_verification import ledger_verify
from core.models import LedgerEvent
from decision.models import CommerceSession
from execution.models import Operation, Payment, Receipt
from registry.models import Delegation, PolicySet
from tests.agp_client.server import LiveServer, database_url
from tests.concurrency import run_together
from tests.conftest import AUTH_SECRET
from tests.execution.factories import make_full_world
from tests.execution.worker import module_worker, test_broker, wait_for  # noqa: F401
from tests.registry import factories as f

pytestmark = pytest.mark.postgres
CLIENTS = 16


@pytest.fixture(scope="module")
def race_server(test_broker, django_db_setup, django_db_blocker, tmp_path_factory):  # noqa: F811
    """One live server for the module, publishing to the test broker, signing with the test key."""
    signer = get_signer()
    pem = signer.private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()).decode()
    workdir = tmp_path_factory.mktemp("race-server")
    with django_db_blocker.unblock():
        db_url = database_url(workdir)
    server = LiveServer.start(workdir, db_url=db_url, env={
        "AGP_AUTH_SECRET": AUTH_SECRET, "AGP_BROKER_URL": test_broker.url, "AGP_CELERY_QUEUE": test_broker.queue,
        "AGP_SIGNING_KEY": pem, "AGP_ISSUER": signer.issuer})
    yield server
    server.stop()


@pytest.fixture
def clients(transactional_db, make_token, race_server):
    """``CLIENTS`` sessions, each with a token of its own client (all scopes)."""
    from core.models import LedgerHead

    LedgerHead.objects.get_or_create(pk=1)
    sessions = []
    for index in range(CLIENTS):
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {make_token(client_id=f'racer-{index}')}"
        sessions.append(session)
    yield sessions
    for session in sessions:
        session.close()


def statuses(responses) -> list[int]:
    assert all(isinstance(r, requests.Response) for r in responses), responses
    assert all(r.status_code < 500 for r in responses), [(r.status_code, r.text) for r in responses]
    return sorted(r.status_code for r in responses)


def test_it_leaves_one_winner_when_many_clients_race_on_one_policy_set_transition(race_server, clients):
    for _ in range(3):
        policy_set = f.policy_set()
        url = f"{race_server.url}/agp/policy-sets/{policy_set.policy_set_id}"
        responses = run_together([lambda s=s: s.patch(url, json={"status": "deprecated"}, timeout=60) for s in clients])

        assert statuses(responses) == [200] + [409] * (CLIENTS - 1)
        assert {r.json()["error"]["code"] for r in responses if r.status_code == 409} == {"AGP_INVALID_TRANSITION"}
        assert PolicySet.objects.get(pk=policy_set.pk).status == "deprecated"
        assert LedgerEvent.objects.filter(resource_id=policy_set.policy_set_id,
                                          event_type="policy_set.deprecated").count() == 1
    assert ledger_verify().verified


def test_it_leaves_nothing_active_under_a_parent_revoked_while_many_clients_delegate(race_server, clients):
    for _ in range(3):
        parent = f.root_delegation(hops=3)
        url = f"{race_server.url}/agp/delegations"

        def delegate(session):
            return session.post(url, timeout=60, json={
                "root_principal": parent.root_principal, "delegator_agent": parent.delegate_agent,
                "delegate_agent": f.unique("agent"), "authority_scope": list(parent.authority_scope)})

        def revoke(session):
            return session.post(f"{race_server.url}/agp/revocations", timeout=60, json={
                "target_type": "delegation", "target_id": parent.delegation_id, "reason": "race"})

        responses = run_together([lambda s=s: delegate(s) for s in clients[:-1]] + [lambda: revoke(clients[-1])])

        codes = statuses(responses)
        assert responses[-1].status_code == 201, responses[-1].text
        created = [r.json()["delegation_id"] for r in responses[:-1] if r.status_code == 201]
        assert len(created) + codes.count(400) + codes.count(409) + codes.count(422) == CLIENTS - 1, codes
        children = Delegation.objects.filter(parent_id=parent.delegation_id)
        assert sorted(children.values_list("delegation_id", flat=True)) == sorted(created)
        assert not children.filter(status="active").exists()
        assert Delegation.objects.get(pk=parent.pk).status == "revoked"
        assert len(set(children.values_list("path", flat=True))) == len(created)
        print(f"delegation race: {len(created)} created before the revocation, {CLIENTS - 1 - len(created)} refused")
    assert ledger_verify().verified


def test_it_never_spends_past_a_session_limit_when_many_clients_race_on_it(race_server, clients,
                                                                          module_worker):  # noqa: F811
    world = make_full_world()  # session limit 200; each action pays 50
    url = f"{race_server.url}/agp/action-envelopes"
    bodies = [world.envelope_request() for _ in clients]
    responses = run_together([lambda s=s, b=b: s.post(url, json=b, headers={"Prefer": "respond-async"}, timeout=60)
                      for s, b in zip(clients, bodies)])

    codes = statuses(responses)
    assert codes == [202] * 4 + [422] * (CLIENTS - 4), codes
    refused = [r.json()["error"] for r in responses if r.status_code == 422]
    assert all([c["check"] for c in e["details"]["failed_checks"]] == ["commerce"] for e in refused), refused
    accepted = [r.json()["operation_id"] for r in responses if r.status_code == 202]

    def all_ended():
        return Operation.objects.filter(operation_id__in=accepted, status="succeeded").count() == len(accepted)

    wait_for(all_ended, timeout=60, message="the worker to execute every accepted operation", worker=module_worker)
    session = CommerceSession.objects.get(pk=world.session.pk)
    committed = Payment.objects.filter(session_id=session.session_id, status="committed")
    assert (session.spent_amount, session.reserved_amount) == (Decimal("200"), Decimal("0"))
    assert sum(p.amount for p in committed) == Decimal("200") <= session.amount_limit
    assert committed.count() == Receipt.objects.filter(operation_id__in=accepted).count() == 4
    assert ledger_verify().verified
