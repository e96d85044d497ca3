"""Strict request parsing and rendering of the Decision API resources (docs/reference/api.md, docs/reference/governance.md).

One serializer per resource serves request and response; server-set fields are
``read_only`` (sending them is a 400). PATCH bodies have their own small serializers.
"""


from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agp_project.http.schema import ErrorObjectSerializer
from agp_project.http.serializers import (
    AmountField,
    CurrencyField,
    IdField,
    PatternField,
    SignatureSerializer,
    StrictSerializer,
    minor_units_problem,
)
from agp_project.http.viewsets import absolute_url, operation_path
from registry.serializers import OPERATION_MESSAGE, OPERATION_PATTERN, TOOL_MESSAGE, TOOL_PATTERN, AgentField

from .choices import (
    ApprovalVerdict,
    BacktestStatus,
    DecidedBy,
    DecisionOutcome,
    DecisionStatus,
    EscalationOutcome,
    EscalationStatus,
    EthicalFramework,
    Horizon,
    ImpactDirection,
    Recommendation,
    Severity,
)
from .documents import approval_document, impact_assessment_document

TEXT_MAX = 20000
AGENT_MAX = 128


class BlankAsNullMixin:
    """Render the model's empty-string "unset" as JSON null."""

    def to_representation(self, value):
        if value in ("", None):
            return None
        return super().to_representation(value)


class BlankAsNullIdField(BlankAsNullMixin, IdField):
    """An optional reference id that renders as null when unset."""


class BlankAsNullCharField(BlankAsNullMixin, serializers.CharField):
    """An optional string that renders as null when unset."""


# --- contexts and evidence ---------------------------------------------------------------
class ContextSerializer(StrictSerializer):
    type_name = "Context"

    context_id = IdField(required=False)
    task_id = IdField()
    agent_id = serializers.CharField(max_length=AGENT_MAX, required=False, allow_blank=True)
    data = serializers.DictField()
    content_hash = serializers.CharField(read_only=True)
    created_at = serializers.DateTimeField(required=False)
    created_by = serializers.CharField(read_only=True, help_text="The API client that made it.")


class EvidenceItemSerializer(StrictSerializer):
    uri = PatternField(r"^[A-Za-z][A-Za-z0-9+.-]*:\S+$", max_length=2048, error_messages={
        "invalid": "Must be an absolute URI (scheme:...)."})
    sha256 = PatternField(r"^(sha256:)?[0-9a-f]{64}$", error_messages={
        "invalid": "Must be 64 lowercase hex digits, optionally prefixed 'sha256:'."})
    kind = serializers.CharField(max_length=64)


class EvidenceBundleSerializer(StrictSerializer):
    type_name = "EvidenceBundle"

    bundle_id = IdField(required=False)
    task_id = IdField()
    items = EvidenceItemSerializer(many=True, allow_empty=False, max_length=1000)
    bundle_hash = serializers.CharField(read_only=True)
    created_at = serializers.DateTimeField(required=False)
    created_by = serializers.CharField(read_only=True, help_text="The API client that made it.")


# --- policy evaluations --------------------------------------------------------------------
class PolicyResultSerializer(serializers.Serializer):
    allow = serializers.BooleanField()
    require_approval = serializers.BooleanField()
    reasons = serializers.ListField(child=serializers.CharField())


@extend_schema_field(PolicyResultSerializer)
class PolicyResultField(serializers.JSONField):
    """The stored ``result`` object as it is (the hot path renders it without a nested serializer)."""


@extend_schema_field({"type": "array", "items": {"type": "string"}})
class StringListField(serializers.JSONField):
    """A stored list of strings, rendered as it is."""


class ActionSerializer(StrictSerializer):
    """The action an evaluation is made for: the envelope that cites it must ask for exactly this."""

    tool_id = PatternField(TOOL_PATTERN, error_messages={"invalid": TOOL_MESSAGE})
    operation = PatternField(OPERATION_PATTERN, error_messages={"invalid": OPERATION_MESSAGE})
    parameters = serializers.DictField(required=False, default=dict)
class ShadowResultSerializer(serializers.Serializer):
    policy_set_id = serializers.CharField()
    allow = serializers.BooleanField(allow_null=True, help_text=(
        "What the shadow decided; null until it has been evaluated (on a worker, after the answer)."))
    matches = serializers.BooleanField(allow_null=True, help_text=(
        "Whether the shadow's `allow` equals the evaluation's; null until the shadow has been evaluated."))


