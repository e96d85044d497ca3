"""Strict request parsing and rendering of registry resources (docs/reference/api.md, docs/reference/governance.md).

One serializer per resource for request and response: server-set fields are read-only
(sending them is a 400), unknown fields are a 400. Business rules live in services.
"""

import math
import re
from decimal import Decimal
from urllib.parse import urlsplit

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agp_project.http.serializers import (
    IdField,
    MoneySerializer,
    PatternField,
    SignatureSerializer,
    StrictSerializer,
)

from .choices import (
    ActionClass,
    ActiveStatus,
    AttestationLevel,
    Connector,
    PolicySetStatus,
    RegulatoryFramework,
    RiskLevel,
    SkillStatus,
    TaskStatus,
)
from .documents import delegation_document, policy_set_document
from .scopes import TOOL_ID_PATTERN, is_valid_scope

# A chain's depth is bounded by the hops its root grants; 64 keeps every materialised
# path (13 characters a link) well inside its 2048-character column.
MAX_HOPS = 64
NAME_MAX = 128
PARAMETER_NAME = r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$"
TOOL_PATTERN = TOOL_ID_PATTERN
TOOL_MESSAGE = "A tool id is 1-128 characters of letters, digits and . _ / - (no ':' or '*', which scopes use)."
OPERATION_PATTERN = r"^[A-Za-z0-9._/-]{1,128}$"
OPERATION_MESSAGE = "An operation is 1-128 characters of letters, digits and . _ / -."


def _unique(values: list, field: str) -> list:
    if len(set(map(str, values))) != len(values):
        raise serializers.ValidationError(f"{field} must not repeat a value.")
    return values


