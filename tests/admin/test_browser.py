"""End to end in a real headless browser: an auditor logs in, verifies the ledger, reads an envelope.

Debian's chromium and chromedriver (scripts/install-browser) driven by Selenium, against
pytest-django's live server. Nothing is downloaded: both binaries are named explicitly and
Selenium Manager is told to stay offline. Screenshots go to ``AGP_TEST_ARTIFACTS`` (default
test-artifacts/, gitignored): CI keeps them as build artefacts, and docs/operations.md shows
the auditor's pages from them.
"""

import os
from pathlib import Path

import pytest
from django.conf import settings
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from core.admin_base import change_url
from core.auditors import auditor_create
from core.models import LedgerEvent, LedgerHead
from decision.models import Escalation
from registry.models import Freeze

from .world import make_admin_world

pytestmark = pytest.mark.system

CHROMIUM = os.environ.get("AGP_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("AGP_CHROMEDRIVER", "/usr/bin/chromedriver")
ARTIFACTS = Path(os.environ.get("AGP_TEST_ARTIFACTS") or Path(settings.BASE_DIR) / "test-artifacts")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1600,1400")
PASSWORD = "browser-auditor-password"


@pytest.fixture
def browser(tmp_path, monkeypatch):
    for binary in (CHROMIUM, CHROMEDRIVER):
        if not os.access(binary, os.X_OK):
            pytest.fail(f"{binary} is missing: run scripts/install-browser (Debian's chromium and chromium-driver)")
    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager must never fetch a browser or a driver
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def screenshot(driver, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    assert driver.save_screenshot(str(path)), f"could not save {path}"
    return path


@pytest.fixture
def live_db(transactional_db):
    """The live server's database, with the row migration 0001 creates that the ledger needs:
    a transactional test that ran before (in any order, on any xdist worker) flushed it. Not
    ``serialized_rollback``, whose reload collides with the content types such a flush
    re-creates under other ids."""
    LedgerHead.objects.get_or_create(pk=1)


def test_it_lets_an_auditor_verify_the_ledger_and_read_an_envelope_without_any_write_control(
        browser, live_db, live_server):
    world = make_admin_world()
    auditor_create(username="browser-auditor", password=PASSWORD)
    wait = WebDriverWait(browser, 15)

    browser.get(f"{live_server.url}/admin/login/?next=/admin/")
    browser.find_element(By.NAME, "username").send_keys("browser-auditor")
    browser.find_element(By.NAME, "password").send_keys(PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait.until(expected_conditions.presence_of_element_located((By.ID, "user-tools")))
    assert "Site administration" in browser.title
    dashboard_link = browser.find_element(By.LINK_TEXT, "Dashboard")
    assert dashboard_link.size["height"] < 2 * dashboard_link.size["width"]  # on one line, not a letter a line

    browser.get(f"{live_server.url}/admin/core/ledgerevent/")
    button, note = browser.find_element(By.ID, "verify-ledger"), browser.find_element(By.ID, "newest-checkpoint")
    assert button.location["y"] + button.size["height"] <= note.location["y"]  # the button covers no text

    rows = browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    assert len(rows) == LedgerEvent.objects.count()
    browser.find_element(By.ID, "verify-ledger").click()
    success = wait.until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, ".messagelist .success")))
    assert f"Ledger verified: all {LedgerEvent.objects.count()} events chain correctly" in success.text
    assert not browser.find_elements(By.CSS_SELECTOR, ".addlink")
    assert not browser.find_elements(By.CSS_SELECTOR, "select[name=action]")
    ledger_png = screenshot(browser, "admin-ledger-verified.png")

    browser.get(f"{live_server.url}{change_url(world.envelope)}")
    content = wait.until(expected_conditions.presence_of_element_located((By.ID, "content-main"))).text
    for text in (world.operation.operation_id, world.receipt.receipt_id, world.world.decision.decision_id,
                 world.world.evaluation.evaluation_id, world.world.approval.approval_id):
        assert text in content
    envelope_png = screenshot(browser, "admin-envelope.png")
    # The page's own controls: no submit of any kind (the header's log-out form is not the record's).
    assert not browser.find_elements(By.CSS_SELECTOR, "#content-main input[type=submit], #content-main button")
    assert not browser.find_elements(By.CSS_SELECTOR, "input[name=_save], input[name=_continue], .deletelink")
    assert browser.find_element(By.CSS_SELECTOR, ".submit-row .closelink").text.strip() == "Close"

    event = world.events[1]
    browser.get(f"{live_server.url}{change_url(event)}")
    content = browser.find_element(By.ID, "content-main").text
    assert event.prev_hash in content and event.hash in content
    assert "intact: extends its predecessor" in content
    event_png = screenshot(browser, "admin-ledger-event.png")

    browser.get(f"{live_server.url}{change_url(world.grandchild)}")
    chain = browser.find_elements(By.CSS_SELECTOR, ".field-chain_to_root table tbody tr")
    assert [row.find_elements(By.TAG_NAME, "td")[1].text for row in chain] == [
        world.world.root_delegation.delegation_id, world.world.delegation.delegation_id,
        f"{world.grandchild.delegation_id} (this delegation)"]
    delegation_png = screenshot(browser, "admin-delegation-chain.png")

    for png in (ledger_png, envelope_png, event_png, delegation_png):
        assert png.stat().st_size > 10_000


