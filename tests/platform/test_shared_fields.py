"""Rendering and parsing through a serializer class's shared fields
(agp_project.http.serializers.rendering_fields and parsing_fields).

A serializer instance that only renders, and the root of a request's parsing, no longer bind
their own copies of the fields. These tests pin that they give exactly what DRF gives with
fields bound to each instance: every resource the API serves rendered from real rows, and
requests of every kind parsed, full and partial, valid and not.
"""

import pytest
from django.test import RequestFactory
from django.urls import URLResolver, get_resolver
from rest_framework import serializers
from rest_framework.request import Request

from agp_project.http.serializers import FieldCopiesMixin, StrictSerializer, parsing_fields, rendering_fields
from agp_project.http.viewsets import AGPViewSet
from decision.serializers import DecisionSerializer, PolicyEvaluationSerializer
from execution.serializers_envelopes import ActionEnvelopeSerializer
from execution.serializers_operations import OperationSerializer
from tests.admin.world import make_admin_world
from tests.concurrency import run_together
from tests.platform.serializer_requests import ENVELOPE, REQUESTS


def _api_viewsets() -> list[type[AGPViewSet]]:
    found, patterns = {}, list(get_resolver().url_patterns)
    while patterns:
        pattern = patterns.pop()
        if isinstance(pattern, URLResolver):
            patterns.extend(pattern.url_patterns)
            continue
        view = getattr(pattern.callback, "cls", None)
        if isinstance(view, type) and issubclass(view, AGPViewSet):
            found[view.__name__] = view
    return [found[name] for name in sorted(found)]