class AgentField(serializers.CharField):
    """An agent or principal identifier (free text: DIDs, URIs, e-mail addresses)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("max_length", NAME_MAX)
        # Refused, not trimmed: "acme\n" is not the principal "acme".
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if not value.isprintable() or value != value.strip():
            raise serializers.ValidationError("Must be printable, without surrounding spaces or line breaks.")
        return value


class ScopeField(serializers.CharField):
    def __init__(self, **kwargs):
        kwargs.setdefault("trim_whitespace", False)  # "crm:read\n" is refused, not read as "crm:read"
        super().__init__(**kwargs)

    def to_internal_value(self, data):

        value = super().to_internal_value(data)
        if not is_valid_scope(value):
            raise serializers.ValidationError(
                "A scope is letters, digits and . _ : / - with an optional trailing '*'.")
        return value


# --- delegations --------------------------------------------------------------------------
class DelegationConstraintsSerializer(StrictSerializer):
    """``constraints``: ``spend_limit`` (absent: no spending authority) and ``max_hops_remaining``."""

    spend_limit = MoneySerializer(required=False)
    max_hops_remaining = serializers.IntegerField(min_value=0, max_value=MAX_HOPS, required=False)


class DelegationChainSerializer(StrictSerializer):
    """One link of a delegation chain; the server finds ``parent_delegation_id`` and signs the link."""

    type_name = "DelegationChain"

    delegation_id = IdField(required=False)
    parent_delegation_id = serializers.CharField(source="parent_id", read_only=True, allow_null=True)
    root_principal = AgentField()
    delegator_agent = AgentField()
    delegate_agent = AgentField()
    authority_scope = serializers.ListField(child=ScopeField(), min_length=1, max_length=100)
    constraints = DelegationConstraintsSerializer(required=False)
    accepted_at = serializers.DateTimeField(required=False)
    expires_at = serializers.DateTimeField(required=False)
    delegator_signature = serializers.CharField(required=False, write_only=True, max_length=16384, help_text=(
        "The delegator's compact JWS (by a key of its client) over the RFC 8785 canonical JSON of this request "
        "without this member; required of an agent client with keys. It joins `signature_chain`."))
    signature_chain = serializers.ListField(child=serializers.CharField(), read_only=True)
    signature = SignatureSerializer(read_only=True)
    status = serializers.ChoiceField(choices=ActiveStatus.choices, read_only=True)
    revoked_at = serializers.DateTimeField(read_only=True, allow_null=True)
    created_at = serializers.DateTimeField(required=False)
    created_by = serializers.CharField(read_only=True, help_text="The API client that made it.")

    def validate_authority_scope(self, value):
        return _unique(value, "authority_scope")

    def to_representation(self, instance):
        return delegation_document(instance)


# --- policy sets --------------------------------------------------------------------------
class PolicyTestExpectSerializer(StrictSerializer):
    allow = serializers.BooleanField()
    require_approval = serializers.BooleanField(required=False)
    deny = serializers.ListField(child=serializers.CharField(max_length=2000), required=False, max_length=100,
                                 help_text="The deny reasons expected, in any order.")


class PolicyTestSerializer(StrictSerializer):
    """One test of a policy set: the Rego ``input`` (``input.action`` included, if the rules read
    it) and what the set must answer."""

    name = serializers.CharField(max_length=256)
    input = serializers.DictField()
    expect = PolicyTestExpectSerializer()


class PolicyTestSummarySerializer(serializers.Serializer):
    passed = serializers.IntegerField()
    failed = serializers.IntegerField()


class PolicySetSerializer(StrictSerializer):
    """A versioned Rego ``ruleset`` with its verified ``ruleset_hash``; created ``active``."""

    type_name = "PolicySet"

    policy_set_id = IdField(required=False)
    name = serializers.CharField(max_length=256)
    version = serializers.CharField(max_length=64)
    publisher = serializers.CharField(max_length=256, required=False, allow_blank=True)
    regulatory_frameworks = serializers.ListField(child=serializers.ChoiceField(choices=RegulatoryFramework.choices),
                                                  required=False, max_length=50)
    jurisdictions = serializers.ListField(child=serializers.CharField(max_length=64), required=False, max_length=100)
    ruleset = serializers.CharField(trim_whitespace=False, max_length=512 * 1024)
    ruleset_hash = PatternField(r"^sha256:[0-9a-f]{64}$", required=False, error_messages={
        "invalid": "Must be 'sha256:' and 64 lowercase hex digits."})
    ruleset_engine = serializers.ChoiceField(choices=[("opa", "opa")], required=False)
    ruleset_engine_version = serializers.CharField(max_length=64, required=False, allow_blank=True)
    ruleset_uri = serializers.URLField(max_length=1024, required=False, allow_blank=True)
    attestation_level = serializers.ChoiceField(choices=AttestationLevel.choices, required=False)
    certifying_body = serializers.CharField(max_length=256, required=False, allow_blank=True)
    status = serializers.ChoiceField(choices=PolicySetStatus.choices, required=False,
                                     help_text="Created 'active'; change it with PATCH.")
    effective_from = serializers.DateTimeField(required=False, allow_null=True)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    supersedes = IdField(required=False, allow_null=True)
    tests = PolicyTestSerializer(many=True, required=False, min_length=1, max_length=500, help_text=(
        "Tests run before the set is stored: any failure is a 422 AGP_POLICY_TEST_FAILED and nothing is stored."))
    # Answered only with ``tests`` (absent otherwise, so not a required member); set by the service.
    test_summary = PolicyTestSummarySerializer(required=False, allow_null=True, help_text=(
        "Set by the service when the set has tests: `{passed, failed}`. Sending it is a 400."))
    root_principal = AgentField(required=False, allow_null=True, help_text=(
        "The tenant whose set it is. A client bound to one tenant may leave it out; an operator leaves it out "
        "for a set every tenant may use."))
    shadow_of = IdField(source="shadow_of_id", required=False, allow_null=True, help_text=(
        "Makes this set a shadow of that (active or deprecated) set: while this one is active, every evaluation "
        "of that set also evaluates this one, after answering, and records the result in `shadow_results`. A "
        "shadow never changes an outcome, and no envelope can cite an evaluation of it."))
    signature = SignatureSerializer(read_only=True)
    created_at = serializers.DateTimeField(required=False)
    created_by = serializers.CharField(read_only=True, help_text="The API client that made it.")

    def validate_test_summary(self, value):
        raise serializers.ValidationError("This field is read-only.")

    def validate_tests(self, value):
        names = [test["name"] for test in value]
        if len(set(names)) != len(names):
            raise serializers.ValidationError("Test names must not repeat.")
        return value

    def validate_status(self, value):
        if value != PolicySetStatus.ACTIVE:
            raise serializers.ValidationError("A policy set is created 'active'; change it with PATCH.")
        return value

    def validate_jurisdictions(self, value):
        return _unique(value, "jurisdictions")

    def validate_regulatory_frameworks(self, value):
        return _unique(value, "regulatory_frameworks")

    def to_representation(self, instance):
        return policy_set_document(instance)


class PolicySetStatusSerializer(StrictSerializer):
    """``PATCH /agp/policy-sets/{id}``: ``status`` and nothing else."""

    type_name = "PolicySet"

    status = serializers.ChoiceField(choices=PolicySetStatus.choices)


# --- tasks --------------------------------------------------------------------------------
class TaskSerializer(StrictSerializer):
    """A unit of work an agent performs for a root principal."""

    type_name = "Task"

    task_id = IdField(required=False)
    root_principal = AgentField()
    agent_id = AgentField()
    title = serializers.CharField(max_length=512, required=False, allow_blank=True)
    # Required, never defaulted: a task silently classed low/read would skip rule 5, the
    # approval rule and the commerce checks (docs/decisions/registry.md).
    risk_level = serializers.ChoiceField(choices=RiskLevel.choices)
    action_class = serializers.ChoiceField(choices=ActionClass.choices)
    status = serializers.ChoiceField(choices=TaskStatus.choices, required=False)
    policy_set_id = IdField(required=False, allow_null=True, default=None, help_text=(
        "The policy set that governs the task's actions made in one call: an action envelope without "
        "decision_ref and policy_decision_ref, or a tool call through the MCP gateway at /mcp."))
    created_at = serializers.DateTimeField(required=False)
    created_by = serializers.CharField(read_only=True, help_text="The API client that made it.")


class TaskStatusSerializer(StrictSerializer):
    """``PATCH /agp/tasks/{id}``: ``status`` and nothing else (only ``closed`` is reachable)."""

    type_name = "Task"

    status = serializers.ChoiceField(choices=TaskStatus.choices)


# --- capabilities -------------------------------------------------------------------------
def _is_number(value) -> bool:
    """A JSON number as the parser reads it: an int, or an exact Decimal (never a string)."""
    if isinstance(value, Decimal):
        return value.is_finite()
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_scalar(value) -> bool:
    return isinstance(value, (str, bool)) or _is_number(value)


@extend_schema_field({
    "type": "object",
    "additionalProperties": {"oneOf": [
        {"type": "object", "properties": {"min": {"type": "number"}, "max": {"type": "number"}},
         "additionalProperties": False, "minProperties": 1},
        {"type": "object", "properties": {"enum": {"type": "array", "minItems": 1}},
         "required": ["enum"], "additionalProperties": False},
    ]},
})
class ParameterRangesField(serializers.Field):
    """``{name: {"min": n, "max": n}}`` (either bound or both) or ``{name: {"enum": [...]}}``.

    Validated strictly: a misspelt bound must not widen what a capability allows.
    """

    default_error_messages = {"invalid": "Expected an object of parameter names to ranges."}

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            self.fail("invalid")
        if len(data) > 100:
            raise serializers.ValidationError("At most 100 parameters.")
        problems = {}
        for name, spec in data.items():
            problem = self._problem(name, spec)
            if problem:
                problems[name] = [problem]
        if problems:
            raise serializers.ValidationError(problems)
        return data

    @staticmethod
    def _problem(name, spec) -> str | None:
        if not re.fullmatch(PARAMETER_NAME, name):
            return "A parameter name is a letter or _ then letters, digits, _ . - (64 at most)."
        if not isinstance(spec, dict) or not spec:
            return 'Expected {"min": n, "max": n} or {"enum": [...]}.'
        keys = set(spec)
        if keys == {"enum"}:
            values = spec["enum"]
            if not isinstance(values, list) or not values or len(values) > 1000:
                return "enum must be a non-empty array (1000 values at most)."
            if not all(_is_scalar(v) for v in values):
                return "enum values must be strings, numbers or booleans."
            if len({(type(v).__name__, v) for v in values}) != len(values):
                return "enum values must not repeat."
            return None
        if "enum" in keys:
            return "enum cannot be combined with min or max."
        if not keys <= {"min", "max"}:
            return f"Unknown range keys: {', '.join(sorted(keys - {'min', 'max'}))}."
        if not all(_is_number(spec[k]) for k in keys):
            return "min and max must be numbers."
        if keys == {"min", "max"} and spec["min"] > spec["max"]:
            return "min must not exceed max."
        return None

    def to_representation(self, value):
        return value


class CapabilitySerializer(StrictSerializer):
    """Use of a tool's operations by an agent, derived from a delegation that covers ``tool_id:operation``."""

    type_name = "Capability"

    capability_id = IdField(required=False)
    agent_id = AgentField()
    delegation_id = IdField()
    tool_id = PatternField(TOOL_PATTERN, error_messages={"invalid": TOOL_MESSAGE})
    operations = serializers.ListField(
        child=PatternField(OPERATION_PATTERN, error_messages={"invalid": OPERATION_MESSAGE}),
        min_length=1, max_length=100)
    allowed_parameter_ranges = ParameterRangesField(required=False)
    expires_at = serializers.DateTimeField(required=False)
    status = serializers.ChoiceField(choices=ActiveStatus.choices, read_only=True)
    created_at = serializers.DateTimeField(required=False)
    created_by = serializers.CharField(read_only=True, help_text="The API client that made it.")

    def validate_operations(self, value):
        return _unique(value, "operations")


