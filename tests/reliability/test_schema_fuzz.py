"""Schema fuzzing: schemathesis against a live gunicorn server, every operation of /agp/openapi.json.

The server runs with authentication on; every request carries a valid token holding every
scope. Four checks: ``not_a_server_error``, ``status_code_conformance``,
``content_type_conformance``, ``response_schema_conformance``. Before the run the database
holds one record of every kind (a complete governance world, a context, an evidence
bundle, an escalation, a revocation, a client ledger event, an executed operation with its
receipt), and every path parameter points at one of them, so GETs by id answer 200 and
their bodies are checked against the schema too.

``AGP_FUZZ_MAX_EXAMPLES`` (default 10 here, CI's bound) sets the examples per operation and
``AGP_FUZZ_SEED`` the seed (default fixed, so CI is reproducible; ``random`` for a new one).
The full run (docs/security.md):

    AGP_FUZZ_MAX_EXAMPLES=100 AGP_FUZZ_SEED=random scripts/test tests/reliability/test_schema_fuzz.py
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from core.services import checkpoint_create
from execution.models import Receipt
from execution.runner import operation_execute
from tests.agp_client.server import LiveServer, database_url
from tests.conftest import AUTH_SECRET
from tests.execution.factories import make_full_world
from tests.execution.worker import submit_async, test_broker  # noqa: F401

pytestmark = pytest.mark.system

CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"
MAX_EXAMPLES = int(os.environ.get("AGP_FUZZ_MAX_EXAMPLES", "10"))
SEED = os.environ.get("AGP_FUZZ_SEED", "20261121")
SCHEMATHESIS = Path(sys.executable).with_name("st")


def seed_records(api) -> dict[str, str]:
    """One record of every kind, committed; the path parameter values that name them."""
    world = make_full_world()
    created = {}

    def post(path, body, **headers):
        response = api.post(path, body, format="json", **headers)
        assert response.status_code in (200, 201, 202), (path, response.content)
        return response.json()

    # Execute first: the escalation below blocks the task from then on.
    accepted = submit_async(api, world.envelope_request())
    assert operation_execute(operation_id=accepted["operation_id"], executor="fuzz-seed") == "succeeded"
    sha = "0" * 64
    created["context_id"] = post("/agp/contexts", {"task_id": world.task.task_id, "data": {"k": "v"}})["context_id"]
    created["bundle_id"] = post("/agp/evidence-bundles", {
        "task_id": world.task.task_id,
        "items": [{"uri": "https://evidence.example/1", "sha256": sha, "kind": "log"}]})["bundle_id"]
    created["escalation_id"] = post("/agp/escalations", {
        "task_id": world.task.task_id, "raised_by": "watcher", "reason": "fuzz seed"})["escalation_id"]
    # Revoke a skill of another agent, so the world itself stays valid for execution.
    spare = make_full_world()
    created["revocation_id"] = post("/agp/revocations", {
        "target_type": "skill", "target_id": spare.skill.skill_id, "reason": "fuzz seed"})["revocation_id"]
    created["sequence"] = str(post("/agp/ledger-events", {
        "event_type": "client.fuzz", "resource_type": "Seed", "resource_id": "seed-1"})["sequence"])
    created["freeze_id"] = post("/agp/freezes", {
        "target_type": "agent", "target_id": "fuzz-frozen-agent", "reason": "fuzz seed"})["freeze_id"]
    created["backtest_id"] = post("/agp/backtests", {
        "policy_set_id": world.policy_set.policy_set_id})["result_url"].rsplit("/", 1)[1]

    created["client_id"] = post("/agp/clients", {
        "kind": "human", "subject": "fuzz@example.com", "tenants": [world.task.root_principal]})["client_id"]
    created["tree_size"] = str(checkpoint_create().tree_size)


    receipt = Receipt.objects.get(operation_id=accepted["operation_id"])
    created.update(
        operation_id=accepted["operation_id"], action_id=receipt.action_id, receipt_id=receipt.receipt_id,
        task_id=world.task.task_id, delegation_id=world.delegation.delegation_id,
        capability_id=world.capability.capability_id, skill_id=world.skill.skill_id,
        binding_id=world.binding.binding_id, policy_set_id=world.policy_set.policy_set_id,
        evaluation_id=world.evaluation.evaluation_id, decision_id=world.decision.decision_id,
        assessment_id=world.assessment.assessment_id, approval_id=world.approval.approval_id,
        session_id=world.session.session_id)
    return created


# Body fields that reference other records: mostly a seeded one, so generated bodies get
# past "no such record" and into the services; sometimes whatever the generator makes.
BODY_REFERENCES = {"task_id": "task_id", "decision_ref": "decision_id", "policy_set_id": "policy_set_id",
                   "context_ref": "context_id", "policy_evaluation_ref": "evaluation_id",
                   "capability_token_ref": "capability_id", "policy_decision_ref": "evaluation_id"}


def schemathesis_config(path: Path, ids: dict[str, str]) -> Path:
    lines = ["[parameters]"] + [f'"path.{name}" = {json.dumps(value)}' for name, value in sorted(ids.items())]
    lines += [f'"body.{field}" = {{ dictionary = "{field}", probability = 0.8 }}' for field in sorted(BODY_REFERENCES)]
    for field, name in sorted(BODY_REFERENCES.items()):
        lines += ["", f"[dictionaries.{field}]", f"values = [{json.dumps(ids[name])}]"]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def fuzz_server(transactional_db, authed_api, make_token, test_broker, tmp_path, django_db_blocker):  # noqa: F811
    """A seeded live server with authentication on, and an all-scopes token for it."""
    from core.models import LedgerHead

    LedgerHead.objects.get_or_create(pk=1)
    ids = seed_records(authed_api)
    token = make_token(client_id="fuzz-client")
    server = LiveServer.start(tmp_path / "server", db_url=database_url(tmp_path), env={
        "AGP_AUTH_SECRET": AUTH_SECRET, "AGP_BROKER_URL": test_broker.url, "AGP_CELERY_QUEUE": test_broker.queue})
    yield server, token, ids
    server.stop()


def test_it_fuzzes_every_operation_from_the_schema_without_a_failure(fuzz_server, tmp_path):
    server, token, ids = fuzz_server
    schema = requests.get(f"{server.url}/agp/openapi.json", timeout=10).json()
    operations = sum(1 for item in schema["paths"].values() for method in item
                     if method in ("get", "post", "put", "patch", "delete"))
    # Every path parameter names a seeded record (a new route needs a seed here), and back.
    parameters = set(re.findall(r"{(\w+)}", " ".join(schema["paths"])))
    assert parameters == set(ids), f"unseeded: {parameters - set(ids)}; unused: {set(ids) - parameters}"

    config = schemathesis_config(tmp_path / "schemathesis.toml", ids)
    command = [str(SCHEMATHESIS), "--config-file", str(config), "--no-color", "run",
               f"{server.url}/agp/openapi.json", "--header", f"Authorization: Bearer {token}",
               "--checks", CHECKS, "--phases", "examples,coverage,fuzzing",
               # One worker: Python 3.11.7's parser, which Hypothesis calls to describe its
               # strategies, fails now and then ("AST constructor recursion depth mismatch")
               # when two threads parse at once.
               "--max-examples", str(MAX_EXAMPLES), "--workers", "1", "--request-timeout", "20",
               "--generation-database", "none", "--output-truncate", "true"]
    if SEED != "random":
        command += ["--seed", SEED]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    report = output[-15000:] + "\n--- server log ---\n" + server.log()

    assert result.returncode == 0, report
    assert re.search(rf"Selected: {operations}/{operations}\b", output), report
    assert re.search(rf"Tested: {operations}\b", output), report
    generated = re.search(r"(\d+) generated", output)
    assert generated and int(generated.group(1)) >= operations * 5, report
    assert "found" not in output.split("Test cases:")[-1].splitlines()[1], report
    print(output.rpartition("SUMMARY")[2][-2500:])  # operations, phases, warnings, cases, seed
    seed = re.search(r"Seed: (\d+)", output)
    print(f"schemathesis: {operations} operations, {generated.group(1)} cases, seed {seed.group(1) if seed else SEED}")
