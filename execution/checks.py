"""The ten fail-closed checks of an action envelope (CONTRACT C8).

``envelope_checks`` runs every check, even after one has failed, and returns a
``CheckReport`` listing each check's outcome and the references the checks resolved
(delegation, approval, commerce session, allowed parameter ranges, parameters hash).

The checks read the database in two statements (a third only when a delegation other
than the preferred one turns out to be the usable one for a ``transact`` action), whatever
the size of the tables (pinned by tests/execution/test_checks.py):

1. one row joining every single-row lookup: the task, the capability with its revocation
   flags, the skill, the decision, the policy evaluation with its policy set, the newest
   impact assessment, the newest standing approval, the liability binding, the commerce
   session, at execution the envelope's own payment, and at submission an envelope already
   accepted with the same ``action_id`` (a 409); multiplied by the agent's
   delegation candidates and the blocking escalations (a handful of rows at most);
2. every link of the candidates' chains by primary key (the materialised paths name
   them), each with whether an agent it was granted to or by is revoked; for
   ``transact``, joined with the spending under each link of the preferred candidate's
   chain (one conditional aggregate over the root's subtree).

Every lookup is by a unique key or an indexed filter with ``LIMIT``. Each part of a
statement is an ordinary queryset, the decision and registry selectors' own where they
define a rule, so the rules have one definition. Building and compiling a queryset costs
about 0.7 ms of Python per query here, many times what the database spends answering
these lookups; the parts have the same shape on every call and only their arguments
change, so each statement is compiled once per process and backend (with placeholder
arguments) and a call only puts its values into the parameter list (``_Statement``).
Values come back through the converters Django itself would apply, so money, datetimes,
booleans and JSON have the types the ORM gives them on PostgreSQL and SQLite alike.

The same function serves three callers:

- submission (``execution.services``): the envelope as received;
- execution (``envelope_recheck``): the stored inputs, counting the envelope's own budget
  reservation as its own, and the commerce session pinned to the one reserved on;
- replay (``execution.replay``): the stored inputs against today's state.
"""

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from types import SimpleNamespace
from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db import connection as default_connection
from django.db.models import Case, DecimalField, Exists, F, IntegerField, OuterRef, Q, QuerySet, Subquery, Value, When
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agp_project.canonical import content_hash
from agp_project.db import bind_slots, convert_row, holds_placeholder, prepared_cursor, text_placeholder
from decision.models import CommerceSession, Decision, PolicyEvaluation
from decision.selectors import (
    approvals_standing,
    escalations_blocking,
    impact_assessment_required,
    impact_assessments_newest_first,
)
from registry.models import Capability, Delegation, LiabilityBinding, Revocation, Skill, Task, path_pks
from registry.scopes import scope_covers, tool_scope
from registry.selectors import delegation_links, delegation_links_problem
from registry.tool_pins import mcp_pins_problem

from .choices import PaymentStatus
from .models import ActionEnvelope, Payment

CHECK_NAMES = (
    "task",
    "delegation",
    "capability",
    "decision",
    "policy_evaluation",
    "impact_assessment",
    "approval",
    "escalation",
    "commerce",
    "created_at",
)

CLOCK_SKEW = timedelta(seconds=60)
# Candidates examined for check 2; an agent with more active delegations under one root
# principal than this, all broken but an older one, is refused (fail closed).
MAX_DELEGATION_CANDIDATES = 20
MONEY = DecimalField(max_digits=20, decimal_places=4)
ZERO = Decimal("0")
AMOUNT_QUANTUM = Decimal("0.0001")
MAX_AMOUNT = Decimal("1e14")  # DecimalField(max_digits=18, decimal_places=4)


@dataclass(frozen=True)
class EnvelopeInputs:
    """What the client submitted (after parsing), as stored in ``ActionEnvelope.inputs``."""

    action_id: str
    task_id: str
    agent_id: str
    tool_id: str
    operation: str
    capability_token_ref: str
    decision_ref: str
    policy_decision_ref: str
    created_at: datetime
    parameters: dict[str, Any] = field(default_factory=dict)
    callback_url: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "action_id": self.action_id, "task_id": self.task_id, "agent_id": self.agent_id,
            "tool_id": self.tool_id, "operation": self.operation,
            "capability_token_ref": self.capability_token_ref, "decision_ref": self.decision_ref,
            "policy_decision_ref": self.policy_decision_ref,
            "created_at": self.created_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "parameters": self.parameters, "callback_url": self.callback_url,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "EnvelopeInputs":
        created_at = data["created_at"]
        if isinstance(created_at, str):
            created_at = parse_datetime(created_at)
        return cls(action_id=data["action_id"], task_id=data["task_id"], agent_id=data["agent_id"],
                   tool_id=data["tool_id"], operation=data["operation"],
                   capability_token_ref=data["capability_token_ref"], decision_ref=data["decision_ref"],
                   policy_decision_ref=data["policy_decision_ref"], created_at=created_at,
                   parameters=data.get("parameters") or {}, callback_url=data.get("callback_url") or "")

    @property
    def parameters_hash(self) -> str:
        return content_hash(self.parameters)


@dataclass(frozen=True)
class OwnReservation:
    """An amount already held by the envelope being re-checked (its Payment row)."""

    session_id: str
    reserved: Decimal  # the part still counted in ``reserved_amount``
    spent: Decimal  # the part already moved into ``spent_amount``