# --- skills -------------------------------------------------------------------------------
class HttpUrlField(serializers.URLField):
    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if urlsplit(value).scheme.lower() not in ("http", "https"):
            raise serializers.ValidationError("Must be an http or https URL.")
        return value


class ToolPinSerializer(serializers.Serializer):
    """One pinned MCP tool: its name, its canonical definition and that definition's ``sha256:``."""

    name = serializers.CharField()
    definition_hash = serializers.CharField()
    definition = serializers.DictField(required=False, help_text=(
        "name, title, description, inputSchema, outputSchema and annotations as the server listed them "
        "(null where it gave none): what the hash covers and what the MCP gateway lists to agents."))


# Connectors that call the skill's endpoint_url.
ENDPOINT_CONNECTORS = (Connector.HTTP, Connector.MCP)


class SkillSerializer(StrictSerializer):
    """The connector (``noop``, ``http``, ``external``, ``mcp``) that executes an agent's ``tool_id``.

    An ``mcp`` skill's ``endpoint_url`` is an MCP server (streamable HTTP); registration
    lists its tools and pins them in ``tool_pins``. ``supersedes`` names the active skill of
    the same agent and tool that this one replaces (a re-pin after a reviewed change).
    """

    type_name = "Skill"

    skill_id = IdField(required=False)
    agent_id = AgentField()
    name = serializers.CharField(max_length=256)
    version = serializers.CharField(max_length=64, required=False, allow_blank=True)
    tool_id = PatternField(TOOL_PATTERN, error_messages={"invalid": TOOL_MESSAGE})
    connector = serializers.ChoiceField(choices=Connector.choices, required=False)
    endpoint_url = HttpUrlField(max_length=1024, required=False, allow_blank=True,
                                help_text="Required for the http and mcp connectors; checked against SSRF at "
                                          "registration and at execution.")
    executor_client_id = serializers.CharField(
        max_length=128, required=False, allow_null=True,
        help_text="external: the API client (client_id) whose POST /agp/receipts completes this skill's operations. "
                  "Absent: the client that submitted the envelope. Any other client's receipt is a 403.")
    tool_pins = ToolPinSerializer(many=True, read_only=True,
                                  help_text="mcp: the tools the server listed at registration, by name, with "
                                            "sha256 of each definition (name, description, inputSchema).")
    supersedes = IdField(required=False, allow_null=True,
                         help_text="The active skill (same agent_id and tool_id) this one replaces; it becomes "
                                   "superseded.")
    status = serializers.ChoiceField(choices=SkillStatus.choices, read_only=True)
    root_principal = AgentField(required=False, allow_null=True, help_text=(
        "The tenant whose tasks the skill executes. A client bound to one tenant may leave it out; an operator "
        "leaves it out for a skill the agent uses in every tenant."))
    created_at = serializers.DateTimeField(required=False)
    created_by = serializers.CharField(read_only=True, help_text="The API client that made it.")

    def validate(self, attrs):
        connector = attrs.get("connector")
        if connector in ENDPOINT_CONNECTORS and not attrs.get("endpoint_url"):
            raise serializers.ValidationError({"endpoint_url": [f"Required for the {connector} connector."]})
        if attrs.get("executor_client_id") and connector != Connector.EXTERNAL:
            raise serializers.ValidationError({"executor_client_id": ["Only an external skill has an executor client."]})
        return attrs

    def to_representation(self, instance):
        data = super().to_representation(instance)
        data["executor_client_id"] = data.get("executor_client_id") or None
        return data


# --- liability bindings -------------------------------------------------------------------
class LiabilityBindingSerializer(StrictSerializer):
    """Who answers for an agent's actions for a root principal, and up to what ``coverage``."""

    type_name = "LiabilityBinding"

    binding_id = IdField(required=False)
    root_principal = AgentField()
    agent_id = AgentField()
    liable_party = serializers.CharField(max_length=256)
    coverage = MoneySerializer(required=False, allow_null=True)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    status = serializers.ChoiceField(choices=ActiveStatus.choices, read_only=True)
    created_at = serializers.DateTimeField(required=False)
    created_by = serializers.CharField(read_only=True, help_text="The API client that made it.")