def test_it_shows_an_auditor_the_dashboard_an_actions_timeline_and_a_delegation_tree(browser, live_db, live_server):
    from rest_framework.test import APIClient

    from core.services import checkpoint_create

    from .audit_world import make_audited_action

    api = APIClient()
    audited = make_audited_action(api, root_principal="acme-corp", agent_id="billing-agent", tool_id="payments",
                                  operation="refund")
    world = audited.world
    # More traffic for today's bar: validations and refusals of several kinds.
    for _ in range(3):
        assert api.post("/agp/action-envelopes", world.envelope_request(), format="json").status_code == 200
    for refused in ({"policy_decision_ref": "pev_unknown"}, {"decision_ref": "dec_unknown"}):
        assert api.post("/agp/action-envelopes", world.envelope_request(**refused), format="json").status_code == 422
    checkpoint = checkpoint_create()  # as the worker signs one every few seconds
    auditor_create(username="browser-auditor-2", password=PASSWORD)
    wait = WebDriverWait(browser, 15)
    browser.get(f"{live_server.url}/admin/login/?next=/admin/")
    browser.find_element(By.NAME, "username").send_keys("browser-auditor-2")
    browser.find_element(By.NAME, "password").send_keys(PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait.until(expected_conditions.presence_of_element_located((By.ID, "auditor-views")))

    browser.find_element(By.LINK_TEXT, "Dashboard").click()
    integrity = wait.until(expected_conditions.presence_of_element_located((By.ID, "ledger-integrity"))).text
    assert f"Verified: all {LedgerEvent.objects.count()} events chain correctly" in integrity
    assert f"Newest signed checkpoint: {checkpoint.tree_size} events" in integrity
    assert "Verified up to it" in integrity
    bars = browser.find_elements(By.CSS_SELECTOR, "#envelopes-per-day svg rect.bar")
    today = {bar.get_attribute("class").split("bar-")[1]: int(bar.get_attribute("data-count")) for bar in bars}
    assert today == {"executed": 1, "rejected": 3, "validated": 3}
    refusals = [row.text for row in browser.find_elements(By.CSS_SELECTOR, "#refusing-checks tbody tr")]
    # The unknown evaluation fails the decision check too: the decision was made on another one.
    assert {"capability submission 1", "policy_evaluation submission 1", "decision submission 2"} <= set(refusals)
    assert "succeeded 1" in browser.find_element(By.ID, "operations-by-status").text
    dashboard_png = screenshot(browser, "auditor-dashboard.png")

    browser.get(f"{live_server.url}{change_url(audited.envelope)}")
    browser.find_element(By.PARTIAL_LINK_TEXT, "Everything about this action").click()
    rows = wait.until(expected_conditions.presence_of_all_elements_located(
        (By.CSS_SELECTOR, "#timeline tbody tr.timeline-entry")))
    kinds = [row.get_attribute("data-kind") for row in rows]
    assert kinds[0] == "task" and kinds[-1] == "callback"
    for kind in ("policy evaluation", "decision", "impact assessment", "approval", "action envelope", "operation",
                 "payment", "receipt"):
        assert kind in kinds
    signed = {row.get_attribute("data-kind"): row.find_elements(By.TAG_NAME, "td")[5].text for row in rows}
    for kind in ("impact assessment", "approval", "action envelope", "receipt"):
        assert signed[kind] == "✓ signature verified", (kind, signed[kind])
    assert signed["operation"] == "not signed"
    timeline_png = screenshot(browser, "auditor-timeline.png")

    browser.get(f"{live_server.url}{change_url(world.delegation)}")
    browser.find_element(By.PARTIAL_LINK_TEXT, "The whole delegation tree").click()
    links = wait.until(expected_conditions.presence_of_all_elements_located((By.CSS_SELECTOR, "svg.agp-tree a.link")))
    assert len(links) == 4
    revoked = browser.find_elements(By.CSS_SELECTOR, "svg.agp-tree a.revoked")
    assert [link.get_attribute("data-delegation") for link in revoked] == [audited.revoked.delegation_id]
    tree_text = browser.find_element(By.CSS_SELECTOR, "svg.agp-tree").text
    assert "REVOKED" in tree_text and "spend ≤ 500 USD · hops left 2" in tree_text
    tree_png = screenshot(browser, "auditor-delegation-tree.png")

    for png in (dashboard_png, timeline_png, tree_png):
        assert png.stat().st_size > 10_000


def sign_in(browser, live_server, username: str) -> None:
    browser.get(f"{live_server.url}/admin/login/?next=/admin/")
    browser.find_element(By.NAME, "username").send_keys(username)
    browser.find_element(By.NAME, "password").send_keys(PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    WebDriverWait(browser, 15).until(expected_conditions.presence_of_element_located((By.ID, "user-tools")))


def test_an_auditor_bound_to_a_tenant_sees_only_its_records_in_the_admin_and_the_dashboard(
        browser, live_db, live_server):
    ours, theirs = make_admin_world(), make_admin_world()
    auditor_create(username="tenant-auditor", password=PASSWORD, tenants=[ours.world.root_principal])
    sign_in(browser, live_server, "tenant-auditor")

    browser.get(f"{live_server.url}/admin/registry/task/")
    listed = browser.find_element(By.ID, "result_list").text
    browser.get(f"{live_server.url}/admin/audit/")
    escalations = browser.find_element(By.ID, "open-escalations").text
    freezes = browser.find_element(By.ID, "active-freezes").text
    tenant_png = screenshot(browser, "admin-tenant-auditor-dashboard.png")
    browser.get(f"{live_server.url}/admin/audit/actions/{theirs.envelope.action_id}/timeline/")
    other_timeline = browser.find_element(By.TAG_NAME, "body").text

    assert ours.world.task.task_id in listed and theirs.world.task.task_id not in listed
    ours_escalation, theirs_escalation = ours.rows[Escalation], theirs.rows[Escalation]
    assert ours_escalation.escalation_id in escalations and theirs_escalation.escalation_id not in escalations
    assert ours.rows[Freeze].target_id in freezes and theirs.rows[Freeze].target_id not in freezes
    assert "AGP_NOT_FOUND" in other_timeline
    assert tenant_png.stat().st_size > 10_000


DOC_IMAGES = Path(settings.BASE_DIR) / "docs" / "images"


def screenshot_for_docs(driver, name: str) -> Path:
    """A screenshot kept as a build artefact; with AGP_UPDATE_DOC_IMAGES=1 also the picture
    docs/operations.md shows (a plain run leaves the checkout's files alone)."""
    path = screenshot(driver, name)
    if os.environ.get("AGP_UPDATE_DOC_IMAGES") == "1":
        (DOC_IMAGES / name).write_bytes(path.read_bytes())
    return path



def sign_in_as(browser, live_server, username: str, password: str) -> None:
    browser.delete_all_cookies()
    browser.get(f"{live_server.url}/admin/login/?next=/admin/approvals/")
    browser.find_element(By.NAME, "username").send_keys(username)
    browser.find_element(By.NAME, "password").send_keys(password)
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    WebDriverWait(browser, 15).until(expected_conditions.presence_of_element_located((By.ID, "user-tools")))


def decide(browser, live_server, decision_id: str, reason: str, button: str = "approve") -> str:
    """Open the decision's page in the inbox, give a reason, press the button; the success message."""
    browser.get(f"{live_server.url}/admin/approvals/{decision_id}/")
    browser.find_element(By.NAME, "reason").send_keys(reason)
    browser.find_element(By.ID, button).click()
    return WebDriverWait(browser, 15).until(expected_conditions.presence_of_element_located(
        (By.CSS_SELECTOR, ".messagelist .success"))).text


# The page's own CSRF token (the header's log-out form carries one): a hand-made POST of the verdict form.
POST_ANYWAY = """
const [url, done] = [arguments[0], arguments[arguments.length - 1]];
const body = new FormData();
body.append("csrfmiddlewaretoken", document.querySelector("input[name=csrfmiddlewaretoken]").value);
body.append("verdict", "approve");
body.append("reason", "I asked for it and I approve it");
fetch(url, {method: "POST", body, credentials: "same-origin"}).then(response => done(response.status));
"""


def test_people_approve_in_the_inbox_and_the_call_that_waited_clears(browser, live_db, live_server, auth_settings):
    from decision.models import Approval, PolicyEvaluation
    from decision.services import decision_create

    from .inbox_world import PASSWORD as PERSON_PASSWORD
    from .inbox_world import make_inbox_world, make_person

    inbox = make_inbox_world()
    tenant = inbox.world.root_principal
    one = inbox.waiting(limit=60)  # the policy asks for one person
    two = inbox.waiting(limit=80)  # and for two above 70
    make_person("ann", [tenant])
    make_person("bob", [tenant])
    make_person("zed", ["another-tenant"])
    _, carol = make_person("carol", [tenant])
    PolicyEvaluation.objects.filter(pk=inbox.world.evaluation.pk).update(require_approval=True)
    own = decision_create(actor=carol.client_id, task_id=inbox.world.task.task_id, agent_id=inbox.world.agent_id,
                          outcome="approve", policy_evaluation_ref=inbox.world.evaluation.evaluation_id).decision_id
    wait = WebDriverWait(browser, 15)

    sign_in_as(browser, live_server, "ann", PERSON_PASSWORD)
    waiting = {box.get_attribute("data-decision"): box.text
               for box in browser.find_elements(By.CSS_SELECTOR, ".agp-waiting")}
    assert set(waiting) == {one, two, own}
    assert "crm:update" in waiting[one] and '{"limit":60}' in waiting[one]
    assert "the policy evaluation requires approval" in waiting[one] and "0 of 1" in waiting[one]
    assert "the policy evaluation requires 2 approvals" in waiting[two] and "0 of 2" in waiting[two]
    assert f"→ {inbox.world.agent_id}" in waiting[two] and "500 USD" in waiting[two]
    inbox_png = screenshot_for_docs(browser, "approvals-inbox.png")

    browser.get(f"{live_server.url}/admin/approvals/{one}/")
    browser.find_element(By.NAME, "reason").send_keys("refund checked against the order")
    decision_png = screenshot_for_docs(browser, "approvals-decision.png")
    browser.find_element(By.ID, "approve").click()
    message = wait.until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, ".messagelist .success")))
    assert message.text == f"You approved decision {one} as ann@people.example."
    assert "1 of 1" in browser.find_element(By.ID, "content-main").text
    assert not browser.find_elements(By.ID, "approve")  # nobody approves twice
    cleared = inbox.ask(limit=60)
    assert cleared.status_code == 200, cleared.content  # the envelope that waited clears

    decide(browser, live_server, two, "first of two")
    assert inbox.ask(limit=80).status_code == 422  # one of two is not enough
    sign_in_as(browser, live_server, "bob", PERSON_PASSWORD)
    assert decide(browser, live_server, two, "second of two") == f"You approved decision {two} as bob@people.example."
    verdicts = [row.text for row in browser.find_elements(By.CSS_SELECTOR, "#verdicts tr.verdict")]
    assert len(verdicts) == 2 and "ann@people.example" in verdicts[0] and "bob@people.example" in verdicts[1]
    assert inbox.ask(limit=80).status_code == 200  # M of N: two people did

    sign_in_as(browser, live_server, "carol", PERSON_PASSWORD)
    browser.get(f"{live_server.url}/admin/approvals/{own}/")
    assert not browser.find_elements(By.ID, "approve")
    assert "You asked for this action" in browser.find_element(By.ID, "may-not").text
    assert browser.execute_async_script(POST_ANYWAY, f"/admin/approvals/{own}/") == 403
    assert not Approval.objects.filter(decision_id=own).exists()

    sign_in_as(browser, live_server, "zed", PERSON_PASSWORD)
    assert one not in browser.page_source and own not in browser.page_source
    browser.get(f"{live_server.url}/admin/approvals/{own}/")
    assert "AGP_NOT_FOUND" in browser.find_element(By.TAG_NAME, "body").text
    for png in (inbox_png, decision_png):
        assert png.stat().st_size > 10_000