@dataclass
class CheckReport:
    """Every check's outcome plus the references the checks resolved."""

    results: list[dict[str, Any]]
    action_class: str | None = None
    delegation_ref: str | None = None
    approval_ref: str | None = None
    approval_conditions: list[str] = field(default_factory=list)
    commerce_session_ref: str | None = None
    amount: Decimal | None = None
    currency: str | None = None
    allowed_parameter_ranges: dict[str, Any] = field(default_factory=dict)
    parameters_hash: str = ""
    skill_id: str | None = None
    # How the skill executes (the worker needs them; read with the skill, not again).
    skill_connector: str | None = None
    skill_endpoint_url: str = ""
    skill_tool_pins: list[dict[str, str]] = field(default_factory=list)
    chain_delegation_pks: list[int] = field(default_factory=list)
    # A submission whose action_id names an envelope already accepted: no check ran.
    already_accepted: bool = False

    @property
    def passed(self) -> bool:
        return not self.already_accepted and all(result["passed"] for result in self.results)

    @property
    def failed(self) -> list[dict[str, str]]:
        """The failed checks as ``details.failed_checks`` lists them: ``{"check", "reason"}``."""
        return [{"check": r["check"], "reason": r["reason"]} for r in self.results if not r["passed"]]

    @property
    def verdict(self) -> str:
        return "cleared" if self.passed else "rejected"

    def result(self, check: str) -> dict[str, Any]:
        return next(r for r in self.results if r["check"] == check)


class _Results:
    def __init__(self):
        self.items: dict[str, dict[str, Any]] = {}

    def ok(self, check: str, reason: str) -> None:
        self.items[check] = {"check": check, "passed": True, "reason": reason}

    def fail(self, check: str, *reasons: str) -> None:
        self.items[check] = {"check": check, "passed": False, "reason": "; ".join(reasons)}

    def ordered(self) -> list[dict[str, Any]]:
        return [self.items[name] for name in CHECK_NAMES]


def _expired(value: datetime | None, now: datetime) -> bool:
    return value is not None and value <= now


