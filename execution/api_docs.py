"""What the OpenAPI document tells a user about execution: envelopes, operations, receipts, the ledger."""

from agp_project.http.schema import ResourceDocs

ACTION_ENVELOPES = ResourceDocs(
    singular="action envelope", plural="action envelopes",
    about="An action envelope is an agent's request to perform one tool operation with parameters, citing the "
          "task, capability, decision and policy evaluation that allow it. The list holds the envelopes accepted "
          "for execution, each with its checks at submission and the server's signature.",
    create_summary="Validate or execute an action",
    create="Every governance check runs, and all of them report, even after one fails: the task is open, a "
           "usable delegation chain covers the action, the capability and the agent's skill allow it with these "
           "parameters, the decision approves and is final, the policy evaluation allowed this exact action, an "
           "impact assessment and an approval exist where required, no escalation is open, the spend fits the "
           "commerce session and the delegations' limits, and `created_at` is not in the future. Any failure is "
           "a 422 listing every failed check in `details.failed_checks`, and nothing is reserved or executed.\n\n"
           "Without `Prefer`, or with `Prefer: return=representation`, the envelope is validated only: 200 with the "
           "envelope as it would execute, signed. With `Prefer: respond-async` it is accepted: any spend is "
           "reserved, and the answer is 202 with an operation to poll at its `status_url` (also in `Location`); "
           "a worker checks everything again just before executing. Give a `callback_url` to be told when the "
           "operation ends.",
    create_example={"action_id": "act_refund_4711", "task_id": "task_4711", "agent_id": "billing-agent",
                    "tool_id": "payments", "operation": "refund", "capability_token_ref": "cap_refunds",
                    "decision_ref": "dec_4711", "policy_decision_ref": "pev_4711",
                    "parameters": {"amount": 80, "currency": "EUR", "order_id": "4711"},
                    "callback_url": "https://agents.acme.example/agp/callbacks"})

RECEIPTS = ResourceDocs(
    singular="receipt", plural="receipts",
    about="A receipt is the signed record of an operation's outcome: `succeeded` or `failed`, who executed it, "
          "when, the hash of the result and the governance it ran under.",
    create_summary="Report the outcome of an external operation",
    create="For a skill with the `external` connector, your executor performs the action and reports here. The "
           "operation must be running and waiting for this receipt; it ends with the receipt's status, and any "
           "reserved spend is committed or released. A second receipt for the same operation is a 409.",
    create_example={"action_id": "act_refund_4711", "operation_id": "op_01J9Z3Q5F2", "status": "succeeded",
                    "result": {"refund_id": "rf_8812", "amount": 80, "currency": "EUR"},
                    "executor": "warehouse-robot-7", "started_at": "2030-01-05T10:00:00Z",
                    "completed_at": "2030-01-05T10:00:02Z"})

LEDGER_EVENTS = ResourceDocs(
    singular="ledger event", plural="ledger events",
    about="The ledger is the append-only, hash-chained record of everything the service changed: each event "
          "has a `sequence`, the `prev_hash` of the one before and its own `hash`, so removing or altering any "
          "event breaks the chain. Filter by `resource_id` or `resource_type` to follow one record's history.",
    create_summary="Append your own event to the ledger",
    create="Record something of yours in the same tamper-evident chain, such as an outside review. The "
           "`event_type` must start with `client.`; the server sets the sequence, the actor (your client) and "
           "the hashes.",
    create_example={"event_type": "client.review_completed", "resource_type": "ActionEnvelope",
                    "resource_id": "act_refund_4711",
                    "payload": {"reviewer": "internal-audit", "finding": "no issues"}})

VERIFY_SUMMARY = "Verify the whole ledger"
VERIFY = ("Recomputes every event's hash and checks each link to the previous one and the ledger head, then "
          "recomputes the Merkle tree of the events and checks it against the newest signed checkpoint (`tree`). "
          "`verified` is true only when both hold; otherwise the answer names the first broken sequence. It reads "
          "the whole ledger: expect it to take a moment on a large one.")

CHECKPOINTS = ResourceDocs(
    singular="checkpoint", plural="checkpoints",
    about="A checkpoint is the service's signed statement of the ledger's Merkle tree at one size (RFC 9162): "
          "`tree_size`, `root_hash`, `issued_at` and an Ed25519 signature. Keep the newest one you saw: a later "
          "checkpoint with a consistency proof shows the ledger only grew since.",
    create_summary="", create="", create_example={})

OPERATION_SUMMARY = "Get an operation"
OPERATION = ("The asynchronous execution of an accepted envelope: `pending`, then `running`, then `succeeded`, "
             "`failed` or `cancelled`. Poll it at the `status_url` the submission answered (respecting "
             "`Retry-After`); once it ended, `result_url` leads to the action, and a failure carries the error in "
             "the usual error shape. Readable with any execution or decision scope.")
CANCEL_SUMMARY = "Cancel a pending operation"
CANCEL = ("`{\"status\": \"cancelled\"}` stops an operation no worker has started: its spend reservation is "
          "released, its envelope fails and nothing executes (needs `agp.execution.write`, and to be its submitter "
          "or hold `agp.revocation.write`). A backtest's operation stops even while it runs (needs "
          "`agp.policy.write` or `agp.decision.write`). A running or ended envelope operation is a 409.")
CANCEL_EXAMPLE = {"status": "cancelled"}

REPLAY_SUMMARY = "Replay an action's governance"
REPLAY = ("Re-runs every check of an accepted action against today's records and compares the verdicts with the "
          "ones recorded at submission, so you can see what changed since (a revocation, an expiry). With "
          "`policy_set_id`, the action's recorded policy input, with the envelope's own action as `input.action`, is "
          "also evaluated under that policy set: what would another ruleset have said? Nothing is written.")
