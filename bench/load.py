"""The load generator: a separate process that drives HTTP load over loopback.

Reads one JSON spec on stdin and prints one JSON result on stdout (``python -m bench``
runs it). Threads, each with its own keep-alive ``http.client`` connection, send requests
built by the scenario's request factory:

- ``closed`` mode: every thread sends its next request as soon as the previous answer
  arrives (saturation throughput at that concurrency);
- ``open`` mode: requests are due at a fixed ``rate``; a request's latency runs from the
  moment it was due, so a server that falls behind is charged for the queueing too (no
  coordinated omission).

Every write carries a new ``Idempotency-Key``, as ``agp_client`` sends one on every POST and
PATCH, unless the spec says ``"keys": false`` (the key-less figure reported beside it).

Both stop after ``requests`` requests or ``duration`` seconds, whichever comes first.
"""

import http.client
import itertools
import json
import statistics
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from urllib.parse import urlencode, urlsplit

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


def _iso_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def request_factory(spec: dict):
    """``make(i) -> (method, path, body bytes or None, extra headers, expected statuses)``."""
    scenario, seed = spec["scenario"], spec["seed"]
    if scenario == "floor":  # bench/floor_app.py: no service, no seed
        return lambda i: ("GET", "/floor", None, {}, (200,))
    envelope = seed["envelope"]
    json_headers = {"Content-Type": "application/json"}

    if scenario == "a":
        task_ids = seed["task_ids"]
        return lambda i: ("GET", f"/agp/tasks/{task_ids[i % len(task_ids)]}", None, {}, (200,))

    if scenario in ("b", "c", "d"):
        parameters = {"limit": 1000} if scenario == "c" else envelope["parameters"]
        headers = dict(json_headers, Prefer="respond-async") if scenario == "d" else json_headers
        expected = {"b": (200,), "c": (422,), "d": (202,)}[scenario]

        def make(i):
            body = dict(envelope, type="ActionEnvelope", parameters=parameters,
                        action_id=f"act-bench-{scenario}-{uuid.uuid4().hex}", created_at=_iso_now())
            return "POST", "/agp/action-envelopes", json.dumps(body).encode(), headers, expected
        return make

    if scenario == "i":  # the REST one call: no decision, the task's policy set decides (validate only)
        body_of = dict(envelope, type="ActionEnvelope", task_id=seed["one_call_task_id"])
        del body_of["decision_ref"], body_of["policy_decision_ref"]

        def make(i):
            body = dict(body_of, action_id=f"act-bench-i-{uuid.uuid4().hex}", created_at=_iso_now())
            return "POST", "/agp/action-envelopes", json.dumps(body).encode(), json_headers, (200,)
        return make

    if scenario == "e":
        from bench.policy_eval import SAMPLE_INPUT

        policy_sets, task_ids = seed["policy_sets"], seed["task_ids"]

        def make(i):
            body = {"policy_set_id": policy_sets[i % len(policy_sets)], "task_id": task_ids[i % len(task_ids)],
                    "agent_id": "agent-bench", "input": dict(SAMPLE_INPUT, amount=50 + i % 2000)}
            return "POST", "/agp/policy-evaluations", json.dumps(body).encode(), json_headers, (201,)
        return make

    if scenario == "f":
        delegator = seed["chain_agents"][-1]

        def make(i):
            body = {"root_principal": seed["root_principal"], "delegator_agent": delegator,
                    "delegate_agent": f"agent-L6-{uuid.uuid4().hex[:12]}", "authority_scope": ["crm:update"]}
            return "POST", "/agp/delegations", json.dumps(body).encode(), json_headers, (201,)
        return make

    if scenario in ("t", "t_key"):  # the token endpoint: the bootstrap secret, or a key with DPoP
        form_headers = {"Content-Type": "application/x-www-form-urlencoded"}
        token_url = spec["base"] + "/oauth/token"
        if scenario == "t":
            body = urlencode({"grant_type": "client_credentials", "client_id": "bench",
                              "client_secret": "bench-secret"}).encode()
            return lambda i: ("POST", "/oauth/token", body, form_headers, (200,))
        key, client_id = _keyed(seed)

        def make(i):
            body = urlencode({"grant_type": "client_credentials", "client_assertion_type": ASSERTION_TYPE,
                              "client_assertion": key.client_assertion(client_id=client_id, token_url=token_url)})
            headers = dict(form_headers, DPoP=key.dpop_proof(method="POST", url=token_url))
            return "POST", "/oauth/token", body.encode(), headers, (200,)
        return make

    raise SystemExit(f"unknown scenario {scenario!r}")


