"""The in-process Rego engine: regorus (Rust), via the ``gordon-to-regorus`` wheel.

Compiling a ruleset (parsing it, finding its package and which of the three rules it
defines) happens once per ``ruleset_hash`` and is cached; each evaluation clones the
cached engine (under a microsecond) so no state of one evaluation can reach the next.

Why the cache is per thread: a ``regorus.Engine`` is a pyo3 ``unsendable`` class. Using
one from any thread but its creator panics (``pyo3_runtime.PanicException``). So every
thread keeps its own LRU of compiled engines; there is nothing shared to lock, which is
what makes the cache thread-safe. Gunicorn's sync workers run one thread per process, so
in practice this is one cache per worker process.
"""

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import regorus

from .result import EvaluationResult, RuleValues, clean_error, decide, failure

ENGINE_NAME = "regorus"
RULES = ("allow", "require_approval", "deny", "approvals_required", "signed_approvals_required")

DEFAULT_CACHE_SIZE = 256
POLICY_PATH = "policy.rego"
_UNDEFINED_JSON = '"<undefined>"'


@dataclass(frozen=True)
class CompiledPolicy:
    """A parsed ruleset, or the reason it could not be parsed (negative results are cached too)."""

    ruleset_hash: str
    engine: Any = None
    package: str | None = None
    defined: frozenset[str] = frozenset()
    error: str | None = None
    package_at: str | None = None  # where the package is declared, "policy.rego:<line>:<col>"


def _is_fatal(exc: BaseException) -> bool:
    return isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit))


def _head_name(refr: dict) -> str | None:
    """The leftmost variable of a rule head reference (``deny``, ``allow``, ``p`` of ``p.q``)."""
    while isinstance(refr, dict):
        if "Var" in refr:
            return refr["Var"].get("value")
        inner = refr.get("RefDot") or refr.get("RefBrack")
        if inner is None:
            return None
        refr = inner.get("refr")
    return None


def _defined_rules(engine: Any) -> tuple[frozenset[str], str | None]:
    """Which of ``allow``, ``require_approval``, ``deny`` the loaded module defines, and where
    its package is declared (``policy.rego:<line>:<col>``, for a message about the package).

    Read from the AST once at compile time, so an evaluation never asks the engine for a
    rule that does not exist (regorus reports that as an error, and a missing ``allow``
    must simply mean false).
    """
    names = set()
    package_at = None
    for module in json.loads(engine.get_ast_as_json()):
        span = (module["ast"].get("package") or {}).get("span") or {}
        if "line" in span and "col" in span:
            package_at = f"{POLICY_PATH}:{span['line']}:{span['col']}"
        for rule in module["ast"]["rules"]:
            kind, body = next(iter(rule.items()))
            if kind == "Default":
                names.add(_head_name(body["refr"]))
            else:
                head_kind, head = next(iter(body["head"].items()))
                names.add(_head_name(head.get("refr")))
    return frozenset(name for name in names if name in RULES), package_at


def ruleset_digest(ruleset: str) -> str:
    return "sha256:" + hashlib.sha256(ruleset.encode("utf-8")).hexdigest()


def compile_ruleset(*, ruleset: str, ruleset_hash: str) -> CompiledPolicy:
    """Parse ``ruleset`` into an engine; any failure is recorded, never raised."""
    if ruleset_digest(ruleset) != ruleset_hash:
        # The cache is keyed by hash: refusing a mismatch keeps a cache entry from ever
        # standing for bytes other than the ones it was compiled from.
        return CompiledPolicy(ruleset_hash, error="policy compile error: ruleset_hash does not match the ruleset")
    try:
        engine = regorus.Engine()
        engine.set_rego_v0(False)  # OPA 1.0 syntax; `import rego.v1` is accepted too
        package = engine.add_policy(POLICY_PATH, ruleset)
        defined, package_at = _defined_rules(engine)
    except BaseException as exc:  # noqa: BLE001 - pyo3 panics derive from BaseException
        if _is_fatal(exc):
            raise
        return CompiledPolicy(ruleset_hash, error=clean_error("policy compile error", exc))
    return CompiledPolicy(ruleset_hash, engine=_warmed(engine, package, defined), package=package, defined=defined,
                          package_at=package_at)


