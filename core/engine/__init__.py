"""The Rego engine seam: one call, ``evaluate``, whichever engine runs the ruleset.

Every ruleset runs in an engine process under a time and a memory limit
(``core/engine/sandbox.py``; ``AGP_POLICY_TIMEOUT_MS``, ``AGP_POLICY_MEMORY_MB``): past
either, the evaluation is ``allow: false`` with a reason naming the limit. Evaluations,
replay's what-if and anything added later (policy-set tests, backtests) come through here.

The ruleset is always compiled by regorus (once per ``ruleset_hash`` in each engine
process, cached), so a ruleset that does not parse is refused the same way under both
backends. With ``AGP_OPA_URL`` unset (the default) regorus evaluates it; with it set,
evaluation is delegated to that OPA server (Data API, ``AGP_OPA_TIMEOUT_SECONDS``), which
must already hold the ruleset under its package: AGP does not push policies to OPA.

Nothing here raises for a bad policy or a failing engine: every problem becomes
``allow: false`` with the reason in ``reasons`` (CONTRACT C7, C11).
"""

import itertools
from decimal import Decimal
from typing import Any

from django.conf import settings

from agp_project.exactjson import as_double, decimal_text, doubles_around, dumps

from . import opa, sandbox
from .regorus_engine import ruleset_digest
from .result import EvaluationResult

__all__ = ["EvaluationResult", "LIMIT_STOPPED", "evaluate", "ruleset_problem", "cache_clear", "cache_stats"]

# Fractions no IEEE double holds that one Rego input may contain: each doubles the evaluations
# regorus makes (see ``_regorus_evaluate``); past this many the evaluation is a denial.
MAX_INEXACT_FRACTIONS = 4

# How the reason of an evaluation stopped at the time or memory limit begins.
LIMIT_STOPPED = sandbox.LIMIT_STOPPED


def ruleset_problem(*, ruleset: str) -> str | None:
    """Why ``ruleset`` cannot be registered, or None: it does not parse as OPA 1.0 Rego (the
    engine's message names the line and column), its package defines no ``allow`` rule (the
    message names the package declaration's line and column), or compiling it (which ends
    with a warm-up evaluation) ran past the engine's limits."""
    info, refusal = sandbox.compile_info(ruleset=ruleset, ruleset_hash=ruleset_digest(ruleset))
    if refusal is not None:
        return refusal.reasons[0]
    if "allow" not in info["defined"]:
        where = f"{info['package_at']}: " if info.get("package_at") else ""
        return f"policy compile error: {where}package {info['package'].removeprefix('data.')} defines no allow rule"
    return None


def evaluate(*, ruleset: str, ruleset_hash: str, input: dict[str, Any], use_cache: bool = True) -> EvaluationResult:
    """Evaluate ``ruleset`` (whose C6 hash is ``ruleset_hash``) for the Rego ``input``.

    ``allow`` is true only when the ruleset's ``allow`` is ``true``, its ``deny`` set is
    empty, no error occurred and no limit was reached. ``use_cache=False`` compiles afresh
    (for tests and the benchmark; the result is the same).
    """
    opa_url = settings.AGP_OPA_URL
    if not opa_url:
        return _regorus_evaluate(ruleset=ruleset, ruleset_hash=ruleset_hash, input=input, use_cache=use_cache)
    info, refusal = sandbox.compile_info(ruleset=ruleset, ruleset_hash=ruleset_hash, use_cache=use_cache)
    if refusal is not None:
        return refusal
    return opa.evaluate(base_url=opa_url, package=info["package"], input=input,
                        timeout=float(settings.AGP_OPA_TIMEOUT_SECONDS))


def _regorus_evaluate(*, ruleset: str, ruleset_hash: str, input: dict[str, Any], use_cache: bool) -> EvaluationResult:
    """regorus compares integers exactly but reads a fraction as the nearest IEEE double, so
    ``100.0000000000000000001 > 100`` would be false there. For an input holding fractions no
    double holds, the ruleset is evaluated at every combination of the two doubles around
    each: the result stands when all agree on ``allow`` and ``require_approval``; when they
    do not, the outcome depends on digits the engine cannot see, and it is a denial saying so.
    A comparison with a constant (a double) never falls between two adjacent doubles, so
    none of them lets such a number through on a rounding."""
    inexact = _inexact_fractions(input, ())
    if not inexact:
        return sandbox.evaluate(ruleset=ruleset, ruleset_hash=ruleset_hash, input_json=dumps(input),
                                use_cache=use_cache)
    numbers = ", ".join(f"{'.'.join(map(str, path))} = {decimal_text(number)}" for path, number in inexact)
    if len(inexact) > MAX_INEXACT_FRACTIONS:
        problem = (f"policy input error: more than {MAX_INEXACT_FRACTIONS} fractions that the policy engine "
                   f"cannot compare exactly ({numbers})")
        return EvaluationResult(allow=False, require_approval=False, reasons=(problem,), errors=(problem,))
    results = []
    for corner in itertools.product(*(doubles_around(number) for _, number in inexact)):
        document = input
        for (path, _), double in zip(inexact, corner, strict=True):
            document = _replaced(document, path, Decimal(repr(double)))
        results.append(sandbox.evaluate(ruleset=ruleset, ruleset_hash=ruleset_hash, input_json=dumps(document),
                                        use_cache=use_cache))
    first = results[0]
    if all((result.allow, result.require_approval) == (first.allow, first.require_approval) for result in results):
        return first
    reasons = dict.fromkeys(reason for result in results for reason in result.reasons)
    reasons[f"the outcome depends on digits the policy engine cannot compare ({numbers}): it reads fractions as "
            f"IEEE 754 doubles"] = None
    return EvaluationResult(allow=False, require_approval=any(result.require_approval for result in results),
                            reasons=tuple(reasons), engine=first.engine, package=first.package)


def _inexact_fractions(value: Any, path: tuple) -> list[tuple[tuple, Decimal]]:
    """Every number in ``value`` that no IEEE double holds, with its path (integers are exact)."""
    if isinstance(value, Decimal):
        return [(path, value)] if value != value.to_integral_value() and as_double(value) is None else []
    if isinstance(value, dict):
        return [found for key, member in value.items() for found in _inexact_fractions(member, (*path, key))]
    if isinstance(value, list):
        return [found for index, member in enumerate(value) for found in _inexact_fractions(member, (*path, index))]
    return []


def _replaced(value: Any, path: tuple, new: Any) -> Any:
    """A copy of ``value`` with the member at ``path`` replaced by ``new`` (the rest shared)."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replaced(value[head], rest, new)}
    return [_replaced(member, rest, new) if index == head else member for index, member in enumerate(value)]


def cache_clear() -> None:
    """Forget the compiled rulesets of this process's engine processes."""
    sandbox.cache_clear()


def cache_stats() -> dict[str, int]:
    """The compiled-ruleset caches of this process's idle engine processes: ``size``, ``hits``, ``misses``."""
    return sandbox.cache_stats()
