"""The Rego engine seam with real policies, evaluated by regorus in its engine processes."""

import threading

import pytest

from core import engine
from core.engine import regorus_engine
from tests.decision.factories import PAYMENTS, ruleset_hash

pytestmark = pytest.mark.unit

LIMITS = {"auto_approve_max": 100, "hard_max": 1000}


def evaluate(ruleset, input, **kwargs):
    return engine.evaluate(ruleset=ruleset, ruleset_hash=ruleset_hash(ruleset), input=input, **kwargs)


@pytest.fixture(autouse=True)
def _no_opa(settings):
    settings.AGP_OPA_URL = None
    engine.cache_clear()


def test_it_allows_when_allow_is_true_and_nothing_denies():
    result = evaluate(PAYMENTS, {"action_class": "read", "amount": 10, "limits": LIMITS, "merchant": "shop"})

    assert result.as_result() == {"allow": True, "require_approval": False, "approvals_required": 0, "reasons": []}
    assert result.engine == "regorus"
    assert result.package == "data.agp.payments"


def test_it_denies_with_every_reason_from_the_deny_set():
    result = evaluate(PAYMENTS, {"action_class": "transact", "amount": 5000, "limits": LIMITS,
                                 "merchant": "evil-corp"})

    assert result.allow is False
    assert result.reasons == ("amount 5000 exceeds hard maximum 1000", "merchant is blocked")
    assert result.errors == ()


def test_it_denies_even_when_allow_is_true():
    ruleset = 'package agp.both\nimport rego.v1\nallow := true\ndeny contains "no" if input.block\n'

    assert evaluate(ruleset, {"block": False}).allow is True
    result = evaluate(ruleset, {"block": True})
    assert result.as_result() == {"allow": False, "require_approval": False, "approvals_required": 0, "reasons": ["no"]}


def test_it_reports_require_approval():
    result = evaluate(PAYMENTS, {"action_class": "transact", "amount": 500, "limits": LIMITS, "merchant": "shop"})

    assert result.as_result() == {"allow": True, "require_approval": True, "approvals_required": 1, "reasons": []}


@pytest.mark.parametrize(("amount", "expected"), [
    (0, {"allow": True, "require_approval": False, "approvals_required": 0, "reasons": []}),
    (100, {"allow": True, "require_approval": False, "approvals_required": 0, "reasons": []}),
    (100.5, {"allow": True, "require_approval": True, "approvals_required": 1, "reasons": []}),
    (1000, {"allow": True, "require_approval": True, "approvals_required": 1, "reasons": []}),
    (1001, {"allow": False, "require_approval": True, "approvals_required": 1, "reasons": ["amount 1001 exceeds hard maximum 1000"]}),
])
def test_it_follows_data_dependent_rules(amount, expected):
    result = evaluate(PAYMENTS, {"action_class": "transact", "amount": amount, "limits": LIMITS, "merchant": "shop"})

    assert result.as_result() == expected


def test_it_reads_thresholds_from_the_input_not_from_the_policy():
    low_limits = {"auto_approve_max": 1, "hard_max": 5}

    result = evaluate(PAYMENTS, {"action_class": "transact", "amount": 50, "limits": low_limits, "merchant": "shop"})

    assert result.as_result() == {"allow": False, "require_approval": True, "approvals_required": 1,
                                  "reasons": ["amount 50 exceeds hard maximum 5"]}


def test_it_treats_a_missing_allow_rule_as_false():
    result = evaluate('package agp.silent\nimport rego.v1\nrequire_approval := true\n', {})

    assert result.as_result() == {"allow": False, "require_approval": True, "approvals_required": 1, "reasons": []}


def test_it_treats_an_undefined_allow_as_false():
    result = evaluate("package agp.cond\nimport rego.v1\nallow if input.ok\n", {"ok": False})

    assert result.allow is False
    assert result.reasons == ()


def test_it_accepts_opa_1_syntax_without_the_rego_v1_import():
    result = evaluate("package agp.v1\nallow if input.x > 1\n", {"x": 2})

    assert result.allow is True


