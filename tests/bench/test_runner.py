"""The benchmark's own bookkeeping (bench/__main__.py, bench/load.py): no service involved."""

import socket

import pytest
import redis

from bench.__main__ import combined
from bench.load import percentiles
from bench.stack import ensure_port_free, flush_redis
from tests.redis_server import RedisServer


def _run(latencies, elapsed, statuses, started_at):
    return {"requests": len(latencies), "elapsed": elapsed, "throughput": len(latencies) / elapsed,
            **percentiles(sorted(latencies)), "statuses": statuses, "unexpected": [],
            "started_at": started_at, "latencies": sorted(latencies)}


@pytest.mark.unit
def test_rounds_combine_into_one_run_over_every_request_and_every_second():
    first = _run([float(ms) for ms in range(1, 101)], elapsed=2.0, statuses={"200": 100}, started_at=10.0)
    second = _run([float(ms) for ms in range(101, 201)], elapsed=0.5, statuses={"200": 99, "503": 1},
                  started_at=20.0)

    run = combined([first, second])

    assert run["requests"] == 200
    assert run["elapsed"] == 2.5
    assert run["throughput"] == 80.0  # 200 requests in 2.5 s, not the mean of 50/s and 200/s
    assert run["p50"] == pytest.approx(100.5)
    assert run["p99"] == pytest.approx(198.01)
    assert run["statuses"] == {"200": 199, "503": 1}
    assert run["started_at"] == 10.0
    assert run["rounds"] == [{"requests": 100, "throughput": 50.0}, {"requests": 100, "throughput": 200.0}]
    assert "latencies" not in run


@pytest.mark.unit
def test_percentiles_of_one_latency_are_that_latency():
    assert percentiles([3.5]) == {"p50": 3.5, "p95": 3.5, "p99": 3.5}


@pytest.mark.unit
def test_a_port_something_listens_on_stops_the_benchmark():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with pytest.raises(SystemExit, match=f"port {port} is in use"):
            ensure_port_free(port)
    ensure_port_free(port)  # closed: free again


@pytest.fixture
def own_redis(tmp_path):
    """A redis-server of this test's own: the benchmark empties the database it is given."""
    server = RedisServer(tmp_path).start()
    yield server
    server.stop()


@pytest.mark.system  # a redis-server of its own
def test_a_redis_database_another_client_uses_stops_the_benchmark_and_is_left_as_it_was(own_redis):
    # A Celery worker left from another run would take the scenarios' messages.
    url = own_redis.url(0)
    other = redis.Redis.from_url(url)
    try:
        other.set("left-by-another-run", "1")
        with pytest.raises(SystemExit, match="1 other client"):
            flush_redis(url)
        assert other.get("left-by-another-run") == b"1"
    finally:
        other.close()
    flush_redis(url)  # alone now: emptied
    with redis.Redis.from_url(url) as after:
        assert after.dbsize() == 0


@pytest.mark.unit
def test_the_gateways_budget_is_what_it_adds_to_a_direct_call_in_units_of_the_baseline():
    from bench.report import budgets

    one = {"p50": 2.0, "p95": 3.0, "p99": 4.0, "throughput": 400.0, "requests": 100}
    results = {"a": {**one, "throughput": 800.0}, "a1": one,
               "i": {"direct": {**one, "p50": 3.0}, "gateway": {**one, "p50": 17.0}},
               "i_rest": {**one, "throughput": 79.0}}

    found = {budget.name: budget for budget in budgets(results)}

    assert found["(i)"].measured == 7.0 and found["(i)"].met  # (17 - 3) / 2
    assert found["(i) REST"].measured == pytest.approx(0.09875) and not found["(i) REST"].met


@pytest.mark.unit
def test_the_ledgers_budget_is_appends_counted_when_integrated_over_durable_inserts():
    from bench.report import budgets

    # The writers committed 5,000/s, but the sequencer integrated them at 4,000/s: the budget
    # takes the integrated rate.
    h = {"writers": 8, "inserts_per_second": 9000.0, "appends_per_second": 4000.0,
         "appends_committed_per_second": 5000.0}

    [budget] = [budget for budget in budgets({"h": h}) if budget.name == "(h)"]

    assert budget.measured == pytest.approx(4000 / 9000) and not budget.met
    [met] = [budget for budget in budgets({"h": {**h, "appends_per_second": 4500.0}}) if budget.name == "(h)"]
    assert met.measured == 0.5 and met.met


def test_the_closing_note_gives_dpop_beside_bearer_as_ratios():
    from bench.report import table

    one = {"p50": 2.0, "p95": 3.0, "p99": 4.0, "throughput": 400.0, "requests": 100}
    results = {"a": {**one, "throughput": 800.0}, "a1": one, "a_dpop": {**one, "throughput": 600.0},
               "a1_dpop": {**one, "p50": 3.0}, "t": one, "t_key": one}

    text = table(results)

    assert "DPoP beside bearer: (a) p50 x1.50 with 1 client, throughput x0.75 saturated" in text
    assert "POST /oauth/token, private_key_jwt + DPoP" in text


def test_the_load_generator_sends_a_fresh_dpop_proof_with_every_request():
    from agp_client.keys import ClientKey
    from bench.load import authenticate

    key = ClientKey.generate()
    seed = {"keyed_agent": {"client_id": "bench-agent-keyed", "private_jwk": key.private_jwk()}}
    headers = authenticate({"token": "t0k", "dpop": True, "seed": seed, "base": "http://127.0.0.1:1"})
    first, second = headers("GET", "/agp/tasks/1"), headers("GET", "/agp/tasks/1")
    assert first["Authorization"] == "DPoP t0k" and first["DPoP"] != second["DPoP"]
    assert authenticate({"token": "t0k"})("GET", "/") == {"Authorization": "Bearer t0k"}
