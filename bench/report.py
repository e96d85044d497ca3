"""The benchmark's table and its budgets, every budget a ratio to a figure of the same run.

A machine whose speed drifts (a shared VM) moves every figure of a run alike, so a budget is
never an absolute time: it compares one scenario with the baseline (a) = an authenticated
``GET /agp/tasks/{id}``, or with a floor measured beside it (the rate one process hashes
the ledger's bytes, PostgreSQL's own durable INSERT rate with as many writers).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Budget:
    name: str
    rule: str  # the budget in words
    measured: float  # the ratio measured
    limit: float
    at_least: bool  # measured >= limit (else <=)

    @property
    def met(self) -> bool:
        return self.measured >= self.limit if self.at_least else self.measured <= self.limit

    def line(self) -> str:
        return f"{self.name}: {self.rule}: {self.measured:.2f} -> {'met' if self.met else 'MISSED'}"


def budgets(results: dict) -> list[Budget]:
    """The budgets the run's results decide (a scenario not run decides none)."""
    found = []
    a, a1 = results.get("a"), results.get("a1")
    if a and "b" in results:
        found.append(Budget("(b)", "validate-only throughput / (a) throughput >= 0.40",
                            results["b"]["throughput"] / a["throughput"], 0.40, True))
    if a1 and "b_half" in results:
        found.append(Budget("(b) tail", "p99 at half (b)'s saturation / (a) one-client p50 <= 10",
                            results["b_half"]["p99"] / a1["p50"], 10.0, False))
    if a and "d" in results:
        found.append(Budget("(d)", "one worker's executions per second / (a) throughput >= 0.15",
                            results["d"]["executed_per_second"] / a["throughput"], 0.15, True))
    if a1 and "e" in results:
        found.append(Budget("(e)", "policy evaluation one-client p50 / (a) one-client p50 <= 2",
                            results["e"]["p50"] / a1["p50"], 2.0, False))
    if a and "f" in results:
        found.append(Budget("(f)", "delegation at depth 6 throughput / (a) throughput >= 0.10",
                            results["f"]["throughput"] / a["throughput"], 0.10, True))
    if "g" in results and "g_hash" in results:
        found.append(Budget("(g)", "verify_ledger events/s / one process SHA-256 of the same bytes >= 0.25",
                            results["g"]["events_per_second"] / results["g_hash"]["events_per_second"], 0.25, True))
    if a1 and "i" in results:
        i = results["i"]
        found.append(Budget("(i)", "gateway overhead (gateway p50 - direct p50, one client) / (a) one-client p50 <= 8",
                            (i["gateway"]["p50"] - i["direct"]["p50"]) / a1["p50"], 8.0, False))
    if a and "i_rest" in results:
        found.append(Budget("(i) REST", "one call (evaluation, decision, validation) throughput / (a) throughput "
                                        ">= 0.10", results["i_rest"]["throughput"] / a["throughput"], 0.10, True))
    if "h" in results:
        h = results["h"]
        found.append(Budget("(h)", f"{h['writers']} writers' ledger appends/s / PostgreSQL's durable one-row "
                                   f"INSERTs/s with {h['writers']} writers >= 0.50",
                            h["appends_per_second"] / h["inserts_per_second"], 0.50, True))
    return found