def _drf_representation(serializer_class, instance, many=False, context=None):
    """What the class renders when DRF's own ``to_representation`` reads the fields bound to
    each rendering instance (its own copies), nested serializers included."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(FieldCopiesMixin, "to_representation", serializers.Serializer.to_representation)
        return serializer_class(instance, many=many, context=context or {}).data


@pytest.mark.django_db
@pytest.mark.postgres
def test_every_resource_renders_as_drf_renders_it_with_fields_of_its_own(settings):
    settings.AGP_BASE_URL = ""  # URLs from the request in the context, as the API renders them
    make_admin_world()
    context = {"request": Request(RequestFactory().get("/agp/x", HTTP_HOST="agp.example"))}
    rendered_rows = {}
    for viewset in _api_viewsets():
        serializer_class = viewset.serializer_class
        rows = list(viewset.queryset.all())
        for row in rows:
            ours = serializer_class(row, context=context).data
            assert ours == _drf_representation(serializer_class, row, context=context), (viewset, row.pk)
        if rows:
            assert serializer_class(rows, many=True, context=context).data == _drf_representation(
                serializer_class, rows, many=True, context=context)
        rendered_rows[viewset.__name__] = len(rows)
    # One row of every model the API serves: no resource was left out of the comparison.
    assert len(rendered_rows) >= 19 and all(rendered_rows.values()), rendered_rows


def test_rendering_binds_no_fields_to_the_rendering_instance():
    row = {"evaluation_id": "pe-1", "policy_set_id": "ps-1", "task_id": "t-1", "agent_id": "a", "input": {},
           "result": {"allow": True, "require_approval": False, "reasons": []}, "input_hash": "sha256:0",
           "ruleset_hash": "sha256:1", "warnings": [], "evaluated_at": None, "created_at": None}
    serializer = PolicyEvaluationSerializer(row)
    assert serializer.data["evaluation_id"] == "pe-1"
    assert "fields" not in serializer.__dict__  # DRF's cached property was never built
    shared = rendering_fields(PolicyEvaluationSerializer)
    assert [f.field_name for f in shared] == [n for n, f in PolicyEvaluationSerializer._declared_fields.items()
                                              if not f.write_only]
    assert all(field.parent is not serializer and field.parent is shared[0].parent for field in shared)
    assert rendering_fields(PolicyEvaluationSerializer) is shared


def test_each_serializer_class_renders_through_fields_of_its_own_class():
    class Narrow(StrictSerializer):
        type_name = "Narrow"
        name = serializers.CharField()

    class Wider(Narrow):
        type_name = "Wider"
        size = serializers.IntegerField()
        secret = serializers.CharField(write_only=True)

    row = {"name": "n", "size": 3, "secret": "s"}
    assert Narrow(row).data == {"type": "Narrow", "name": "n"}
    assert Wider(row).data == {"type": "Wider", "name": "n", "size": 3}
    assert Wider([row, row], many=True).data == [{"type": "Wider", "name": "n", "size": 3}] * 2
    assert Narrow(row).data == {"type": "Narrow", "name": "n"}


def test_a_class_whose_fields_may_read_the_context_renders_through_fields_of_each_instance(settings):
    settings.AGP_BASE_URL = ""

    class Nested(StrictSerializer):
        url = serializers.SerializerMethodField()

        def get_url(self, row):
            return self.context["request"].build_absolute_uri(f"/x/{row['id']}")

    class Outer(StrictSerializer):
        id = serializers.CharField()
        inner = Nested(source="*")
        many = serializers.ListField(child=serializers.CharField())

    class Plain(StrictSerializer):
        id = serializers.CharField()
        pair = serializers.ListField(child=serializers.DictField(child=serializers.IntegerField()))

    assert rendering_fields(OperationSerializer) is None
    assert rendering_fields(Outer) is None and rendering_fields(Nested) is None
    assert rendering_fields(Plain) is not None
    request = Request(RequestFactory().get("/", HTTP_HOST="agp.example"))
    row = {"id": "r-1", "many": ["a"]}
    assert Outer(row, context={"request": request}).data == {
        "id": "r-1", "inner": {"url": "http://agp.example/x/r-1"}, "many": ["a"]}


def test_an_operation_renders_its_urls_from_the_request(settings):
    settings.AGP_BASE_URL = ""
    operation = {"operation_id": "op-1", "status": "queued", "created_at": None, "updated_at": None,
                 "envelope_id": "act-1", "callback_url": "", "error": None}

    class Row:
        def __init__(self, **values):
            self.__dict__.update(values)

    request = Request(RequestFactory().get("/", HTTP_HOST="agp.example"))
    rendered = OperationSerializer(Row(**operation), context={"request": request}).data
    assert rendered["status_url"] == "http://agp.example/agp/operations/op-1"
    assert rendered["result_url"] == "http://agp.example/agp/action-envelopes/act-1"
    assert OperationSerializer(Row(**operation)).data["status_url"] == "/agp/operations/op-1"


def test_missing_attributes_render_as_drf_renders_them():
    class Optional(StrictSerializer):
        name = serializers.CharField()
        note = serializers.CharField(required=False)
        label = serializers.CharField(default="none")
        maybe = serializers.CharField(allow_null=True)
        missing = serializers.CharField()

    # Skipped when not required, the default, null when nullable; a required one missing is an error.
    row = {"name": "n"}
    with pytest.raises(KeyError):
        _drf_representation(Optional, row)
    with pytest.raises(KeyError):
        Optional(row).data  # noqa: B018
    present = {"name": "n", "missing": "m"}
    assert Optional(present).data == _drf_representation(Optional, present) == {
        "name": "n", "label": "none", "maybe": None, "missing": "m"}


def test_it_renders_correctly_from_many_threads_at_once():
    rows = [{"evaluation_id": f"pe-{i}", "policy_set_id": "ps-1", "task_id": f"t-{i}", "agent_id": "a",
             "input": {"i": i}, "result": {"allow": bool(i % 2), "require_approval": False, "reasons": [str(i)]},
             "input_hash": "sha256:0", "ruleset_hash": "sha256:1", "warnings": [str(i)], "evaluated_at": None,
             "created_at": None} for i in range(8)]

    def render(row):
        return lambda: [PolicyEvaluationSerializer(row).data for _ in range(200)]

    results = run_together([render(row) for row in rows])
    for row, rendered in zip(rows, results, strict=True):
        assert not isinstance(rendered, Exception), rendered
        expected = _drf_representation(PolicyEvaluationSerializer, row)
        assert expected["task_id"] == row["task_id"]
        assert all(data == expected for data in rendered)


# --- parsing ---------------------------------------------------------------------------------
def _drf_parse(serializer_class, payload, partial=False, context=None):
    """(valid, errors, validated data) with fields bound to each instance, as DRF binds them."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(StrictSerializer, "fields", serializers.Serializer.fields)
        return _parse(serializer_class, payload, partial, context)


def _parse(serializer_class, payload, partial=False, context=None):
    serializer = serializer_class(data=payload, partial=partial, context=context or {})
    valid = serializer.is_valid()
    return valid, serializer.errors, dict(serializer.validated_data) if valid else None


