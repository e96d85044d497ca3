"""Registry API viewsets (docs/reference/api.md, docs/reference/governance.md, docs/reference/ledger.md): parse, call one service, render."""

from rest_framework.response import Response

from agp_project import errors
from agp_project.http.schema import documented
from agp_project.http.viewsets import AGPViewSet, Cited, CreateMixin, tenant_of_write

from auth_tokens.permissions import holds_scope

from . import api_docs, services
from .models import Capability, Delegation, Freeze, LiabilityBinding, PolicySet, Revocation, Skill, Task
from .serializers import (
    CapabilitySerializer,
    DelegationChainSerializer,
    LiabilityBindingSerializer,
    PolicySetSerializer,
    PolicySetStatusSerializer,
    SkillSerializer,
    TaskSerializer,
    TaskStatusSerializer,
)
from .serializers_stops import FreezeLiftSerializer, FreezeSerializer, RevocationSerializer


class RegistryViewSet(CreateMixin, AGPViewSet):
    scope_group = "registry"
    http_method_names = ["get", "post", "head", "options"]


# The records other registry records cite, as a caller bound to tenants may see them.
CITED_DELEGATION = Cited(Delegation, "delegation_id", "root_principal", "delegation")
CITED_POLICY_SET = Cited(PolicySet, "policy_set_id", "root_principal", "policy set", shared_when_null=True)


def refuse_agent_client(request, what: str) -> None:
    """403 for an agent client: ``what`` is for the people and operators who govern agents."""
    if getattr(request.user, "kind", None) == "agent":
        raise errors.Forbidden(f"an agent client cannot {what}")


@documented(DelegationChainSerializer, api_docs.DELEGATIONS, create={409: (
    "AGP_DELEGATION_SCOPE_VIOLATION (no usable parent covers the scope; cycle; spend or expiry beyond the "
    "parent's), AGP_DELEGATION_HOP_LIMIT (the parent has no hops left, or more were asked), AGP_FROZEN (an "
    "active freeze stops the delegator or the root principal; `details.freezes`) or AGP_CONFLICT "
    "(duplicate id; the delegate is a revoked agent).")})
class DelegationViewSet(RegistryViewSet):
    """Delegation links (``DelegationChain``): the server finds the parent and attenuates (docs/reference/governance.md)."""

    queryset = Delegation.objects.all()
    serializer_class = DelegationChainSerializer
    collection = "delegations"
    lookup_field = "delegation_id"
    filter_fields = {"root_principal": "root_principal", "delegator_agent": "delegator_agent",
                     "delegate_agent": "delegate_agent", "parent_delegation_id": "parent_id", "status": "status"}
    tenant_field = "root_principal"
    agent_fields = ("delegator_agent",)

    def perform_create(self, validated, actor):
        tenant_of_write(self.request, validated["root_principal"])
        signature = validated.pop("delegator_signature", None)
        key = services.delegator_signature_check(client_id=actor, is_agent=self.request.user.kind == "agent",
                                                 request_body=self.request.data, signature=signature)
        return services.delegation_create(actor=actor, **validated, delegator_signature=signature,
                                          delegator_key=key)


@documented(PolicySetSerializer, api_docs.POLICY_SETS, patch=PolicySetStatusSerializer, patch_errors={
    409: (
    "AGP_INVALID_TRANSITION: only active -> deprecated -> revoked (`details.from`, `details.to`, "
    "`details.allowed`).")})
class PolicySetViewSet(RegistryViewSet):
    """Versioned Rego rulesets; ``PATCH`` moves ``status`` forward only (docs/reference/governance.md)."""

    queryset = PolicySet.objects.all()
    serializer_class = PolicySetSerializer
    collection = "policy-sets"
    lookup_field = "policy_set_id"
    filter_fields = {"status": "status", "name": "name", "version": "version", "publisher": "publisher",
                     "supersedes": "supersedes", "ruleset_hash": "ruleset_hash", "shadow_of": "shadow_of_id",
                     "root_principal": "root_principal"}
    http_method_names = ["get", "post", "patch", "head", "options"]
    tenant_field = "root_principal"
    shared_when_no_tenant = True
    cited = {"supersedes": CITED_POLICY_SET, "shadow_of_id": CITED_POLICY_SET}

    def perform_create(self, validated, actor):
        refuse_agent_client(self.request, "write the rules that govern agents")
        validated["root_principal"] = tenant_of_write(self.request, validated.get("root_principal"))
        return services.policy_set_create(actor=actor, **validated)

    def partial_update(self, request, *args, **kwargs):
        refuse_agent_client(request, "write the rules that govern agents")
        self.require_own(kwargs[self.lookup_field])
        validated = self.parse(serializer_class=PolicySetStatusSerializer)
        instance = services.policy_set_transition(actor=self.actor, policy_set_id=kwargs[self.lookup_field],
                                                  status=validated["status"])
        return Response(self.render(instance))


