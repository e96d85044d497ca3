"""Writes of registry records (docs/reference/governance.md, docs/reference/ledger.md, docs/reference/api.md), one module per resource.

Each public function owns its transaction, appends a ledger event for every record it
changes inside that transaction, and raises ``agp_project.errors`` on every refusal.

Locking, in one fixed order so that no two writers wait on each other in a cycle:

1. agent locks (PostgreSQL transaction-scoped advisory locks, one per agent id, taken in
   sorted order): creating anything for an agent and revoking that agent queue on them;
2. tree-root locks (``SELECT ... FOR NO KEY UPDATE`` on the root row of a delegation tree, in
   primary-key order): creating a link or capability under a tree and revoking any link
   of that tree queue on them;
3. the row itself, where one is changed (policy sets, capabilities, skills, bindings);
4. the ledger head, always last (``ledger_append`` is called after every other write).

On SQLite, ``transaction_mode=IMMEDIATE`` gives every write transaction the database
lock at BEGIN, which serialises all writers, so the explicit locks are no-ops there.
"""

from .capabilities import capability_create
from .common import refuse_frozen
from .delegations import delegation_create, delegator_signature_check
from .freezes import freeze_create, freeze_lift
from .liability_bindings import liability_binding_create
from .policy_sets import policy_set_create, policy_set_transition
from .revocations import revocation_create
from .skills import skill_create
from .tasks import task_create, task_transition

__all__ = [
    "capability_create",
    "delegation_create",
    "delegator_signature_check",
    "freeze_create",
    "freeze_lift",
    "liability_binding_create",
    "policy_set_create",
    "policy_set_transition",
    "refuse_frozen",
    "revocation_create",
    "skill_create",
    "task_create",
    "task_transition",
]