@extend_schema_field(ShadowResultSerializer(many=True))
class ShadowResultsField(serializers.JSONField):
    """The stored ``{policy_set_id: {"allow", "matches"}}`` as a list, ordered by id."""

    def to_representation(self, value):
        return [{"policy_set_id": policy_set_id, "allow": result["allow"], "matches": result["matches"]}
                for policy_set_id, result in sorted((value or {}).items())]


class PolicyEvaluationSerializer(StrictSerializer):
    type_name = "PolicyEvaluation"

    evaluation_id = IdField(required=False)
    policy_set_id = IdField()
    task_id = IdField()
    agent_id = serializers.CharField(max_length=AGENT_MAX)
    input = serializers.DictField(required=False, default=dict, help_text="The Rego `input` document.")
    action = ActionSerializer(required=False, allow_null=True, default=None, help_text=(
        "The action evaluated, available to the ruleset as `input.action`. Only an evaluation made for "
        "exactly the envelope's tool, operation and parameters clears that envelope."))
    action_hash = BlankAsNullCharField(read_only=True, allow_null=True)
    result = PolicyResultField(read_only=True)
    input_hash = serializers.CharField(read_only=True)
    ruleset_hash = serializers.CharField(read_only=True)
    warnings = StringListField(read_only=True)
    shadow_results = ShadowResultsField(read_only=True, help_text=(
        "The active shadows of the policy set, evaluated with the same input: what each would have decided. "
        "They never change `result`, and the answer never waits for them: each is evaluated after it, on a "
        "worker, and shows `allow` and `matches` null until then."))
    evaluated_at = serializers.DateTimeField(read_only=True)
    created_at = serializers.DateTimeField(required=False)
    created_by = serializers.CharField(read_only=True, help_text="The API client that made it.")


# --- decisions -------------------------------------------------------------------------------
CREATE_AS_DRAFT = "Decisions are created as 'draft'; finalise with PATCH."


class DecisionSerializer(StrictSerializer):
    type_name = "Decision"

    decision_id = IdField(required=False)
    task_id = IdField()
    agent_id = serializers.CharField(max_length=AGENT_MAX)
    outcome = serializers.ChoiceField(choices=DecisionOutcome.choices)
    rationale = serializers.CharField(max_length=TEXT_MAX, required=False, allow_blank=True, default="")
    context_ref = IdField(required=False, allow_null=True, default=None)
    evidence_refs = serializers.ListField(child=IdField(), required=False, default=list, max_length=200)
    policy_evaluation_ref = IdField(required=False, allow_null=True, default=None)
    # Every status in the schema, since responses carry `finalised` too; create takes `draft` only.
    status = serializers.ChoiceField(
        choices=DecisionStatus.choices, required=False, default=DecisionStatus.DRAFT,
        error_messages={"invalid_choice": CREATE_AS_DRAFT},
        help_text="Create: `draft` only. `PATCH /agp/decisions/{id}` with `finalised` finalises it.")
    decided_by = serializers.ChoiceField(choices=DecidedBy.choices, read_only=True, help_text=(
        "`client`: recorded by an API client; `policy`: made by the task's policy set for an action made in "
        "one call."))
    finalised_at = serializers.DateTimeField(read_only=True, allow_null=True)
    created_at = serializers.DateTimeField(required=False)
    created_by = serializers.CharField(read_only=True, help_text="The API client that made it.")

    def validate_status(self, value):
        if value != DecisionStatus.DRAFT:
            raise serializers.ValidationError(CREATE_AS_DRAFT)
        return value

    def validate_evidence_refs(self, value):
        if len(set(value)) != len(value):
            raise serializers.ValidationError("Each evidence bundle may be cited once.")
        return value


class DecisionStatusSerializer(StrictSerializer):
    """``PATCH /agp/decisions/{id}``: only ``{"status": "finalised"}`` moves anything."""

    type_name = "Decision"

    status = serializers.ChoiceField(choices=DecisionStatus.choices)


# --- impact assessments ----------------------------------------------------------------------
class TimeHorizonSerializer(StrictSerializer):
    horizon = serializers.ChoiceField(choices=Horizon.choices)
    consequences = serializers.ListField(child=serializers.CharField(max_length=TEXT_MAX), required=False,
                                         default=list, max_length=200)
    severity = serializers.ChoiceField(choices=Severity.choices)
    # Unknown reversibility is treated as irreversible: the careful default.
    reversible = serializers.BooleanField(required=False, default=False)


class StakeholderSerializer(StrictSerializer):
    stakeholder_class = serializers.CharField(max_length=256)
    impact_direction = serializers.ChoiceField(choices=ImpactDirection.choices)
    magnitude = serializers.ChoiceField(choices=Severity.choices)
    notes = serializers.CharField(max_length=TEXT_MAX, required=False, allow_blank=True, default="")