@documented(TaskSerializer, api_docs.TASKS, patch=TaskStatusSerializer, patch_errors={
    409: (
    "AGP_INVALID_TRANSITION: only open -> closed (`details.from`, `details.to`, `details.allowed`).")})
class TaskViewSet(RegistryViewSet):
    """Tasks; ``PATCH`` with ``{"status": "closed"}`` closes one, the only move there is."""

    queryset = Task.objects.all()
    serializer_class = TaskSerializer
    collection = "tasks"
    lookup_field = "task_id"
    filter_fields = {"root_principal": "root_principal", "agent_id": "agent_id", "status": "status",
                     "risk_level": "risk_level", "action_class": "action_class", "policy_set_id": "policy_set_id"}
    http_method_names = ["get", "post", "patch", "head", "options"]
    tenant_field = "root_principal"
    agent_fields = ("agent_id",)

    def perform_create(self, validated, actor):
        tenant_of_write(self.request, validated["root_principal"])
        return services.task_create(actor=actor, **validated)

    def partial_update(self, request, *args, **kwargs):
        self.require_own(kwargs[self.lookup_field])
        validated = self.parse(serializer_class=TaskStatusSerializer)
        instance = services.task_transition(actor=self.actor, task_id=kwargs[self.lookup_field],
                                           status=validated["status"])
        return Response(self.render(instance))


@documented(CapabilitySerializer, api_docs.CAPABILITIES, create={409: (
    "AGP_DELEGATION_SCOPE_VIOLATION (the delegation is not usable, not held by `agent_id`, does not cover "
    "every `tool_id:operation`, or expires earlier) or AGP_CONFLICT (duplicate id).")})
class CapabilityViewSet(RegistryViewSet):
    queryset = Capability.objects.all()
    serializer_class = CapabilitySerializer
    collection = "capabilities"
    lookup_field = "capability_id"
    filter_fields = {"agent_id": "agent_id", "delegation_id": "delegation_id", "tool_id": "tool_id",
                     "status": "status"}
    tenant_field = "delegation__root_principal"
    agent_fields = ("agent_id",)
    cited = {"delegation_id": CITED_DELEGATION}

    def perform_create(self, validated, actor):
        return services.capability_create(actor=actor, **validated)


@documented(LiabilityBindingSerializer, api_docs.LIABILITY_BINDINGS,
            create={409: "AGP_CONFLICT: duplicate id, or the agent is revoked."})
class LiabilityBindingViewSet(RegistryViewSet):
    queryset = LiabilityBinding.objects.all()
    serializer_class = LiabilityBindingSerializer
    collection = "liability-bindings"
    lookup_field = "binding_id"
    filter_fields = {"root_principal": "root_principal", "agent_id": "agent_id", "liable_party": "liable_party",
                     "status": "status"}
    tenant_field = "root_principal"
    agent_fields = ("agent_id",)

    def perform_create(self, validated, actor):
        tenant_of_write(self.request, validated["root_principal"])
        return services.liability_binding_create(actor=actor, **validated)


@documented(SkillSerializer, api_docs.SKILLS, create={
    400: ("AGP_INVALID_REQUEST, also when the endpoint_url is refused (SSRF) or, for mcp, when the MCP server "
          "cannot be reached or its tools cannot be listed and pinned (`details.fields.endpoint_url` says why)."),
    409: "AGP_CONFLICT: duplicate id, the agent is revoked, or the skill named by `supersedes` is no longer active."})