def _warmed(engine: Any, package: str, defined: frozenset[str]) -> Any:
    """The engine after one evaluation with an empty input, if that succeeds.

    regorus analyses and schedules the rules on the first evaluation and keeps that in
    the engine; clones of a warmed engine start from it, which halves the cost of every
    later evaluation. Evaluation results are not kept (regorus clears them before each
    evaluation), so nothing of the empty input reaches a real one. If the warm-up fails,
    the untouched engine is used.
    """
    warm = engine.clone()
    try:
        warm.set_input({})
        for rule in defined:
            warm.eval_rule_as_json(f"{package}.{rule}")
    except BaseException as exc:  # noqa: BLE001
        if _is_fatal(exc):
            raise
        return engine
    return warm


def _deny_value(engine: Any, path: str) -> Any:
    """``deny`` read through JSON: a set of objects has no Python form (dicts are unhashable)."""
    raw = engine.eval_rule_as_json(path)
    if raw == _UNDEFINED_JSON:
        # regorus renders an undefined rule as this string; ask again to tell the two apart.
        return engine.eval_rule(path)
    return json.loads(raw)


def evaluate_compiled(compiled: CompiledPolicy, input: dict[str, Any] | str) -> EvaluationResult:
    """Evaluate the three rules of a compiled ruleset for ``input`` (an object, or its JSON text:
    the engine process passes the text on as it came, so numbers reach regorus unrounded)."""
    if compiled.error is not None:
        return failure(compiled.error, engine=ENGINE_NAME)
    values = RuleValues()
    try:
        engine = compiled.engine.clone()
        if isinstance(input, str):
            engine.set_input_json(input)
        else:
            engine.set_input(input)
    except BaseException as exc:  # noqa: BLE001
        if _is_fatal(exc):
            raise
        return failure(clean_error("policy evaluation error", exc), engine=ENGINE_NAME, package=compiled.package)
    for rule in RULES:
        if rule not in compiled.defined:
            continue
        try:
            path = f"{compiled.package}.{rule}"
            setattr(values, rule, _deny_value(engine, path) if rule == "deny" else engine.eval_rule(path))
        except BaseException as exc:  # noqa: BLE001
            if _is_fatal(exc):
                raise
            values.errors.append(clean_error(f"policy evaluation error in {rule}", exc))
            if rule == "require_approval":
                values.require_approval = True
    return decide(values, engine=ENGINE_NAME, package=compiled.package)


class CompiledPolicyCache:
    """A per-thread LRU of compiled rulesets keyed by ``ruleset_hash``."""

    def __init__(self, maxsize: int = DEFAULT_CACHE_SIZE):
        self.maxsize = maxsize
        self._local = threading.local()

    def _entries(self) -> OrderedDict:
        entries = getattr(self._local, "entries", None)
        if entries is None:
            entries = self._local.entries = OrderedDict()
            self._local.hits = self._local.misses = 0
        return entries

    def get(self, *, ruleset: str, ruleset_hash: str) -> CompiledPolicy:
        entries = self._entries()
        compiled = entries.get(ruleset_hash)
        if compiled is not None:
            entries.move_to_end(ruleset_hash)
            self._local.hits += 1
            return compiled
        self._local.misses += 1
        compiled = compile_ruleset(ruleset=ruleset, ruleset_hash=ruleset_hash)
        entries[ruleset_hash] = compiled
        while len(entries) > self.maxsize:
            entries.popitem(last=False)
        return compiled

    def clear(self) -> None:
        self._entries().clear()
        self._local.hits = self._local.misses = 0

    def stats(self) -> dict[str, int]:
        """This thread's cache figures: ``size``, ``hits``, ``misses``."""
        entries = self._entries()
        return {"size": len(entries), "hits": self._local.hits, "misses": self._local.misses}


cache = CompiledPolicyCache()


def evaluate(*, ruleset: str, ruleset_hash: str, input: dict[str, Any], use_cache: bool = True) -> EvaluationResult:
    compiled = (cache.get(ruleset=ruleset, ruleset_hash=ruleset_hash) if use_cache
                else compile_ruleset(ruleset=ruleset, ruleset_hash=ruleset_hash))
    return evaluate_compiled(compiled, input)
