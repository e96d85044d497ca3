"""Action envelopes and replay: the request parser and the representations (docs/reference/execution.md, docs/reference/ledger.md).

An envelope renders as ``execution.documents.envelope_document``: the 200 of a validation,
the stored envelope behind ``result_url`` and the bytes its signature covers are one body.
"""

from typing import Any

import rfc8785
from rest_framework import serializers

from agp_project.canonical import content_hash
from agp_project.http.serializers import (
    AmountField,
    CurrencyField,
    IdField,
    SignatureSerializer,
    StrictSerializer,
    minor_units_problem,
)
from agp_project.net import url_guard

from .documents import envelope_document


def money_parameter_problems(parameters: dict[str, Any]) -> dict[str, list[str]]:
    """``parameters.amount`` and ``parameters.currency`` are money (docs/reference/execution.md): the amount a JSON
    number, the currency an ISO 4217 code, the amount within its minor units. What is
    checked and reserved is then exactly what the tool receives."""
    problems: dict[str, list[str]] = {}
    amount, currency = parameters.get("amount"), parameters.get("currency")
    if "amount" in parameters:
        try:
            amount = AmountField().to_internal_value(amount)
        except serializers.ValidationError as exc:
            problems["amount"] = list(exc.detail)
            amount = None
    if "currency" in parameters:
        try:
            CurrencyField().to_internal_value(currency)
        except serializers.ValidationError as exc:
            problems["currency"] = list(exc.detail)
            currency = None
    problem = minor_units_problem(currency if "currency" in parameters else None, amount)
    if problem:
        problems["amount"] = [problem]
    return problems


def parameters_problems(parameters: dict[str, Any]) -> str | dict[str, list[str]] | None:
    """Why ``parameters`` cannot be an envelope's, or None.

    They are hashed (RFC 8785) into parameters_hash: what has no canonical form (integers
    beyond 2**53, non-finite numbers) is refused instead of failing later; and money must
    be money (``money_parameter_problems``).
    """
    try:
        content_hash(parameters)
    except (rfc8785.CanonicalizationError, ValueError, TypeError) as exc:
        return f"Not representable as canonical JSON: {exc}"
    return money_parameter_problems(parameters) or None


class GovernanceAttestationSerializer(serializers.Serializer):
    agent_id = serializers.CharField()
    agent_role = serializers.ChoiceField(choices=["executive"])
    verdict = serializers.ChoiceField(choices=["cleared"])
    conditions = serializers.ListField(child=serializers.CharField())
    notes = serializers.CharField()
    attested_at = serializers.DateTimeField()
    signature = SignatureSerializer()


class ActionEnvelopeSerializer(StrictSerializer):
    """An agent's request to perform one tool operation, and the envelope the server signs for it.

    The records it cites (task, capability, decision, policy evaluation) are prerequisites:
    one that does not exist fails its check (422), not the request's syntax (400). Fields the
    server sets are refused in a request (400).
    """

    type_name = "ActionEnvelope"

    action_id = IdField(required=False)
    task_id = serializers.CharField(max_length=128)
    agent_id = serializers.CharField(max_length=128)
    tool_id = serializers.CharField(max_length=128)
    operation = serializers.CharField(max_length=128)
    parameters = serializers.DictField(required=False, default=dict)
    parameters_hash = serializers.CharField(read_only=True)
    allowed_parameter_ranges = serializers.DictField(read_only=True)
    capability_token_ref = serializers.CharField(max_length=128)
    # Both or neither: without them the task's policy set decides, in this one request.
    decision_ref = serializers.CharField(max_length=128, required=False, help_text=(
        "The finalised decision that clears the action. Leave it and policy_decision_ref out to have the "
        "task's policy set (policy_set_id) evaluate the action and decide in this one request."))
    policy_decision_ref = serializers.CharField(max_length=128, required=False, help_text=(
        "The policy evaluation of this exact action that the decision was made on; with decision_ref, or "
        "neither."))
    approval_ref = serializers.CharField(read_only=True, allow_null=True)
    commerce_session_ref = serializers.CharField(read_only=True, allow_null=True)
    payment_ref = serializers.CharField(read_only=True, allow_null=True)
    callback_url = serializers.URLField(required=False, max_length=2048, allow_null=True)
    created_at = serializers.DateTimeField(required=False)
    governance_attestations = GovernanceAttestationSerializer(many=True, read_only=True)
    signature = SignatureSerializer(read_only=True)

    def validate_parameters(self, value):
        problems = parameters_problems(value)
        if problems:
            raise serializers.ValidationError(problems)
        return value

    def validate(self, attrs):
        given = [name for name in ("decision_ref", "policy_decision_ref") if attrs.get(name)]
        if len(given) == 1:
            missing = "policy_decision_ref" if given == ["decision_ref"] else "decision_ref"
            raise serializers.ValidationError({missing: [
                f"Required with {given[0]}; leave both out to have the task's policy set decide."]})
        return attrs

    def validate_callback_url(self, value):
        # Refused up front (400) as well as at delivery: a callback to a private, loopback or
        # link-local address would make the service a proxy into its own network (SSRF).
        if value:
            url_guard(value, field="callback_url")
        return value

    def to_representation(self, instance):
        return envelope_document(instance)


class FailedCheckSerializer(serializers.Serializer):
    check = serializers.CharField()
    reason = serializers.CharField()


class CheckOutcomeSerializer(serializers.Serializer):
    check = serializers.CharField()
    passed = serializers.BooleanField()
    reason = serializers.CharField()


class VerdictSerializer(serializers.Serializer):
    verdict = serializers.ChoiceField(choices=["cleared", "rejected"])
    checks = CheckOutcomeSerializer(many=True)


class WhatIfResultSerializer(serializers.Serializer):
    allow = serializers.BooleanField()
    require_approval = serializers.BooleanField()
    reasons = serializers.ListField(child=serializers.CharField())


class WhatIfSerializer(serializers.Serializer):
    policy_set_id = serializers.CharField()
    policy_set_status = serializers.CharField()
    ruleset_hash = serializers.CharField()
    input_hash = serializers.CharField()
    result = WhatIfResultSerializer()
    original_result = WhatIfResultSerializer()
    matches = serializers.BooleanField()


class ReplaySerializer(serializers.Serializer):
    """An action's checks as recorded and as they come out today, the ``changed_checks``, and the
    optional ``what_if`` under another policy set."""

    action_id = serializers.CharField()
    original = VerdictSerializer()
    current = VerdictSerializer()
    matches = serializers.BooleanField()
    changed_checks = serializers.ListField(child=serializers.CharField())
    what_if = WhatIfSerializer(required=False)
