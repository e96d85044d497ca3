"""The engine's time and memory limits: a runaway ruleset is stopped, answered allow: false, and
holds up nothing else (core/engine/sandbox.py). The HTTP version, against gunicorn, is in
tests/reliability/test_hostile_clients.py."""

import threading
import time

import pytest

from core import engine
from core.engine import sandbox
from tests.decision.factories import PAYMENTS, ruleset_hash

# 4 * 10^8 multiplications and comparisons over two small ranges: minutes of CPU, almost no memory.
SPINNING = """package agp.spin
import rego.v1
allow if {
    some i in numbers.range(1, 20000)
    some j in numbers.range(1, 20000)
    i * j == -1
}
"""
# Materialises a 50-million-element array: gigabytes.
HOARDING = """package agp.hoard
import rego.v1
allow if count([x | some x in numbers.range(1, 50000000)]) > 0
"""
ORDINARY_INPUT = {"action_class": "read", "amount": 1, "limits": {"auto_approve_max": 100, "hard_max": 1000},
                  "merchant": "shop"}


def evaluate(ruleset, input=None):
    return engine.evaluate(ruleset=ruleset, ruleset_hash=ruleset_hash(ruleset), input=input or {})


@pytest.fixture(autouse=True)
def _limits(settings):
    settings.AGP_OPA_URL = None
    settings.AGP_POLICY_TIMEOUT_MS = 300
    settings.AGP_POLICY_MEMORY_MB = 256


def test_it_stops_a_ruleset_that_runs_past_the_time_limit():
    evaluate(PAYMENTS, ORDINARY_INPUT)  # an engine process is up: its start-up is not what is timed
    started = time.monotonic()
    result = evaluate(SPINNING)
    elapsed = time.monotonic() - started

    assert result.as_result() == {"allow": False, "require_approval": False, "approvals_required": 0, "reasons": [
        "policy evaluation stopped: it exceeded the time limit of 300 ms (AGP_POLICY_TIMEOUT_MS)"]}
    assert 0.3 <= elapsed < 2.0


def test_it_stops_a_ruleset_that_allocates_past_the_memory_limit_and_logs_the_engine_s_last_words(
        settings, caplog):
    settings.AGP_POLICY_TIMEOUT_MS = 30000  # the memory limit, not the clock, must stop it

    result = evaluate(HOARDING)

    assert result.allow is False
    assert result.reasons == ("policy evaluation stopped: it exceeded the memory limit of 256 MB "
                              "(AGP_POLICY_MEMORY_MB)",)
    # What the dying engine wrote to its stderr is a log record, not raw text in the process's stream.
    assert any(record.name == "core.engine.sandbox" and "memory allocation of" in record.getMessage()
               for record in caplog.records)


def test_it_answers_the_next_evaluation_normally_after_stopping_one():
    assert evaluate(SPINNING).allow is False
    assert evaluate(HOARDING).allow is False

    assert evaluate(PAYMENTS, ORDINARY_INPUT).as_result() == {"allow": True, "require_approval": False, "approvals_required": 0,
                                                             "reasons": []}


def test_other_threads_run_while_a_ruleset_is_stopped(settings):
    settings.AGP_POLICY_TIMEOUT_MS = 1500
    evaluate(PAYMENTS, ORDINARY_INPUT)
    done = threading.Event()
    results = []
    thread = threading.Thread(target=lambda: (results.append(evaluate(SPINNING)), done.set()))
    thread.start()
    ticks = 0
    while not done.is_set():  # pure Python: it runs only while the waiting thread holds no lock
        ticks += 1
        time.sleep(0.001)
    thread.join()

    assert results[0].allow is False
    assert ticks > 100  # about one a millisecond for 1.5 s (fewer on a loaded machine); stalled, a handful


def test_it_keeps_at_most_the_configured_number_of_engine_processes(settings):
    settings.AGP_POLICY_PROCESSES = 2
    sandbox.pool.close()
    barrier = threading.Barrier(6)
    results = []

    def run():
        barrier.wait()
        results.append(evaluate(PAYMENTS, ORDINARY_INPUT).allow)

    threads = [threading.Thread(target=run) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert results == [True] * 6
    assert sandbox.pool.size == 2


def test_it_logs_at_most_twenty_lines_a_ruleset_prints_per_evaluation_and_counts_the_rest(caplog):
    printing = """package agp.printing
import rego.v1

pytestmark = pytest.mark.unit
allow if { some i in numbers.range(1, 15); print("line", i); false }
"""
    sandbox.pool.close()  # a fresh engine process: compiling (with its warm-up) and evaluating are one request

    evaluate(printing)

    lines = [record.getMessage().split(": ", 1)[1] for record in caplog.records if record.name == "core.engine.sandbox"]
    assert lines == [f"line {i}" for i in range(1, 16)] + [f"line {i}" for i in range(1, 6)] + [
        "10 more lines of its output were not logged"]