class ParetoAssessmentSerializer(StrictSerializer):
    improves_without_harm = serializers.BooleanField(required=False, default=False)
    harmed_parties = serializers.ListField(child=serializers.CharField(max_length=256), required=False,
                                           default=list, max_length=200)
    mitigation_available = serializers.BooleanField(required=False, default=False)
    mitigation_notes = serializers.CharField(max_length=TEXT_MAX, required=False, allow_blank=True, default="")


class EthicalFrameworkSerializer(StrictSerializer):
    primary = serializers.ChoiceField(choices=EthicalFramework.choices, required=False,
                                      default=EthicalFramework.VEIL_OF_IGNORANCE)
    secondary = serializers.ListField(child=serializers.ChoiceField(choices=EthicalFramework.choices),
                                      required=False, default=list, max_length=len(EthicalFramework.choices))
    prohibitions = serializers.ListField(child=serializers.CharField(max_length=TEXT_MAX), required=False,
                                         default=list, max_length=200)
    # No serializer default: omitted, the service fills in the decision's policy set.
    policy_ref = serializers.CharField(max_length=256, required=False, allow_blank=True)


class ImpactAssessmentSerializer(StrictSerializer):
    type_name = "ImpactAssessment"

    assessment_id = IdField(required=False)
    task_id = IdField()
    decision_ref = IdField()
    agent_id = serializers.CharField(max_length=AGENT_MAX)
    time_horizons = TimeHorizonSerializer(many=True, allow_empty=False, max_length=50)
    stakeholders_affected = StakeholderSerializer(many=True, required=False, max_length=200)
    pareto_assessment = ParetoAssessmentSerializer(required=False)
    ethical_framework_applied = EthicalFrameworkSerializer(required=False)
    recommendation = serializers.ChoiceField(choices=Recommendation.choices)
    recommendation_rationale = serializers.CharField(max_length=TEXT_MAX, required=False, allow_blank=True)
    assessed_at = serializers.DateTimeField(required=False)
    signature = SignatureSerializer(read_only=True)
    created_by = serializers.CharField(read_only=True, help_text="The API client that made it.")

    def to_representation(self, instance):
        return impact_assessment_document(instance)


# --- approvals -------------------------------------------------------------------------------
class ApprovalSerializer(StrictSerializer):
    type_name = "Approval"

    approval_id = IdField(required=False)
    decision_ref = IdField()
    approver = serializers.CharField(max_length=128, required=False, help_text=(
        "Who approves: a person's client records its own subject (leave it out); an operator must name one."))
    verdict = serializers.ChoiceField(choices=ApprovalVerdict.choices)
    conditions = serializers.ListField(child=serializers.CharField(max_length=TEXT_MAX), required=False,
                                       default=list, max_length=200)
    expires_at = serializers.DateTimeField(help_text="Required: an approval always expires.")
    approver_signature = serializers.CharField(required=False, max_length=16384, help_text=(
        "The approver's own compact JWS, by a key of its client, over the RFC 8785 canonical JSON of "
        "`{\"decision_id\", \"action_hash\", \"verdict\"}` (`action_hash`: the decision's policy evaluation's, or null)."))
    signature = SignatureSerializer(read_only=True)
    created_at = serializers.DateTimeField(required=False)
    created_by = serializers.CharField(read_only=True, help_text="The API client that made it.")
    approver_client = serializers.CharField(read_only=True, help_text="The API client of the approver.")

    def to_representation(self, instance):
        return approval_document(instance)



# --- escalations -----------------------------------------------------------------------------
class EscalationSerializer(StrictSerializer):
    type_name = "Escalation"

    escalation_id = IdField(required=False)
    task_id = BlankAsNullIdField(required=False, allow_null=True, default=None)
    decision_ref = BlankAsNullIdField(required=False, allow_null=True, default=None)
    action_id = BlankAsNullIdField(required=False, allow_null=True, default=None)
    root_principal = serializers.CharField(read_only=True, allow_null=True, help_text=(
        "The tenant it was raised in: its task's, else its action's, else the raising client's."))

    raised_by = serializers.CharField(max_length=128)
    reason = serializers.CharField(max_length=TEXT_MAX)
    status = serializers.CharField(read_only=True)
    outcome = BlankAsNullCharField(read_only=True, allow_null=True)
    resolved_by = BlankAsNullCharField(read_only=True, allow_null=True)
    resolution_notes = BlankAsNullCharField(read_only=True, allow_null=True)
    resolved_at = serializers.DateTimeField(read_only=True, allow_null=True)
    created_at = serializers.DateTimeField(required=False)
    created_by = serializers.CharField(read_only=True, help_text="The API client that made it.")

    def validate(self, attrs):
        if not (attrs.get("task_id") or attrs.get("decision_ref") or attrs.get("action_id")):
            raise serializers.ValidationError(
                {"task_id": ["An escalation names at least one of task_id, decision_ref, action_id."]})
        return attrs