def test_it_refuses_pre_1_0_syntax():
    result = evaluate("package agp.v0\nallow { input.x > 1 }\n", {"x": 2})

    assert result.allow is False
    assert result.reasons[0].startswith("policy compile error:")


def test_it_refuses_a_policy_that_does_not_compile():
    result = evaluate("package agp.broken\nimport rego.v1\nallow if {\n", {})

    assert result.as_result()["allow"] is False
    assert len(result.reasons) == 1
    assert result.reasons[0].startswith("policy compile error:")
    assert "Stack backtrace" not in result.reasons[0]


def test_it_refuses_a_ruleset_without_a_package():
    result = evaluate("allow := true\n", {})

    assert result.allow is False
    assert result.reasons[0].startswith("policy compile error:")


def test_it_refuses_when_conflicting_values_make_a_complete_rule_fail_at_run_time():
    ruleset = ("package agp.conflict\nimport rego.v1\n"
               "allow := true if input.a\nallow := false if input.b\n")

    assert evaluate(ruleset, {"a": True, "b": False}).allow is True
    result = evaluate(ruleset, {"a": True, "b": True})

    assert result.allow is False
    assert result.reasons[0].startswith("policy evaluation error in allow:")
    assert "conflict" in result.reasons[0]


def test_it_refuses_when_a_rule_divides_by_zero():
    ruleset = "package agp.ratio\nimport rego.v1\nallow if input.total / input.count > 1\n"

    assert evaluate(ruleset, {"total": 10, "count": 2}).allow is True
    result = evaluate(ruleset, {"total": 10, "count": 0})

    assert result.allow is False
    assert "divide by zero" in result.reasons[0]


def test_it_refuses_when_deny_fails_even_if_allow_is_true():
    ruleset = ('package agp.denyerr\nimport rego.v1\nallow := true\n'
               'deny contains "ratio" if 1 / input.count > 0.5\n')

    result = evaluate(ruleset, {"count": 0})

    assert result.allow is False
    assert result.reasons[0].startswith("policy evaluation error in deny:")


def test_it_requires_approval_when_require_approval_fails():
    ruleset = "package agp.raerr\nimport rego.v1\nallow := true\nrequire_approval if 1 / input.n > 0\n"

    result = evaluate(ruleset, {"n": 0})

    assert result.allow is False
    assert result.require_approval is True


def test_it_refuses_an_allow_that_is_not_a_boolean():
    result = evaluate('package agp.str\nimport rego.v1\nallow := "yes"\n', {})

    assert result.allow is False
    assert result.reasons == ("policy result error: allow must be a boolean, got str",)


def test_it_refuses_a_deny_that_is_not_a_set():
    result = evaluate('package agp.dstr\nimport rego.v1\nallow := true\ndeny := "nope"\n', {})

    assert result.allow is False
    assert result.reasons == ("policy result error: deny must be a set of reason strings, got str",)


def test_it_renders_non_string_deny_reasons_as_json():
    ruleset = 'package agp.objs\nimport rego.v1\ndeny contains {"code": 7} if true\n'

    assert evaluate(ruleset, {}).reasons == ('{"code":7}',)


def test_it_ignores_a_failing_helper_rule_that_the_decision_does_not_use():
    ruleset = ("package agp.lazy\nimport rego.v1\nallow if input.ok\n"
               "unused := 1 / input.zero\n")

    assert evaluate(ruleset, {"ok": True, "zero": 0}).allow is True


def test_it_refuses_a_ruleset_whose_hash_does_not_match():
    result = engine.evaluate(ruleset=PAYMENTS, ruleset_hash=ruleset_hash("something else"), input={})

    assert result.allow is False
    assert result.reasons == ("policy compile error: ruleset_hash does not match the ruleset",)


INPUTS = [
    {"action_class": "read", "amount": 1, "limits": LIMITS, "merchant": "shop"},
    {"action_class": "transact", "amount": 500, "limits": LIMITS, "merchant": "shop"},
    {"action_class": "transact", "amount": 5000, "limits": LIMITS, "merchant": "shady-llc"},
    {"action_class": "delete", "amount": 1, "limits": LIMITS, "merchant": "shop"},
    {},
]