@pytest.mark.parametrize("serializer_class", REQUESTS, ids=lambda cls: cls.__name__)
@pytest.mark.parametrize("partial", [False, True], ids=["full", "partial"])
def test_every_request_parses_as_drf_parses_it_with_fields_of_its_own(serializer_class, partial):
    assert parsing_fields(serializer_class, partial) is not None  # the shared path is the one tested
    for payload in REQUESTS[serializer_class]:
        assert _parse(serializer_class, payload, partial) == _drf_parse(serializer_class, payload, partial), payload


def test_full_and_partial_parsing_share_fields_of_their_own_kind():
    full = DecisionSerializer(data={"outcome": "approve"})
    partial = DecisionSerializer(data={"outcome": "approve"}, partial=True)
    assert not full.is_valid() and set(full.errors) == {"task_id", "agent_id"}
    assert partial.is_valid(), partial.errors
    assert partial.validated_data == {"outcome": "approve"}
    assert full.fields is parsing_fields(DecisionSerializer, False)
    assert partial.fields is parsing_fields(DecisionSerializer, True)
    assert all(field.root.partial for field in partial.fields.values())
    assert not any(field.root.partial for field in full.fields.values())


def test_only_the_root_of_a_request_reads_the_shared_fields():
    envelope = ActionEnvelopeSerializer(data=ENVELOPE)
    assert envelope.fields is parsing_fields(ActionEnvelopeSerializer, False)
    rendering = ActionEnvelopeSerializer()
    assert rendering.fields is not envelope.fields and all(f.parent is rendering for f in rendering.fields.values())

    class Outer(StrictSerializer):
        inner = DecisionSerializer()

    outer = Outer(data={})
    nested = outer.fields["inner"]
    assert nested.fields is not parsing_fields(DecisionSerializer, False)
    assert all(field.parent is nested for field in nested.fields.values())


def test_validate_methods_run_on_the_request_s_own_instance_with_its_context():
    class Named(StrictSerializer):
        name = serializers.CharField()

        def validate_name(self, value):
            return f"{value}@{self.context['tenant']}"

        def validate(self, attrs):
            return {**attrs, "seen_by": id(self)}

    first = Named(data={"name": "n"}, context={"tenant": "t1"})
    second = Named(data={"name": "n"}, context={"tenant": "t2"})
    assert first.is_valid() and second.is_valid()
    assert first.validated_data == {"name": "n@t1", "seen_by": id(first)}
    assert second.validated_data == {"name": "n@t2", "seen_by": id(second)}
    assert first.fields is second.fields is parsing_fields(Named, False)


def test_a_field_with_a_mutable_default_or_a_context_validator_is_bound_to_each_request():
    class Tagged(StrictSerializer):
        tags = serializers.JSONField(required=False, default=["x"])

    class Owned(StrictSerializer):
        owner = serializers.CharField(default=serializers.CurrentUserDefault())

    assert parsing_fields(Tagged, False) is None and rendering_fields(Tagged) is None
    assert parsing_fields(Owned, False) is None
    first = Tagged(data={})
    assert first.is_valid()
    first.validated_data["tags"].append("changed")
    second = Tagged(data={})
    assert second.is_valid() and second.validated_data == {"tags": ["x"]}
    assert first.fields is not second.fields


def test_it_parses_correctly_from_many_threads_at_once():
    payloads = [{**ENVELOPE, "action_id": f"act-{i}", "parameters": {"limit": i}} if i % 2 else
                {**ENVELOPE, "action_id": f"bad {i}"} for i in range(8)]
    expected = [_drf_parse(ActionEnvelopeSerializer, payload) for payload in payloads]

    def parse(payload):
        return lambda: [_parse(ActionEnvelopeSerializer, payload) for _ in range(100)]

    results = run_together([parse(payload) for payload in payloads])
    for want, got in zip(expected, results, strict=True):
        assert not isinstance(got, Exception), got
        assert all(result == want for result in got)
    assert [want[0] for want in expected] == [bool(i % 2) for i in range(8)]


# --- what may share: an allow-list ------------------------------------------------------------
def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def test_every_serializer_of_the_service_shares_its_fields_but_the_operation_s():
    import execution.serializers  # noqa: F401 - every app's serializers, imported
    import registry.serializers  # noqa: F401

    ours = {cls for cls in _subclasses(FieldCopiesMixin)
            if cls.__module__.split(".")[0] in ("agp_project", "registry", "decision", "execution")}
    assert len(ours) >= 40
    own = sorted(cls.__name__ for cls in ours if rendering_fields(cls) is None or parsing_fields(cls, False) is None)
    # Its status and result URLs are built from the request (SerializerMethodField).
    assert own == ["OperationSerializer"]


