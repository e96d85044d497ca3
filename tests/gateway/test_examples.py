"""The examples of one governed call run as written, each in its own process, against a live
gunicorn server with authentication on and a real Celery worker: an agent using the official
MCP client through the gateway (``examples/mcp/agent_through_agp.py``, with the example MCP
server ``examples/mcp/crm_server.py``), and an in-process function governed by the decorator
(``examples/governed/refund.py``)."""

import subprocess
import sys
from pathlib import Path

import pytest

from agp_project.signing import get_signer
from tests.agp_client.conftest import pem_of
from tests.agp_client.server import LiveServer, database_url
from tests.execution.test_mcp_example import ExampleServer
from tests.execution.worker import module_worker, test_broker  # noqa: F401 - fixtures
from tests.mcp_server import free_port

pytestmark = [pytest.mark.system, pytest.mark.postgres, pytest.mark.usefixtures("live_db")]

REPO = Path(__file__).resolve().parents[2]
ADMIN = "admin:change-me-0123456789"


@pytest.fixture
def live_db(transactional_db):
    from core.models import LedgerHead

    LedgerHead.objects.get_or_create(pk=1)


@pytest.fixture(scope="module")
def agp_url(django_db_setup, django_db_blocker, tmp_path_factory, test_broker, module_worker):  # noqa: F811
    workdir = tmp_path_factory.mktemp("examples")
    with django_db_blocker.unblock():
        db_url = database_url(workdir)
    client_id, secret = ADMIN.split(":")
    server = LiveServer.start(workdir, db_url=db_url, threads=4, env={
        "AGP_ALLOW_PRIVATE_URLS": "1", "AGP_AUTH_SECRET": "examples-test-secret-0123456789abcdef",
        "AGP_CLIENT_ID": client_id, "AGP_CLIENT_SECRET": secret, "AGP_SIGNING_KEY": pem_of(get_signer().private_key),
        "AGP_BROKER_URL": test_broker.url, "AGP_CELERY_QUEUE": test_broker.queue})
    yield server.url
    server.stop()


def run(script: str, *arguments: str) -> str:
    done = subprocess.run([sys.executable, str(REPO / "examples" / script), *arguments], cwd=REPO, text=True,
                          capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_agent_example_calls_its_tool_through_the_gateway_with_the_official_mcp_client(agp_url, tmp_path):
    upstream = ExampleServer(workdir=tmp_path, port=free_port(),
                             description="Look up a customer by id and return the customer's name.").start()
    try:
        output = run("mcp/agent_through_agp.py", "--agp", agp_url, "--mcp", upstream.url, "--admin", ADMIN)
    finally:
        upstream.stop()

    assert "tools: ['crm.lookup_customer']" in output
    assert "result: customer c-42: Ada Lovelace" in output
    assert "signature valid: True" in output and 'decided by: "policy"' in output
    assert upstream.log.read_text().count("lookup_customer('c-42') called") == 1


def test_the_decorator_example_runs_the_function_once_cleared_and_never_when_refused(agp_url):
    output = run("governed/refund.py", "--agp", agp_url, "--admin", ADMIN)

    assert output.splitlines() == ["refunding 25 on o-42", "returned: {'order_id': 'o-42', 'refunded': 25}",
                                   "refused: decision, policy_evaluation"]