def _to_decimal(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def parameters_violations(parameters: dict[str, Any], ranges: dict[str, Any]) -> list[str]:
    """Every way ``parameters`` leave the capability's ``allowed_parameter_ranges``.

    A range is ``{"min": n, "max": n}`` (either bound optional) or ``{"enum": [...]}``. A
    parameter the ranges do not name is unconstrained; a named parameter that is absent
    is not checked (there is nothing to bound). A range of any other shape fails closed.
    """
    problems = []
    for name in sorted(ranges):
        spec = ranges[name]
        if name not in parameters:
            continue
        value = parameters[name]
        if not isinstance(spec, dict) or not spec or set(spec) - {"min", "max", "enum"}:
            problems.append(f"parameter {name!r} has an unsupported range {spec!r}")
            continue
        if "enum" in spec:
            allowed = spec["enum"]
            if not isinstance(allowed, list) or value not in allowed or isinstance(value, bool) != any(
                    isinstance(item, bool) and item == value for item in allowed):
                problems.append(f"parameter {name!r}={value!r} is not one of {allowed!r}")
            continue
        number = _to_decimal(value) if not isinstance(value, str) else None
        if number is None:
            problems.append(f"parameter {name!r}={value!r} is not a number")
            continue
        low, high = _to_decimal(spec.get("min")), _to_decimal(spec.get("max"))
        if ("min" in spec and low is None) or ("max" in spec and high is None):
            problems.append(f"parameter {name!r} has an unsupported range {spec!r}")
        elif low is not None and number < low:
            problems.append(f"parameter {name!r}={value!r} is below the minimum {spec['min']!r}")
        elif high is not None and number > high:
            problems.append(f"parameter {name!r}={value!r} is above the maximum {spec['max']!r}")
    return problems


# --- reading the state: statements compiled once, run with each call's values ---------------------------
@dataclass(frozen=True)
class _Slot:
    """An argument of a compiled statement: the placeholder it was compiled with, and how
    the ORM turns a value of its kind into a parameter (the placeholder went the same way)."""

    placeholder: Any
    adapt: Callable[[Any, Any], Any]  # (connection, value) -> parameter


def _text(name: str) -> _Slot:
    return _Slot(text_placeholder(name), lambda connection, value: value)


def _key(index: int) -> _Slot:
    return _Slot(-(10 ** 15) - index,
                 lambda connection, value: Delegation._meta.pk.get_db_prep_value(value, connection))


_NOW = _Slot(datetime(1970, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
             lambda connection, value: connection.ops.adapt_datetimefield_value(value))
_AMOUNT = _Slot(Decimal("-987654321.0123"), lambda connection, value: connection.ops.adapt_decimalfield_value(value))
_STATE_SLOTS = {name: _text(name) for name in ("task_id", "agent_id", "tool_id", "capability_id", "decision_id",
                                               "evaluation_id", "action_id", "currency", "held_on")}
_STATE_SLOTS.update(now=_NOW, amount=_AMOUNT)


@dataclass(frozen=True)
class _Part:
    """One SELECT of a statement: its SQL and parameters (placeholders included), the names
    of its columns, and Django's converters for them (``{position: (converters, expression)}``)."""

    sql: str
    params: tuple
    names: tuple[str, ...]
    converters: dict[int, tuple[list, Any]]
    many: bool  # several rows (deduplicated by the first column), or at most one


def _compiled(queryset: QuerySet, connection, *, many: bool = False) -> _Part:
    """The queryset's SQL as the ORM would run it, with the converters it would apply."""
    query = queryset.query
    compiler = query.get_compiler(connection=connection)
    sql, params = compiler.as_sql()
    names = list(query.selected) if query.selected else [*query.extra_select, *query.values_select,
                                                          *query.annotation_select]
    converters = compiler.get_converters([column for column, _, _ in compiler.select[:compiler.col_count]])
    return _Part(sql=sql, params=tuple(params), names=tuple(names), converters=converters, many=many)


class _Statement:
    """Parts joined into one statement, compiled once; ``run`` substitutes the slots' values.

    ``SELECT * FROM (SELECT 1) LEFT JOIN (part) ON 1 = 1 ...``: a part of at most one row
    adds its columns (NULL when it found nothing), a part of several rows multiplies the
    row. Every part selects its primary key first, so presence and identity are read from
    that column.
    """

    def __init__(self, parts: dict[str, _Part], slots: dict[str, _Slot], connection):
        quote = connection.ops.quote_name
        joins, params, self.layout = [], [], []
        position = 1
        for number, (name, part) in enumerate(parts.items()):
            alias = quote(f"agp_part_{number}")
            joins.append(f"LEFT JOIN ({part.sql}) {alias} ON 1 = 1")
            params.extend(part.params)
            self.layout.append((name, position, part))
            position += len(part.names)
        self.sql = f"SELECT * FROM (SELECT 1 AS {quote('agp_one')}) {quote('agp_one')} " + " ".join(joins)
        self.params = params
        # Which parameters are slots: the compiled placeholder, adapted as the ORM adapts values.
        adapted = {name: slot.adapt(connection, slot.placeholder) for name, slot in slots.items()}
        self.slots = []
        for index, param in enumerate(params):
            for name, placeholder in adapted.items():
                if type(param) is type(placeholder) and param == placeholder:
                    self.slots.append((index, name))
                    break
            else:
                if holds_placeholder(param):
                    raise RuntimeError(f"a check's query transformed a placeholder: {param!r}")
        if holds_placeholder(self.sql):
            raise RuntimeError("a check's query inlined a placeholder into its SQL")
        self.slot_kinds = slots

    def run(self, values: dict[str, Any], connection) -> dict[str, Any]:
        """``{part: row or None}`` for single-row parts, ``{part: [rows]}`` for the others."""
        adapted = {name: self.slot_kinds[name].adapt(connection, value) for name, value in values.items()}
        with prepared_cursor(connection) as cursor:
            cursor.execute(self.sql, bind_slots(self.params, self.slots, adapted))
            rows = cursor.fetchall()
        result = {}
        for name, start, part in self.layout:
            if part.many:
                seen, found = set(), []
                for row in rows:
                    key = row[start]
                    if key is not None and key not in seen:
                        seen.add(key)
                        found.append(_row(row, start, part, connection))
                result[name] = found
            else:
                result[name] = _row(rows[0], start, part, connection) if rows[0][start] is not None else None
        return result


def _row(row: tuple, start: int, part: _Part, connection) -> SimpleNamespace:
    values = convert_row(list(row[start:start + len(part.names)]), part.converters, connection)
    return SimpleNamespace(**dict(zip(part.names, values)))


_STATEMENTS: dict[tuple, _Statement] = {}


def _statement(connection, key: tuple, build: Callable[[], tuple[dict[str, _Part], dict[str, _Slot]]]) -> _Statement:
    """The statement for ``key`` on this connection's backend, compiled on first use."""
    key = (connection.alias, connection.vendor, *key)
    statement = _STATEMENTS.get(key)
    if statement is None:
        statement = _STATEMENTS[key] = _Statement(*build(), connection)
    return statement


def _unexpired(now: datetime, prefix: str = "") -> Q:
    return Q(**{f"{prefix}expires_at__isnull": True}) | Q(**{f"{prefix}expires_at__gt": now})


def _revoked(target_type: str, ref: Any) -> Exists:
    return Exists(Revocation.objects.filter(target_type=target_type, target_id=ref))


def _state_parts(connection, *, targets: tuple[bool, bool, bool], held: bool, new: bool) -> dict[str, _Part]:
    """Statement 1's parts, built with the slots' placeholders (``a.<slot>``).

    ``targets``: which of task, decision and action name escalations (the selector leaves
    out an empty one); ``held``: the envelope holds a reservation (execution, replay), so
    its session is pinned and its payment read; ``new``: a submission, so an envelope
    already accepted with its action_id is looked for.
    """
    a = SimpleNamespace(**{name: slot.placeholder for name, slot in _STATE_SLOTS.items()})
    root_principal = Subquery(Task.objects.filter(task_id=a.task_id).values("root_principal")[:1])
    issued_under = Subquery(Capability.objects.filter(capability_id=a.capability_id).values("delegation_id")[:1])
    sessions = CommerceSession.objects.filter(task_id=a.task_id, agent_id=a.agent_id)
    if held:
        sessions = sessions.filter(session_id=a.held_on)
    else:
        # The open, unexpired session for the task and agent that fits best (currency, then room).
        sessions = (sessions.filter(status="open").filter(_unexpired(a.now))
                    .annotate(currency_rank=Case(When(currency=a.currency, then=Value(0)), default=Value(1),
                                                 output_field=IntegerField()),
                              room_rank=Case(When(Q(amount_limit__gte=F("spent_amount") + F("reserved_amount")
                                                    + Value(a.amount, output_field=MONEY)), then=Value(0)),
                                             default=Value(1), output_field=IntegerField()))
                    .order_by("currency_rank", "room_rank", "created_at", "pk"))
    querysets = {
        "task": Task.objects.filter(task_id=a.task_id)
        .values("id", "task_id", "status", "action_class", "risk_level", "root_principal")[:1],
        "capability": Capability.objects.filter(capability_id=a.capability_id)
        .annotate(revoked_record=_revoked("capability", OuterRef("capability_id")),
                  agent_revoked=_revoked("agent", OuterRef("agent_id")))
        .values("id", "capability_id", "agent_id", "delegation_id", "tool_id", "operations",
                "allowed_parameter_ranges", "expires_at", "status", "revoked_record", "agent_revoked")[:1],
        "skill": Skill.objects.filter(agent_id=a.agent_id, tool_id=a.tool_id, status="active")
        .exclude(_revoked("skill", OuterRef("skill_id")))
        .exclude(_revoked("agent", OuterRef("agent_id")))
        .order_by("-created_at", "-pk").values("id", "skill_id", "connector", "endpoint_url", "tool_pins")[:1],
        "decision": Decision.objects.filter(decision_id=a.decision_id)
        .values("id", "decision_id", "task_id", "status", "outcome")[:1],
        "evaluation": PolicyEvaluation.objects.filter(evaluation_id=a.evaluation_id)
        .values("id", "evaluation_id", "task_id", "agent_id", "allowed", "result", "require_approval",
                "ruleset_hash", policy_set_ref=F("policy_set__policy_set_id"),
                policy_set_status=F("policy_set__status"), policy_set_ruleset_hash=F("policy_set__ruleset_hash"))[:1],
        "assessment": impact_assessments_newest_first(task=a.task_id, decision=a.decision_id)
        .values("id", "assessment_id", "recommendation")[:1],
        "approval": approvals_standing(decision=a.decision_id, now=a.now)
        .values("id", "approval_id", "approver", "conditions", "rejected_later")[:1],
        "binding": LiabilityBinding.objects.filter(agent_id=a.agent_id, root_principal=root_principal, status="active")
        .filter(_unexpired(a.now))
        .exclude(_revoked("liability_binding", OuterRef("binding_id")))
        .order_by("-created_at", "-pk").values("id", "binding_id", "coverage_currency", "coverage_amount")[:1],
        "session": sessions.values("id", "session_id", "status", "expires_at", "currency", "amount_limit",
                                   "spent_amount", "reserved_amount", "delegation_id",
                                   delegation_path=F("delegation__path"))[:1],
    }
    if held:
        querysets["payment"] = Payment.objects.filter(envelope_id=a.action_id).values("id", "status", "amount")[:1]
    if new:
        querysets["existing"] = ActionEnvelope.objects.filter(action_id=a.action_id).values("id")[:1]
    parts = {name: _compiled(queryset, connection) for name, queryset in querysets.items()}
    task_id, decision_id, action_id = (value if given else None for value, given in
                                       zip((a.task_id, a.decision_id, a.action_id), targets))
    with contextlib.suppress(EmptyResultSet):  # nothing named: no escalation can block
        parts["escalations"] = _compiled(
            escalations_blocking(task_id=task_id, decision_id=decision_id, action_id=action_id)
            .values("id", "escalation_id", "status")[:5], connection, many=True)
    # Check 2's candidates: the agent's active, unexpired delegations for the root principal,
    # the one the capability was issued under first, then newest by server order (as C5
    # parent discovery), not by the client-settable accepted_at.
    parts["candidates"] = _compiled(
        Delegation.objects.filter(delegate_agent=a.agent_id, root_principal=root_principal, status="active")
        .filter(_unexpired(a.now))
        .annotate(preferred=Case(When(delegation_id=issued_under, then=Value(0)), default=Value(1),
                                 output_field=IntegerField()))
        .order_by("preferred", "-pk")
        .values("id", "delegation_id", "path", "authority_scope", "preferred")[:MAX_DELEGATION_CANDIDATES],
        connection, many=True)
    return parts


def _state(*, inputs: EnvelopeInputs, now: datetime, held_on: str | None, new: bool, connection) -> dict[str, Any]:
    """Statement 1 (see the module docstring)."""
    targets = (bool(inputs.task_id), bool(inputs.decision_ref), bool(inputs.action_id))
    held = bool(held_on)
    statement = _statement(connection, ("state", targets, held, new),
                           lambda: (_state_parts(connection, targets=targets, held=held, new=new), _STATE_SLOTS))
    amount = _to_decimal(inputs.parameters.get("amount"))
    currency = inputs.parameters.get("currency")
    return statement.run({
        "task_id": inputs.task_id, "agent_id": inputs.agent_id, "tool_id": inputs.tool_id,
        "capability_id": inputs.capability_token_ref, "decision_id": inputs.decision_ref,
        "evaluation_id": inputs.policy_decision_ref, "action_id": inputs.action_id,
        "currency": currency if _is_currency(currency) else "",
        "held_on": held_on or "", "now": now, "amount": _room_amount(amount)}, connection)


def _room_amount(amount: Decimal | None) -> Decimal:
    """The amount the session's room is ranked by: the usable amount, else nothing."""
    return ZERO if _amount_problem(amount) else amount


def _amount_problem(amount: Decimal | None) -> str | None:
    """Why ``amount`` cannot be transacted, or None when it can."""
    if amount is None or amount <= 0:
        return "a transact action needs parameters.amount, a number greater than 0"
    # Compared with the limit first: quantizing an amount beyond Decimal's precision raises.
    if amount >= MAX_AMOUNT or amount != amount.quantize(AMOUNT_QUANTUM):
        # Amounts are stored with 4 decimal places: a finer amount would be rounded on one
        # side of the ledger and not the other.
        return f"parameters.amount {amount} has more than 4 decimal places or is too large"
    return None


def _is_currency(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 3


def _spending_part(connection, depth: int) -> _Part:
    """What the commerce sessions under each of ``depth`` links (paths ``prefix_<i>``) have
    spent or reserved: one conditional aggregate over the subtree of ``prefix_0``, the root.

    Written out rather than compiled from a queryset: the ORM runs aggregates at once and
    has no queryset for them to join. The path filter is the ORM's ``startswith``.
    """
    quote = connection.ops.quote_name
    sessions, links = CommerceSession._meta, Delegation._meta

    def column(alias: str, meta, name: str) -> str:
        return f"{quote(alias)}.{quote(meta.get_field(name).column)}"

    under = f"{column('agp_link', links, 'path')} {connection.operators['startswith'] % '%s'}"
    held = f"{column('agp_session', sessions, 'spent_amount')} + {column('agp_session', sessions, 'reserved_amount')}"
    sums = ", ".join(f"COALESCE(SUM(CASE WHEN {under} THEN {held} ELSE 0 END), 0) AS {quote(f'used_{i}')}"
                     for i in range(depth))
    sql = (f"SELECT 1 AS {quote('present')}, {sums} FROM {quote(sessions.db_table)} {quote('agp_session')} "
           f"INNER JOIN {quote(links.db_table)} {quote('agp_link')} ON {column('agp_link', links, 'delegation_id')} "
           f"= {column('agp_session', sessions, 'delegation')} WHERE {under}")
    params = (*(_text(f"prefix_{i}").placeholder for i in range(depth)), _text("prefix_0").placeholder)
    # The sums come back as the ORM's Coalesce(Sum(...), output_field=MONEY) would.
    money = Value(ZERO, output_field=MONEY)
    converters = connection.ops.get_db_converters(money) + money.get_db_converters(connection)
    return _Part(sql=sql, params=params, names=("present", *(f"used_{i}" for i in range(depth))),
                 converters={1 + i: (converters, money) for i in range(depth)}, many=False)


def _chains_statement(connection, *, links: int, depth: int) -> _Statement:
    """Statement 2 for ``links`` link keys (a power of two, padded) and a chain of ``depth``
    whose spending is summed (0: none); statement 3 is the same with no links."""
    def build():
        slots = {f"prefix_{i}": _text(f"prefix_{i}") for i in range(depth)}
        parts = {}
        if links:
            slots.update({f"pk_{i}": _key(i) for i in range(links)})
            parts["links"] = _compiled(
                delegation_links(pks=[slots[f"pk_{i}"].placeholder for i in range(links)])
                .values("id", "delegation_id", "path", "status", "expires_at", "authority_scope",
                        "spend_currency", "spend_amount", "agent_revoked"), connection, many=True)
        if depth:
            parts["spending"] = _spending_part(connection, depth)
        return parts, slots
    return _statement(connection, ("chains", links, depth), build)


def _chains(connection, *, pks: list[int], paths: list[str]) -> dict[str, Any]:
    """The links with these keys (``links``) and the spending under each of ``paths``
    (``spending``: ``[Decimal]`` in order, or None when no paths were given)."""
    size = max(4, 1 << (len(pks) - 1).bit_length()) if pks else 0
    values = {f"pk_{i}": pks[min(i, len(pks) - 1)] for i in range(size)}
    values.update({f"prefix_{i}": connection.ops.prep_for_like_query(path) + "%" for i, path in enumerate(paths)})
    result = _chains_statement(connection, links=size, depth=len(paths)).run(values, connection)
    spending = result.get("spending")
    if paths:
        result["spending"] = [(getattr(spending, f"used_{i}") if spending else None) or ZERO
                              for i in range(len(paths))]
    return result


def _path_prefixes(path: str) -> list[str]:
    """The materialised paths of a link's chain, root first, as its own path spells them."""
    segments = [segment + "/" for segment in path.split("/") if segment]
    return ["".join(segments[:depth + 1]) for depth in range(len(segments))]


# --- the checks -------------------------------------------------------------------------------------------
def envelope_checks(*, inputs: EnvelopeInputs, now: datetime | None = None,
                    held_on: str | None = None, new: bool = False) -> CheckReport:
    """Run all ten C8 checks on ``inputs``; never stops at the first failure.

    ``held_on``: the commerce session on which the envelope already holds a reservation
    (execution-time re-check, replay): the commerce check then uses that session and
    counts the envelope's own payment as available to it.

    ``new``: ``inputs`` is a submission (validation or acceptance). Statement 1 then also
    looks for an envelope already accepted with its ``action_id``; when there is one, no
    check runs and the report is ``already_accepted`` (and does not pass): the caller
    answers 409, as for any duplicate id.
    """
    connection = default_connection
    now = now or timezone.now()
    results = _Results()
    report = CheckReport(results=[], parameters_hash=inputs.parameters_hash)
    agent_id = inputs.agent_id
    state = _state(inputs=inputs, now=now, held_on=held_on, new=new, connection=connection)
    if new and state["existing"] is not None:
        report.already_accepted = True
        return report
    task, capability = state["task"], state["capability"]

    # 1. task ------------------------------------------------------------------------
    if task is None:
        results.fail("task", f"task {inputs.task_id!r} does not exist")
    elif task.status != "open":
        results.fail("task", f"task {task.task_id!r} is {task.status}, not open")
    else:
        results.ok("task", f"task {task.task_id!r} is open")
    report.action_class = task.action_class if task else None
    transact = task is not None and task.action_class == "transact"

    # 2. delegation: the agent's newest delegation for the root principal whose whole
    # chain is usable, preferring the one the capability was issued under. Statement 1
    # read the candidates (at most MAX_DELEGATION_CANDIDATES); statement 2 reads every
    # link of their chains by primary key (the materialised path names them), and for
    # transact the spending under the links of the first candidate's chain.
    delegation, chain, spending = None, [], None
    if task is None:
        results.fail("delegation", "no root principal to look up: the task does not exist")
    else:
        candidates = sorted(state["candidates"], key=lambda row: (row.preferred, -row.id))
        links, summed = {}, []
        if candidates:
            summed = _path_prefixes(candidates[0].path) if transact else []
            read = _chains(connection, pks=list(dict.fromkeys(
                pk for candidate in candidates for pk in path_pks(candidate.path))), paths=summed)
            links, spending = {link.id: link for link in read["links"]}, read.get("spending")
        broken = None
        for candidate in candidates:
            candidate_chain = [links.get(pk) for pk in path_pks(candidate.path)]
            # The validity rule is the registry's (one definition for C5 and C8).
            problem = (delegation_links_problem(links=candidate_chain, now=now) if candidate_chain
                       else "it has no recorded chain")
            if problem is None:
                delegation, chain = candidate, candidate_chain
                break
            broken = broken or (f"delegation {candidate.delegation_id!r} (held by the agent for root principal "
                                f"{task.root_principal!r}) is unusable: {problem}")
        if delegation is not None:
            results.ok("delegation", f"delegation {delegation.delegation_id!r} and its whole chain are active")
            report.delegation_ref = delegation.delegation_id
            report.chain_delegation_pks = [link.id for link in chain]
            if transact and [link.path for link in chain] != summed:
                # Statement 3: the usable chain is not the one whose spending was summed.
                spending = _chains(connection, pks=[], paths=[link.path for link in chain])["spending"]
        elif broken:
            results.fail("delegation", broken)
        else:
            results.fail("delegation", f"agent {agent_id!r} holds no active, unexpired delegation for root "
                                       f"principal {task.root_principal!r}")

    # 3. capability -------------------------------------------------------------------
    skill = state["skill"]
    problems = []
    if capability is None:
        problems.append(f"capability {inputs.capability_token_ref!r} does not exist")
    else:
        report.allowed_parameter_ranges = capability.allowed_parameter_ranges or {}
        if capability.status != "active" or capability.revoked_record or capability.agent_revoked:
            problems.append(f"capability {capability.capability_id!r} is revoked")
        if _expired(capability.expires_at, now):
            problems.append(f"capability {capability.capability_id!r} expired at {capability.expires_at.isoformat()}")
        if capability.agent_id != agent_id:
            problems.append(f"capability {capability.capability_id!r} belongs to another agent")
        if capability.tool_id != inputs.tool_id:
            problems.append(f"capability {capability.capability_id!r} is for tool {capability.tool_id!r}, "
                            f"not {inputs.tool_id!r}")
        operations = capability.operations or []
        if inputs.operation not in operations and "*" not in operations:
            problems.append(f"capability {capability.capability_id!r} does not cover operation "
                            f"{inputs.operation!r}")
        if delegation is not None:
            # Without a usable delegation check 2 already fails: the scope rule has no
            # delegation to be measured against, and the verdict is rejected either way.
            wanted = tool_scope(inputs.tool_id, inputs.operation)
            if capability.delegation_id != delegation.delegation_id:
                problems.append(f"capability {capability.capability_id!r} was issued under delegation "
                                f"{capability.delegation_id!r}, not the agent's active delegation "
                                f"{delegation.delegation_id!r}")
            elif not scope_covers(delegation.authority_scope or [], wanted):
                problems.append(f"{wanted!r} lies outside the authority scope of delegation "
                                f"{delegation.delegation_id!r}")
        problems.extend(parameters_violations(inputs.parameters, report.allowed_parameter_ranges))
    if skill is None:
        problems.append(f"agent {agent_id!r} has no active skill for tool {inputs.tool_id!r}")
    else:
        report.skill_id = skill.skill_id
        report.skill_connector, report.skill_endpoint_url = skill.connector, skill.endpoint_url
        report.skill_tool_pins = skill.tool_pins or []
        if skill.connector == "mcp":
            # C16: the operations are tools the skill pinned at registration.
            granted = (capability.operations or []) if capability is not None else []
            problem = mcp_pins_problem(skill.tool_pins, [*granted, inputs.operation])
            if problem:
                problems.append(f"skill {skill.skill_id!r}: {problem}")
    if problems:
        results.fail("capability", *problems)
    else:
        results.ok("capability", f"capability {capability.capability_id!r} covers {inputs.tool_id}:"
                                 f"{inputs.operation} within delegation scope; skill {skill.skill_id!r}")

    # 4. decision ---------------------------------------------------------------------
    decision = state["decision"]
    problems = []
    if decision is None:
        problems.append(f"decision {inputs.decision_ref!r} does not exist")
    else:
        if decision.task_id != inputs.task_id:
            problems.append(f"decision {decision.decision_id!r} is for another task")
        if decision.status != "finalised":
            problems.append(f"decision {decision.decision_id!r} is {decision.status}, not finalised")
        if decision.outcome != "approve":
            problems.append(f"decision {decision.decision_id!r} has outcome {decision.outcome!r}, not approve")
    if problems:
        results.fail("decision", *problems)
    else:
        results.ok("decision", f"decision {decision.decision_id!r} is finalised with outcome approve")

    # 5. policy evaluation ------------------------------------------------------------
    evaluation = state["evaluation"]
    problems = []
    if evaluation is None:
        problems.append(f"policy evaluation {inputs.policy_decision_ref!r} does not exist")
    else:
        if evaluation.task_id != inputs.task_id:
            problems.append(f"policy evaluation {evaluation.evaluation_id!r} is for another task")
        if evaluation.agent_id != agent_id:
            problems.append(f"policy evaluation {evaluation.evaluation_id!r} is for another agent")
        if not evaluation.allowed or not (evaluation.result or {}).get("allow", False):
            reasons = (evaluation.result or {}).get("reasons") or []
            problems.append(f"policy evaluation {evaluation.evaluation_id!r} did not allow the action"
                            + (f" ({', '.join(map(str, reasons))})" if reasons else ""))
        if evaluation.policy_set_status == "revoked":
            problems.append(f"policy set {evaluation.policy_set_ref!r} is revoked")
        if evaluation.policy_set_ruleset_hash != evaluation.ruleset_hash:
            problems.append(f"policy set {evaluation.policy_set_ref!r} ruleset changed since the evaluation")
    if problems:
        results.fail("policy_evaluation", *problems)
    else:
        results.ok("policy_evaluation", f"policy evaluation {evaluation.evaluation_id!r} allowed the action "
                                        f"under policy set {evaluation.policy_set_ref!r}")

    # 6. impact assessment (C7 rule 5) ------------------------------------------------
    if task is None:
        results.fail("impact_assessment", "cannot tell whether an impact assessment is required: no task")
    elif impact_assessment_required(task=task):
        assessment = state["assessment"]
        if assessment is None:
            results.fail("impact_assessment", f"a {task.risk_level} {task.action_class} task needs an impact "
                                              f"assessment for decision {inputs.decision_ref!r}")
        elif assessment.recommendation == "do_not_proceed":
            results.fail("impact_assessment", f"impact assessment {assessment.assessment_id!r} recommends "
                                              f"do_not_proceed")
        else:
            results.ok("impact_assessment", f"impact assessment {assessment.assessment_id!r} recommends "
                                            f"{assessment.recommendation}")
    else:
        results.ok("impact_assessment", "not required for this task's risk level and action class")

    # 7. approval ---------------------------------------------------------------------
    # The newest approved, unexpired approval of the decision, unless a later approval
    # rejected it (approvals are immutable, so a later rejection is how one is withdrawn).
    approval = state["approval"]
    usable = approval is not None and not approval.rejected_later
    required_because = []
    if task is not None and task.risk_level == "critical":
        required_because.append("the task is critical")
    if evaluation is not None and evaluation.require_approval:
        required_because.append("the policy evaluation requires approval")
    if usable:
        report.approval_ref = approval.approval_id
        report.approval_conditions = [str(item) for item in (approval.conditions or [])]
        results.ok("approval", f"approval {approval.approval_id!r} by {approval.approver!r} is approved and "
                               f"unexpired")
    elif required_because:
        why = " and ".join(required_because)
        if approval is not None:
            results.fail("approval", f"approval is required ({why}); approval {approval.approval_id!r} was "
                                     f"rejected by a later approval")
        else:
            results.fail("approval", f"approval is required ({why}) but decision {inputs.decision_ref!r} has no "
                                     f"approved, unexpired approval")
    else:
        results.ok("approval", "not required")

    # 8. escalation -------------------------------------------------------------------
    blocking = sorted(state.get("escalations", []), key=lambda row: -row.id)
    if blocking:
        names = ", ".join(f"{row.escalation_id!r} ({'open' if row.status == 'open' else 'upheld'})"
                          for row in blocking)
        results.fail("escalation", f"blocking escalation(s) on the task, decision or action: {names}")
    else:
        results.ok("escalation", "no open or upheld escalation")

    # 9. commerce ---------------------------------------------------------------------
    if task is None:
        results.fail("commerce", "cannot tell whether the action transacts: no task")
    elif transact:
        own = None
        if held_on:
            payment = state["payment"]
            status, amount = (payment.status, payment.amount) if payment is not None else (None, ZERO)
            own = OwnReservation(session_id=held_on, reserved=amount if status == PaymentStatus.RESERVED else ZERO,
                                 spent=amount if status == PaymentStatus.COMMITTED else ZERO)
        _check_commerce(inputs=inputs, task=task, delegation=delegation, chain=chain, spending=spending,
                        session=state["session"], binding=state["binding"], now=now, own=own,
                        results=results, report=report)
    else:
        results.ok("commerce", f"not required for action class {task.action_class}")

    # 10. created_at ------------------------------------------------------------------
    if inputs.created_at > now + CLOCK_SKEW:
        results.fail("created_at", f"created_at {inputs.created_at.isoformat()} is more than "
                                   f"{int(CLOCK_SKEW.total_seconds())} s in the future")
    else:
        results.ok("created_at", "not in the future")

    report.results = results.ordered()
    return report


def _check_commerce(*, inputs: EnvelopeInputs, task: SimpleNamespace, delegation: SimpleNamespace | None,
                    chain: list[SimpleNamespace], spending: list[Decimal] | None, session: SimpleNamespace | None,
                    binding: SimpleNamespace | None, now: datetime, own: OwnReservation | None, results: _Results,
                    report: CheckReport) -> None:
    """Check 9 for ``transact``: session with room, chain spend limits, liability binding.

    No query of its own: statement 1 read the session and the binding, statement 2 (or
    3) the spending under each link of the chain.
    """
    problems = []
    amount = _to_decimal(inputs.parameters.get("amount"))
    currency = inputs.parameters.get("currency")
    problem = _amount_problem(amount)
    if problem:
        problems.append(problem)
        amount = None
    if not _is_currency(currency):
        problems.append("a transact action needs parameters.currency, a 3-letter currency code")
        currency = None
    report.amount, report.currency = amount, currency

    # The session: pinned when the envelope already holds a reservation; otherwise the
    # open, unexpired session for the task and agent that fits best (currency, then room).
    if session is None:
        problems.append(f"no open, unexpired commerce session for task {task.task_id!r} and agent "
                        f"{inputs.agent_id!r}")
    else:
        report.commerce_session_ref = session.session_id
        if session.status != "open":
            problems.append(f"commerce session {session.session_id!r} is {session.status}")
        if _expired(session.expires_at, now):
            problems.append(f"commerce session {session.session_id!r} has expired")
        if currency is not None and session.currency != currency:
            problems.append(f"commerce session {session.session_id!r} is in {session.currency}, not {currency}")
        if amount is not None:
            own_held = (own.reserved + own.spent) if own is not None else ZERO
            room = session.amount_limit - session.spent_amount - session.reserved_amount + own_held
            if amount > room:
                problems.append(f"commerce session {session.session_id!r} has {room} {session.currency} left, "
                                f"less than {amount}")

    # The delegation's spend limit, for every link of the agent's chain: what all sessions
    # under a link (its own and its descendants') have spent or reserved, plus this
    # amount, stays within that link's limit.
    if delegation is not None:
        # Without a usable delegation check 2 already fails (and the verdict with it):
        # there is no chain whose spend limits could be measured.
        if session is not None and session.delegation_id not in {link.delegation_id for link in chain}:
            problems.append(f"commerce session {session.session_id!r} is under delegation "
                            f"{session.delegation_id!r}, outside the agent's delegation chain")
        for link, used in zip(chain, spending, strict=True):
            if link.spend_currency is None or link.spend_amount is None:
                problems.append(f"delegation {link.delegation_id!r} grants no spending authority (no spend_limit)")
                continue
            if currency is not None and link.spend_currency != currency:
                problems.append(f"delegation {link.delegation_id!r} spend limit is in {link.spend_currency}, "
                                f"not {currency}")
                continue
            if amount is None:
                continue
            if own is not None and session is not None and session.delegation_path.startswith(link.path):
                used -= own.reserved + own.spent
            if used + amount > link.spend_amount:
                problems.append(f"delegation {link.delegation_id!r} spend limit {link.spend_amount} "
                                f"{link.spend_currency} would be exceeded ({used} already spent or reserved)")

    if binding is None:
        problems.append(f"agent {inputs.agent_id!r} has no active liability binding for root principal "
                        f"{task.root_principal!r}")
    elif binding.coverage_amount is not None and amount is not None and (
            binding.coverage_currency != currency or amount > binding.coverage_amount):
        problems.append(f"liability binding {binding.binding_id!r} covers {binding.coverage_amount} "
                        f"{binding.coverage_currency}, not {amount} {currency}")

    if problems:
        results.fail("commerce", *problems)
    else:
        results.ok("commerce", f"{amount} {currency} fits commerce session {session.session_id!r}, the spend "
                               f"limits of the delegation chain, and liability binding {binding.binding_id!r}")


def envelope_recheck(*, envelope, now: datetime | None = None) -> CheckReport:
    """Re-run all ten checks on a stored envelope's inputs, against the state of ``now``.

    The envelope's own reservation (or committed payment) counts as its own: the commerce
    check uses the session it reserved on and does not count its amount twice.
    """
    return envelope_checks(inputs=EnvelopeInputs.from_json(envelope.inputs), now=now,
                           held_on=envelope.commerce_session_ref or None)