def _keyed(seed: dict):
    from agp_client.keys import ClientKey

    return ClientKey.from_jwk(seed["keyed_agent"]["private_jwk"]), seed["keyed_agent"]["client_id"]


def authenticate(spec: dict):
    """``headers(method, path) -> dict``: the bearer token's header, or with ``"dpop": true``
    the bound token's and a fresh DPoP proof for each request (made here, as a client would)."""
    token = spec.get("token")
    if not token:
        return lambda method, path: {}
    if not spec.get("dpop"):
        return lambda method, path: {"Authorization": f"Bearer {token}"}
    key, _ = _keyed(spec["seed"])
    return lambda method, path: {"Authorization": f"DPoP {token}", "DPoP": key.dpop_proof(
        method=method, url=spec["base"] + path, access_token=token)}


def percentiles(ms: list[float]) -> dict[str, float]:
    """p50, p95 and p99 of ``ms``."""
    cuts = statistics.quantiles(ms, n=100, method="inclusive") if len(ms) > 1 else ms * 99
    return {"p50": cuts[49], "p95": cuts[94], "p99": cuts[98]}


def run(spec: dict) -> dict:
    url = urlsplit(spec["base"])
    make = request_factory(spec)
    auth = authenticate(spec)
    total, duration = spec["requests"], spec["duration"]
    concurrency, mode, rate = spec["concurrency"], spec["mode"], spec.get("rate")
    keys = spec.get("keys", True)
    counter = itertools.count()
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    unexpected: list[str] = []
    lock = threading.Lock()
    start = time.perf_counter() + 0.05
    deadline = start + duration

    def worker():
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
        mine, my_statuses = [], {}
        while True:
            i = next(counter)
            if i >= total:
                break
            due = start + i / rate if mode == "open" else None
            now = time.perf_counter()
            if now >= deadline:
                break
            if due is not None and due > now:
                time.sleep(due - now)
            method, path, body, headers, expected = make(i)
            if method != "GET" and keys:
                headers = {**headers, "Idempotency-Key": uuid.uuid4().hex}
            sent = time.perf_counter()
            try:
                conn.request(method, path, body=body, headers={**auth(method, path), **headers})
                response = conn.getresponse()
                payload = response.read()
                status = response.status
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                conn = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
                status, payload = f"error:{type(exc).__name__}", b""
            done = time.perf_counter()
            mine.append(done - (due if due is not None else sent))
            my_statuses[str(status)] = my_statuses.get(str(status), 0) + 1
            if status not in expected and len(unexpected) < 3:
                unexpected.append(f"{status}: {payload[:300]!r}")
        conn.close()
        with lock:
            latencies.extend(mine)
            for key, value in my_statuses.items():
                statuses[key] = statuses.get(key, 0) + value

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    first_end = []
    for thread in threads:
        thread.join()
        first_end.append(time.perf_counter())
    elapsed = max(first_end) - start
    ms = sorted(x * 1000 for x in latencies)
    result = {"requests": len(ms), "elapsed": elapsed, "throughput": len(ms) / elapsed, **percentiles(ms),
              "statuses": statuses, "unexpected": unexpected,
              "started_at": time.time() - (time.perf_counter() - start)}
    if spec.get("latencies"):  # every latency (ms), for runs the caller combines
        result["latencies"] = ms
    return result


if __name__ == "__main__":
    print(json.dumps(run(json.load(sys.stdin))))