def _owner_check_refused(serializer_class) -> bool:
    serializer = serializer_class({"owner": "alice"}, data={"owner": "mallory"}, partial=True)
    return not serializer.is_valid() and serializer.errors == {"owner": ["Only the owner may change this."]}


def test_a_field_that_reads_its_root_is_bound_to_each_request():
    class OwnerField(serializers.CharField):
        def to_internal_value(self, data):
            if data != self.root.instance["owner"]:
                raise serializers.ValidationError("Only the owner may change this.")
            return data

    class Patch(StrictSerializer):
        owner = OwnerField()

    assert parsing_fields(Patch, True) is None and rendering_fields(Patch) is None
    assert _owner_check_refused(Patch)


def test_a_subclass_of_a_marked_field_shares_only_when_marked_itself():
    from agp_project.http.serializers import shares_bound_fields
    from registry.serializers import ScopeField

    class Narrower(ScopeField):
        def to_internal_value(self, data):
            return super().to_internal_value(data).lower()

    class Plain(StrictSerializer):
        scope = ScopeField()

    class Unmarked(StrictSerializer):
        scope = Narrower()

    assert parsing_fields(Plain, False) is not None
    assert parsing_fields(Unmarked, False) is None
    marked = shares_bound_fields(type("Marked", (Narrower,), {}))

    class WithMarked(StrictSerializer):
        scope = marked()

    # The mark is the class's own: Marked adds nothing, but Narrower under it is unmarked.
    assert parsing_fields(WithMarked, False) is None


def test_a_nested_serializer_with_methods_of_its_own_is_bound_to_each_request():
    class Inner(StrictSerializer):
        name = serializers.CharField()

        def validate_name(self, value):
            return f"{value}@{self.context.get('tenant')}"

    class Outer(StrictSerializer):
        inner = Inner()

    assert parsing_fields(Outer, False) is None
    outer = Outer(data={"inner": {"name": "n"}}, context={"tenant": "t1"})
    assert outer.is_valid(), outer.errors
    assert outer.validated_data == {"inner": {"name": "n@t1"}}


def test_relational_file_and_context_validated_fields_are_bound_to_each_request(settings):
    settings.MEDIA_URL = "/media/"

    class WithFile(StrictSerializer):
        f = serializers.FileField()

    class WithRelation(StrictSerializer):
        task = serializers.PrimaryKeyRelatedField(read_only=True)

    class NeedsContext:
        requires_context = True

        def __call__(self, value, field):
            if value != field.context["expected"]:
                raise serializers.ValidationError("Unexpected.")

    class WithValidator(StrictSerializer):
        name = serializers.CharField(validators=[NeedsContext()])

    assert rendering_fields(WithFile) is None and rendering_fields(WithRelation) is None
    assert parsing_fields(WithValidator, False) is None
    request = Request(RequestFactory().get("/", HTTP_HOST="agp.example"))

    class Stored:
        url = "/media/a.txt"

        def __str__(self):
            return "a.txt"

    assert WithFile({"f": Stored()}, context={"request": request}).data == {"f": "http://agp.example/media/a.txt"}
    right = WithValidator(data={"name": "x"}, context={"expected": "x"})
    wrong = WithValidator(data={"name": "y"}, context={"expected": "x"})
    assert right.is_valid() and not wrong.is_valid()


def test_a_class_that_changes_its_fields_per_instance_binds_its_own():
    class Tweak(StrictSerializer):
        a = serializers.CharField()

        def __init__(self, *args, optional=False, **kwargs):
            super().__init__(*args, **kwargs)
            if optional:
                self.fields["a"].required = False

    assert parsing_fields(Tweak, False) is None and rendering_fields(Tweak) is None
    assert Tweak(data={}, optional=True).is_valid()
    assert not Tweak(data={}).is_valid()  # the first instance's change stayed its own


def test_the_shared_parsing_fields_cannot_be_replaced():
    fields = PolicyEvaluationSerializer(data={}).fields
    assert fields is parsing_fields(PolicyEvaluationSerializer, False)
    with pytest.raises(TypeError):
        fields["task_id"] = serializers.CharField()
    with pytest.raises(TypeError):
        del fields["task_id"]
