"""The optional OPA server backend (``AGP_OPA_URL``), through OPA's Data API.

``POST <AGP_OPA_URL>/v1/data/<package path>?strict-builtin-errors=true`` with
``{"input": ...}``; the answer's ``result`` is the package document, from which
``allow``, ``require_approval`` and ``deny`` are read exactly as for the embedded engine.
``strict-builtin-errors`` makes OPA report a builtin error (a division by zero, ...)
instead of silently leaving the rule undefined, so both engines fail closed alike.

Every transport or protocol problem (refused connection, timeout, non-200 status,
a body that is not the Data API's shape) becomes ``allow: false`` with the reason.
"""

import re
import threading
from typing import Any

import requests

from agp_project.exactjson import dumps

from .result import EvaluationResult, RuleValues, clean_error, decide, failure

ENGINE_NAME = "opa"
_SIMPLE_PACKAGE = re.compile(r"^data(\.[A-Za-z_][A-Za-z0-9_]*)+$")
_local = threading.local()


def _session() -> requests.Session:
    # requests does not promise that one Session is safe across threads: one per thread.
    session = getattr(_local, "session", None)
    if session is None:
        session = _local.session = requests.Session()
    return session


def package_url(base_url: str, package: str) -> str | None:
    """``data.agp.payments`` -> ``<base>/v1/data/agp/payments``; None for bracketed paths."""
    if not _SIMPLE_PACKAGE.match(package):
        return None
    return f"{base_url.rstrip('/')}/v1/data/{package[len('data.'):].replace('.', '/')}"


def evaluate(*, base_url: str, package: str, input: dict[str, Any], timeout: float) -> EvaluationResult:
    url = package_url(base_url, package)
    if url is None:
        return failure(f"policy evaluation error: package {package!r} has no OPA Data API path",
                       engine=ENGINE_NAME, package=package)
    try:
        # Exact numbers (a Decimal input member is its JSON number, not a float's).
        response = _session().post(url, params={"strict-builtin-errors": "true"},
                                   data=dumps({"input": input}).encode("utf-8"),
                                   headers={"Content-Type": "application/json"}, timeout=timeout)
    except requests.RequestException as exc:
        return failure(clean_error("OPA unreachable", exc), engine=ENGINE_NAME, package=package)
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code != 200:
        detail = ""
        if isinstance(body, dict):
            detail = f"{body.get('code', '')}: {body.get('message', '')}".strip(": ")
        return failure(f"OPA evaluation error: HTTP {response.status_code}" + (f" {detail}" if detail else ""),
                       engine=ENGINE_NAME, package=package)
    if not isinstance(body, dict):
        return failure("OPA evaluation error: the response is not a JSON object", engine=ENGINE_NAME,
                       package=package)
    document = body.get("result", {})  # no "result": the package is undefined in OPA
    if not isinstance(document, dict):
        return failure("OPA evaluation error: the package document is not an object", engine=ENGINE_NAME,
                       package=package)
    values = RuleValues(allow=document.get("allow"), require_approval=document.get("require_approval"),
                        deny=document.get("deny"), approvals_required=document.get("approvals_required"),
                        signed_approvals_required=document.get("signed_approvals_required"))

    return decide(values, engine=ENGINE_NAME, package=package)
