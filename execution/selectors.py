"""Reads of execution records that other apps' services are handed (they may not import execution)."""

from .models import ActionEnvelope

# Envelopes named per evaluation.
MAX_ACTIONS_PER_EVALUATION = 100
# Evaluation ids per query.
CHUNK = 500


def action_ids_citing(evaluation_ids: list[str]) -> dict[str, list[str]]:
    """The accepted envelopes that cite each evaluation (``policy_decision_ref``), oldest first.

    A backtest's changes name them (C14). One query per ``CHUNK`` ids, at most
    ``MAX_ACTIONS_PER_EVALUATION`` envelopes each.
    """
    found: dict[str, list[str]] = {}
    for start in range(0, len(evaluation_ids), CHUNK):
        rows = (ActionEnvelope.objects.filter(policy_decision_ref__in=evaluation_ids[start:start + CHUNK])
                .order_by("pk").values_list("policy_decision_ref", "action_id"))
        for evaluation_id, action_id in rows:
            cited = found.setdefault(evaluation_id, [])
            if len(cited) < MAX_ACTIONS_PER_EVALUATION:
                cited.append(action_id)
    return found