class SkillViewSet(RegistryViewSet):
    """Skills; an mcp skill pins its server's tools, and a new version (``supersedes``) re-pins them."""

    queryset = Skill.objects.all()
    serializer_class = SkillSerializer
    collection = "skills"
    lookup_field = "skill_id"
    filter_fields = {"agent_id": "agent_id", "tool_id": "tool_id", "connector": "connector", "status": "status",
                     "supersedes": "supersedes", "root_principal": "root_principal"}
    tenant_field = "root_principal"
    agent_fields = ("agent_id",)
    cited = {"supersedes": Cited(Skill, "skill_id", "root_principal", "skill")}

    def perform_create(self, validated, actor):
        validated["root_principal"] = tenant_of_write(self.request, validated.get("root_principal"))
        return services.skill_create(actor=actor, **validated)



@documented(RevocationSerializer, api_docs.REVOCATIONS,
            create={409: "AGP_CONFLICT: duplicate id, or the target is already revoked."})
class RevocationViewSet(RegistryViewSet):
    """Immediate, irreversible, cascading revocations (docs/reference/ledger.md); creating one needs agp.revocation.write."""

    queryset = Revocation.objects.all()
    serializer_class = RevocationSerializer
    collection = "revocations"
    lookup_field = "revocation_id"
    filter_fields = {"target_type": "target_type", "target_id": "target_id", "revoked_by": "revoked_by",
                     "root_principal": "root_principal"}
    # An agent client, which never holds agp.revocation.write, may revoke a delegation its agent granted.
    write_scopes = {"create": ("agp.revocation.write", "agp.registry.write")}
    tenant_field = "root_principal"

    def perform_create(self, validated, actor):
        principal = self.request.user
        if not holds_scope(self.request, "agp.revocation.write"):
            granted_by_own_agent = (
                getattr(principal, "kind", None) == "agent" and validated["target_type"] == "delegation"
                and Delegation.objects.filter(delegation_id=validated["target_id"],
                                              delegator_agent=principal.agent_id).exists())
            if not granted_by_own_agent:
                raise errors.InsufficientScope(["agp.revocation.write"])
        return services.revocation_create(actor=actor, tenants=self.tenants, **validated)


@documented(FreezeSerializer, api_docs.FREEZES, patch=FreezeLiftSerializer, patch_errors={409: (
    "AGP_INVALID_TRANSITION: only active -> lifted, once (`details.from`, `details.to`, `details.allowed`).")})
class FreezeViewSet(RegistryViewSet):
    """Emergency stops of an agent, a root principal, a tool or everything (docs/reference/governance.md); lifting is forward only.

    Creating and lifting need agp.revocation.write; reading, the registry scopes.
    """

    queryset = Freeze.objects.all()
    serializer_class = FreezeSerializer
    collection = "freezes"
    lookup_field = "freeze_id"
    filter_fields = {"target_type": "target_type", "target_id": "target_id", "status": "status",
                     "frozen_by": "frozen_by", "root_principal": "root_principal"}
    http_method_names = ["get", "post", "patch", "head", "options"]
    write_scopes = {"create": "agp.revocation.write", "partial_update": "agp.revocation.write"}
    tenant_field = "root_principal"

    def perform_create(self, validated, actor):
        refuse_agent_client(self.request, "freeze")
        validated["root_principal"] = self._freeze_tenant(validated)
        return services.freeze_create(actor=actor, **validated)

    def _freeze_tenant(self, validated) -> str | None:
        """The one tenant a caller bound to tenants freezes in: a root principal of its own, or
        an agent within one of its tenants; ``tool`` and ``all`` stop every tenant, so they are
        an operator's."""
        if self.tenants is None:
            return validated["target_id"] if validated["target_type"] == "root_principal" else \
                validated.get("root_principal")
        if validated["target_type"] in ("tool", "all"):
            raise errors.Forbidden(f"a {validated['target_type']!r} freeze stops every tenant: it is an "
                                   f"operator's", field="target_type")
        if validated["target_type"] == "root_principal":
            return tenant_of_write(self.request, validated["target_id"], field="target_id")
        return tenant_of_write(self.request, validated.get("root_principal"))

    def partial_update(self, request, *args, **kwargs):
        refuse_agent_client(request, "lift a freeze")
        self.require_own(kwargs[self.lookup_field])
        validated = self.parse(serializer_class=FreezeLiftSerializer)
        instance = services.freeze_lift(actor=self.actor, freeze_id=kwargs[self.lookup_field], **validated)
        return Response(self.render(instance))