class EscalationResolveSerializer(StrictSerializer):
    """``PATCH /agp/escalations/{id}``: ``{"status": "resolved", "outcome", "resolved_by", "resolution_notes"}``."""

    type_name = "Escalation"

    status = serializers.ChoiceField(choices=EscalationStatus.choices)
    outcome = serializers.ChoiceField(choices=EscalationOutcome.choices, required=False)
    resolved_by = serializers.CharField(max_length=128, required=False)
    resolution_notes = serializers.CharField(max_length=TEXT_MAX, required=False, allow_blank=True, default="")

    def validate(self, attrs):
        if attrs["status"] == EscalationStatus.RESOLVED:
            missing = {name: ["Required to resolve an escalation."]
                       for name in ("outcome", "resolved_by") if not attrs.get(name)}
            if missing:
                raise serializers.ValidationError(missing)
        return attrs


# --- commerce sessions -----------------------------------------------------------------------
class CommerceSessionSerializer(StrictSerializer):
    type_name = "CommerceSession"

    session_id = IdField(required=False)
    task_id = IdField()
    agent_id = serializers.CharField(max_length=AGENT_MAX)
    delegation_id = IdField()
    merchant = serializers.CharField(max_length=256, required=False, allow_blank=True, default="")
    currency = CurrencyField()
    amount_limit = AmountField(positive=True)
    expires_at = serializers.DateTimeField(required=False, allow_null=True, default=None)
    spent_amount = AmountField(read_only=True)
    reserved_amount = AmountField(read_only=True)
    status = serializers.CharField(read_only=True)
    created_at = serializers.DateTimeField(required=False)
    created_by = serializers.CharField(read_only=True, help_text="The API client that made it.")

    def validate(self, attrs):
        problem = minor_units_problem(attrs.get("currency"), attrs.get("amount_limit"))
        if problem:
            raise serializers.ValidationError({"amount_limit": [problem]})
        return attrs


# --- backtests ---------------------------------------------------------------------------------
def backtest_path(backtest_id: str) -> str:
    return f"/agp/backtests/{backtest_id}"


class BacktestChangeSerializer(serializers.Serializer):
    evaluation_id = serializers.CharField()
    action_ids = serializers.ListField(child=serializers.CharField(),
                                       help_text="The accepted envelopes that cited the evaluation.")
    before = PolicyResultSerializer(help_text="The recorded result.")
    after = PolicyResultSerializer(help_text="The candidate's result for the same input.")


@extend_schema_field(BacktestChangeSerializer(many=True))
class BacktestChangesField(serializers.JSONField):
    """The stored list of changes, rendered as it is."""


@extend_schema_field({"type": "object", "additionalProperties": {"type": "integer"}})
class ReasonCountsField(serializers.JSONField):
    """``{reason: count}``, rendered as it is."""


@extend_schema_field(ErrorObjectSerializer(allow_null=True))
class ErrorObjectField(serializers.JSONField):
    """A stored docs/reference/api.md error object (``{"code", "message", "retryable", "details"}``), or null."""


class BacktestLimitSerializer(serializers.Serializer):
    limit = serializers.ChoiceField(choices=["AGP_BACKTEST_MAX_SECONDS", "AGP_BACKTEST_MAX_EVALUATIONS"],
                                    help_text="The setting whose bound was reached.")
    value = serializers.IntegerField(help_text="Its value: seconds, or evaluations.")
    message = serializers.CharField()


@extend_schema_field(BacktestLimitSerializer(allow_null=True))
class BacktestLimitField(serializers.JSONField):
    """The stored ``{"limit", "value", "message"}`` of a run stopped at its bound, or null."""


