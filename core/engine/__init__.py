"""The Rego engine seam: one call, ``evaluate``, whichever engine runs the ruleset.

The ruleset is always compiled in process by regorus (once per ``ruleset_hash``, cached),
so a ruleset that does not parse is refused the same way under both backends. With
``AGP_OPA_URL`` unset (the default) regorus evaluates it; with it set, evaluation is
delegated to that OPA server (Data API, ``AGP_OPA_TIMEOUT_SECONDS``), which must already
hold the ruleset under its package: AGP does not push policies to OPA.

Nothing here raises for a bad policy or a failing engine: every problem becomes
``allow: false`` with the reason in ``reasons`` (CONTRACT C7, C11).
"""

from typing import Any

from django.conf import settings

from . import opa, regorus_engine
from .result import EvaluationResult

__all__ = ["EvaluationResult", "evaluate", "cache_clear", "cache_stats"]

def evaluate(*, ruleset: str, ruleset_hash: str, input: dict[str, Any], use_cache: bool = True) -> EvaluationResult:
    """Evaluate ``ruleset`` (whose C6 hash is ``ruleset_hash``) for the Rego ``input``.

    ``allow`` is true only when the ruleset's ``allow`` is ``true``, its ``deny`` set is
    empty and no error occurred. ``use_cache=False`` compiles afresh (for tests and the
    benchmark; the result is the same).
    """
    opa_url = settings.AGP_OPA_URL
    if not opa_url:
        return regorus_engine.evaluate(ruleset=ruleset, ruleset_hash=ruleset_hash, input=input, use_cache=use_cache)
    compiled = (regorus_engine.cache.get(ruleset=ruleset, ruleset_hash=ruleset_hash) if use_cache
                else regorus_engine.compile_ruleset(ruleset=ruleset, ruleset_hash=ruleset_hash))
    if compiled.error is not None:
        return regorus_engine.evaluate_compiled(compiled, input)
    return opa.evaluate(base_url=opa_url, package=compiled.package, input=input,
                        timeout=float(settings.AGP_OPA_TIMEOUT_SECONDS))


def cache_clear() -> None:
    """Forget this thread's compiled rulesets."""
    regorus_engine.cache.clear()


def cache_stats() -> dict[str, int]:
    """This thread's compiled-ruleset cache: ``size``, ``hits``, ``misses``."""
    return regorus_engine.cache.stats()
