"""What the OpenAPI document tells a user about ``/agp/clients`` (agp_project/http/schema.py)."""

from agp_project.http.schema import ResourceDocs

CLIENTS = ResourceDocs(
    singular="API client", plural="API clients",
    about="An API client is who calls the API: an `operator` (every scope, every tenant), an `agent` (acts for one "
          "`agent_id` of one tenant), a `human` (a person, by `subject`, in one or more tenants: the only kind "
          "whose approvals count) or an `auditor` (reads one or more tenants). A tenant is a root principal. Who "
          "a request comes from is read from its client, never from its body. Only operators manage clients "
          "(scope `agp.admin`); secrets are never shown again.",
    create_summary="Create an API client",
    create="Give the `kind` and its bindings: an agent needs `agent_id` and exactly one tenant, a person a "
           "`subject` and at least one tenant, an auditor at least one tenant (`*` for every one), an operator "
           "none. Left out, `scopes` are the kind's defaults; more than the kind may hold is a 400. The answer "
           "carries `client_secret`, shown this once: only its hash is kept.",
    create_example={"client_id": "billing-agent-prod", "kind": "agent", "agent_id": "billing-agent",
                    "tenants": ["acme-corp"]},
    patch_summary="Disable, enable, rotate or re-scope an API client",
    patch="`{\"is_active\": false}` disables it: its tokens stop working at once. `{\"rotate_secret\": true}` "
          "answers with a new `client_secret` (shown this once); tokens issued before stop working. `scopes` and "
          "`description` change what it may do and how it is described; who it is (kind, bindings) never changes.",
    patch_example={"is_active": False})
