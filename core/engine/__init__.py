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
``allow: false`` with the reason in ``reasons`` (docs/reference/governance.md, docs/reference/api.md).
"""

from typing import Any

from django.conf import settings

from agp_project.exactjson import dumps

from . import opa, sandbox
from .regorus_engine import ruleset_digest
from .result import EvaluationResult

__all__ = ["EvaluationResult", "LIMIT_STOPPED", "evaluate", "ruleset_problem", "cache_clear", "cache_stats"]

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
    """Evaluate ``ruleset`` (whose docs/reference/governance.md hash is ``ruleset_hash``) for the Rego ``input``.

    ``allow`` is true only when the ruleset's ``allow`` is ``true``, its ``deny`` set is
    empty, no error occurred and no limit was reached. ``use_cache=False`` compiles afresh
    (for tests and the benchmark; the result is the same).
    """
    opa_url = settings.AGP_OPA_URL
    if not opa_url:
        return sandbox.evaluate(ruleset=ruleset, ruleset_hash=ruleset_hash, input_json=dumps(input),
                                use_cache=use_cache)
    info, refusal = sandbox.compile_info(ruleset=ruleset, ruleset_hash=ruleset_hash, use_cache=use_cache)
    if refusal is not None:
        return refusal
    return opa.evaluate(base_url=opa_url, package=info["package"], input=input,
                        timeout=float(settings.AGP_OPA_TIMEOUT_SECONDS))


def cache_clear() -> None:
    """Forget the compiled rulesets of this process's engine processes."""
    sandbox.cache_clear()


def cache_stats() -> dict[str, int]:
    """The compiled-ruleset caches of this process's idle engine processes: ``size``, ``hits``, ``misses``."""
    return sandbox.cache_stats()