class BacktestSerializer(StrictSerializer):
    """A candidate policy set re-evaluated over recorded evaluations: the request, and the
    summary the run stores (``evaluations`` re-evaluated so far, of ``total`` in the window)."""

    type_name = "Backtest"

    backtest_id = IdField(required=False)
    policy_set_id = IdField(help_text="The candidate: any status but revoked.")
    baseline_policy_set_id = IdField(required=False, allow_null=True, help_text=(
        "Re-evaluate only the recorded evaluations of this set (default: of every set)."))
    since = serializers.DateTimeField(required=False, help_text="Start of the `evaluated_at` window (included); "
                                                                "default: 30 days before `until`.")
    until = serializers.DateTimeField(required=False, help_text="End of the window (excluded); default: now.")
    task_id = BlankAsNullIdField(required=False, allow_null=True, help_text="Only this task's evaluations.")
    root_principal = AgentField(required=False, allow_null=True, help_text=(
        "Only this tenant's evaluations. A client bound to one tenant may leave it out; an operator leaves it out "
        "for every tenant's."))

    agent_id = BlankAsNullCharField(max_length=AGENT_MAX, required=False, allow_null=True,
                                    help_text="Only this agent's evaluations.")
    status = serializers.ChoiceField(choices=BacktestStatus.choices, read_only=True)
    ruleset_hash = serializers.CharField(read_only=True, help_text="The candidate's.")
    operation_id = serializers.CharField(read_only=True)
    total = serializers.IntegerField(read_only=True, allow_null=True,
                                     help_text="Evaluations in the window (null until the run starts).")
    evaluations = serializers.IntegerField(read_only=True)
    unchanged = serializers.IntegerField(read_only=True)
    newly_denied = serializers.IntegerField(read_only=True)
    newly_allowed = serializers.IntegerField(read_only=True)
    approval_changed = serializers.IntegerField(read_only=True, help_text=(
        "Allowed before and after, with another `require_approval`."))
    errors = serializers.IntegerField(read_only=True, help_text="Re-evaluations that failed (counted as denials).")
    changes = BacktestChangesField(read_only=True, help_text="The first 1,000 evaluations whose result changed.")
    by_reason = ReasonCountsField(read_only=True, help_text=(
        "For the newly denied evaluations: how many each of the candidate's reasons accounts for."))
    error = ErrorObjectField(read_only=True, help_text="Why a failed backtest failed.")
    limit_reached = BacktestLimitField(read_only=True, help_text=(
        "Set when the run stopped at its bound of time or evaluations before the window's end: which bound, and "
        "how much of the window the summary covers. Null when the whole window was re-evaluated."))
    started_at = serializers.DateTimeField(read_only=True, allow_null=True)
    completed_at = serializers.DateTimeField(read_only=True, allow_null=True)
    created_at = serializers.DateTimeField(required=False)
    created_by = serializers.CharField(read_only=True, help_text="The API client that made it.")


class BacktestProgressSerializer(serializers.Serializer):
    evaluations = serializers.IntegerField(help_text="Re-evaluated so far.")
    total = serializers.IntegerField(allow_null=True, help_text="In the window; null until the run starts.")


class BacktestOperationSerializer(serializers.Serializer):
    """A backtest seen as its asynchronous Operation: the Operation's fields, and ``progress``."""

    operation_id = serializers.CharField(read_only=True)
    status = serializers.ChoiceField(choices=BacktestStatus.choices, read_only=True)
    created_at = serializers.DateTimeField(read_only=True)
    updated_at = serializers.DateTimeField(read_only=True)
    status_url = serializers.SerializerMethodField()
    result_url = serializers.SerializerMethodField()
    callback_url = serializers.SerializerMethodField()
    error = serializers.SerializerMethodField()
    progress = serializers.SerializerMethodField()

    @extend_schema_field(OpenApiTypes.URI)
    def get_status_url(self, backtest) -> str:
        return absolute_url(self.context.get("request"), operation_path(backtest.operation_id))

    @extend_schema_field(OpenApiTypes.URI)
    def get_result_url(self, backtest) -> str:
        return absolute_url(self.context.get("request"), backtest_path(backtest.backtest_id))

    @extend_schema_field({"type": "null"})
    def get_callback_url(self, backtest) -> None:
        return None  # a backtest is polled, never called back

    @extend_schema_field(ErrorObjectSerializer(allow_null=True))
    def get_error(self, backtest) -> dict | None:
        return backtest.error or None

    @extend_schema_field(BacktestProgressSerializer)
    def get_progress(self, backtest) -> dict:
        return {"evaluations": backtest.evaluations, "total": backtest.total}


def backtest_operation_representation(backtest, *, request=None) -> dict:
    """The Operation body of a backtest: the 202 of ``POST /agp/backtests`` and ``GET /agp/operations/{id}``."""
    return dict(BacktestOperationSerializer(backtest, context={"request": request}).data)


def render_for_signature(serializer_class, instance) -> dict:
    """The representation a signature covers: the rendered resource without ``signature``."""
    data = serializer_class(instance).data
    return {name: value for name, value in data.items() if name != "signature"}