def table(results: dict) -> str:
    rows = []

    def http_row(key, label):
        r = results.get(key)
        if r:
            rows.append((label, f"{r['requests']}", f"{r['throughput']:.0f}/s", f"{r['p50']:.2f}", f"{r['p95']:.2f}",
                         f"{r['p99']:.2f}"))

    http_row("a", "(a) GET /agp/tasks/{id} (baseline)")
    http_row("a1", "(a) the same, 1 client")
    http_row("a_dpop", "(a) with a DPoP-bound token")
    http_row("a1_dpop", "(a) with a DPoP-bound token, 1 client")
    http_row("t", "POST /oauth/token, client secret")
    http_row("t_key", "POST /oauth/token, private_key_jwt + DPoP")
    http_row("floor", "gunicorn alone (no Django), 1 client")
    http_row("b", "(b) validate envelope, passes")
    http_row("b_nokey", "(b) the same without Idempotency-Key")
    http_row("b_half", "(b) at half its saturation rate")
    http_row("c", "(c) validate envelope, fails")
    http_row("d", "(d) submit respond-async (202)")
    if "d" in results:
        d = results["d"]
        rows.append(("(d) executed by 1 worker", f"{d['requests']}", f"{d['executed_per_second']:.0f}/s", "", "", ""))
    if "d_overlapped" in results:
        d = results["d_overlapped"]
        rows.append(("(d) submitted and executed together", f"{d['requests']}",
                     f"{d['executed_per_second']:.0f}/s", "", "", ""))
    http_row("e", "(e) POST /agp/policy-evaluations, 1 client")
    if "e_engine" in results:
        w = results["e_engine"]["wall"]
        rows.append(("(e) engine alone", f"{w['n']}", f"{1e6 / w['mean']:.0f}/s", f"{w['p50'] / 1e3:.3f}",
                     f"{w['p95'] / 1e3:.3f}", f"{w['p99'] / 1e3:.3f}"))
    http_row("f", "(f) POST /agp/delegations, depth 6")
    if "g" in results:
        g = results["g"]
        rows.append(("(g) verify_ledger", f"{g['events']}", f"{g['events_per_second']:.0f} ev/s", "", "", ""))
    if "g_python" in results:
        g = results["g_python"]
        rows.append(("(g) the same walked in Python", f"{g['events']}", f"{g['events_per_second']:.0f} ev/s",
                     "", "", ""))
    if "g_hash" in results:
        g = results["g_hash"]
        rows.append(("(g) SHA-256 of the same bytes, 1 process", f"{g['events']}",
                     f"{g['events_per_second']:.0f} ev/s", "", "", ""))
    if "h" in results:
        h = results["h"]
        rows.append((f"(h) ledger appends, {h['writers']} writers (counted when integrated)", f"{h['appends']}",
                     f"{h['appends_per_second']:.0f}/s", "", "", ""))
        if "appends_committed_per_second" in h:
            rows.append(("(h) the same appends as the writers committed them (in the window)", "",
                         f"{h['appends_committed_per_second']:.0f}/s", "", "", ""))
        if "appends_lag_max" in h:
            rows.append(("(h) integration lag under those appends, p99 / max of 0.1 s samples", "",
                         f"{h['appends_lag_p99']:.3f} s / {h['appends_lag_max']:.3f} s", "", "", ""))
        rows.append((f"(h) PostgreSQL durable INSERTs, {h['writers']} writers", f"{h['inserts']}",
                     f"{h['inserts_per_second']:.0f}/s", "", "", ""))
        if "appends_one_writer" in h:
            rows.append(("(h) ledger appends, 1 writer", f"{h['appends_one_writer']}",
                         f"{h['appends_one_writer_per_second']:.0f}/s", "", "", ""))
        if "in_transaction" in h:
            rows.append((f"(h) ledger appends chained in their transaction, {h['writers']} writers",
                         f"{h['in_transaction']}", f"{h['in_transaction_per_second']:.0f}/s", "", "", ""))
        if "orm" in h:
            rows.append((f"(h) the same through the ORM (3 statements), {h['writers']} writers", f"{h['orm']}",
                         f"{h['orm_per_second']:.0f}/s", "", "", ""))
        if "batched" in h:
            rows.append((f"(h) ledger appends, {h['writers']} writers, {h['batch']} a transaction", f"{h['batched']}",
                         f"{h['batched_per_second']:.0f}/s", "", "", ""))
    if "i" in results:
        for side, label in (("direct", "(i) tool call directly to the MCP server, 1 client"),
                            ("gateway", "(i) the same through the gateway (governed), 1 client")):
            r = results["i"][side]
            rows.append((label, f"{r['requests']}", f"{r['throughput']:.0f}/s", f"{r['p50']:.2f}", f"{r['p95']:.2f}",
                         f"{r['p99']:.2f}"))
    http_row("i_rest", "(i) REST one call (validate only)")
    header = ("scenario", "n", "throughput", "p50 ms", "p95 ms", "p99 ms")
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = [" | ".join(str(c).ljust(w) for c, w in zip(header, widths, strict=True)),
             "-+-".join("-" * w for w in widths)]
    lines += [" | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    lines.append("")
    lines += ["budgets (ratios within this run):", *(f"  {budget.line()}" for budget in budgets(results))]
    if results.get("a1") and results.get("a1_dpop") and results.get("a") and results.get("a_dpop"):
        lines.append(f"DPoP beside bearer: (a) p50 x{results['a1_dpop']['p50'] / results['a1']['p50']:.2f} "
                     f"with 1 client, throughput x{results['a_dpop']['throughput'] / results['a']['throughput']:.2f} "
                     "saturated (a proof checked and its jti recorded on every request)")
    mem = results.get("memory_end") or {}
    m = results.get("machine", {})
    lines.append("")
    lines.append(f"peak RSS: web worker {mem.get('web', {}).get('peak', 0):.0f} MB, Celery worker "
                 f"{mem.get('worker', {}).get('peak', 0):.0f} MB")
    db = results.get("database_floor")
    if db:
        lines.append(f"PostgreSQL from Python: SELECT 1 {db['round_trip_ms']:.3f} ms, a durable one-row INSERT "
                     f"{db['durable_insert_ms']:.3f} ms (medians)")
    lines.append(f"machine: {m.get('nproc')} CPUs, {m.get('cpu')}, {m.get('memory_gb')} GB, Python {m.get('python')}, "
                 f"load average {m.get('load_average', 0):.2f}")
    return "\n".join(lines)