def test_it_gives_the_same_result_cached_and_uncached():
    digest = ruleset_hash(PAYMENTS)
    uncached = [engine.evaluate(ruleset=PAYMENTS, ruleset_hash=digest, input=item, use_cache=False)
                for item in INPUTS]
    # Twice through the cache, interleaved: no state leaks from one evaluation to the next.
    cached = [engine.evaluate(ruleset=PAYMENTS, ruleset_hash=digest, input=item) for item in INPUTS * 2]

    assert cached == uncached * 2
    assert [r.allow for r in uncached] == [True, True, False, False, False]
    assert engine.cache_stats() == {"size": 1, "hits": 9, "misses": 1}


def test_it_compiles_once_per_ruleset_hash_and_caches_failures_too():
    broken = "package agp.broken\nallow if {\n"
    for _ in range(3):
        evaluate(PAYMENTS, {})
        evaluate(broken, {})

    assert engine.cache_stats() == {"size": 2, "hits": 4, "misses": 2}


def test_it_evicts_the_least_recently_used_ruleset():
    cache = regorus_engine.CompiledPolicyCache(maxsize=2)
    rulesets = [f"package agp.p{i}\nallow := true\n" for i in range(3)]
    for ruleset in rulesets:
        cache.get(ruleset=ruleset, ruleset_hash=ruleset_hash(ruleset))
    cache.get(ruleset=rulesets[2], ruleset_hash=ruleset_hash(rulesets[2]))

    assert cache.stats() == {"size": 2, "hits": 1, "misses": 3}
    cache.get(ruleset=rulesets[0], ruleset_hash=ruleset_hash(rulesets[0]))
    assert cache.stats()["misses"] == 4


def test_it_evaluates_from_several_threads_at_once():
    # Each evaluation takes an engine process of its own for its duration: none shares pipes.
    main = evaluate(PAYMENTS, INPUTS[1])
    results, failures = [], []

    def run():
        try:
            for item in INPUTS:
                results.append((item.get("merchant"), evaluate(PAYMENTS, item)))
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert failures == []
    expected = [(item.get("merchant"), evaluate(PAYMENTS, item)) for item in INPUTS]
    assert sorted(results, key=repr) == sorted(expected * 4, key=repr)
    assert main == expected[1][1]


def test_it_treats_an_undefined_complete_deny_as_no_denial():
    ruleset = 'package agp.cdeny\nimport rego.v1\nallow := true\ndeny := {"blocked"} if input.block\n'

    assert evaluate(ruleset, {"block": False}).as_result() == {"allow": True, "require_approval": False, "approvals_required": 0,
                                                              "reasons": []}
    assert evaluate(ruleset, {"block": True}).reasons == ("blocked",)


def test_it_does_not_mistake_a_deny_string_for_undefined():
    ruleset = 'package agp.udeny\nimport rego.v1\nallow := true\ndeny := "<undefined>"\n'

    result = evaluate(ruleset, {})

    assert result.allow is False
    assert result.reasons == ("policy result error: deny must be a set of reason strings, got str",)


def test_the_warm_up_evaluation_leaves_nothing_behind():
    # Compiling evaluates once with an empty input (to warm the engine); with {} this
    # policy allows, so a kept result would wrongly allow the blocked input below.
    ruleset = "package agp.warm\nimport rego.v1\nallow if not input.blocked\n"

    assert evaluate(ruleset, {"blocked": True}).allow is False
    assert evaluate(ruleset, {}).allow is True
    assert evaluate(ruleset, {"blocked": True}).allow is False


def test_a_ruleset_whose_warm_up_fails_still_evaluates():
    ruleset = 'package agp.coldstart\nimport rego.v1\nallow if 10 / object.get(input, "n", 0) > 1\n'

    assert evaluate(ruleset, {"n": 2}).allow is True
    assert "divide by zero" in evaluate(ruleset, {}).reasons[0]
    assert evaluate(ruleset, {"n": 2}).allow is True
