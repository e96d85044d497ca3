"""Per-instance field copies (agp_project.http.serializers.field_copy): own bound fields, same results.

DRF deep-copies every declared field for each serializer instance; StrictSerializer copies
plain leaf fields shallowly instead. These tests pin what DRF's deep copy guaranteed (each
instance binds fields of its own, nested fields stay deep copies) and that parsing and
rendering give exactly what the deep-copied fields gave.
"""

import copy
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from rest_framework import serializers

from agp_project.http.serializers import IdField, SignatureSerializer, StrictSerializer, field_copy
from decision.serializers import EvidenceBundleSerializer, PolicyEvaluationSerializer
from registry.serializers import DelegationChainSerializer
from tests.concurrency import run_together
from tests.platform.serializer_requests import REQUESTS

WHEN = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)


class Sample(StrictSerializer):
    """One field of each kind the copy treats differently."""

    type_name = "Sample"

    sample_id = IdField(required=False)
    name = serializers.CharField(max_length=8)
    kind = serializers.ChoiceField(choices=[("a", "A"), ("b", "B")], required=False, default="a")
    refs = serializers.ListField(child=IdField(), required=False, default=list, max_length=3)
    data = serializers.DictField(required=False, default=dict)
    tags = serializers.JSONField(required=False, default=["x"])  # a mutable default: deep-copied
    total = serializers.DecimalField(max_digits=6, decimal_places=2, required=False, min_value=0)
    created_at = serializers.DateTimeField(read_only=True)
    checked = serializers.SerializerMethodField()

    def get_checked(self, obj):
        return obj["name"].upper()


def _deep_copied_fields(serializer):
    """What StrictSerializer.get_fields returned before field_copy: DRF's deep copies."""
    declared = serializer._declared_fields
    if not hasattr(serializer, "initial_data"):
        return copy.deepcopy(declared)
    return {name: serializers.ReadOnlyField() if field.read_only else copy.deepcopy(field)
            for name, field in declared.items()}


def _deep_copying(cls):
    return type(f"DeepCopying{cls.__name__}", (cls,), {"get_fields": _deep_copied_fields})


def test_it_gives_every_instance_bound_fields_of_its_own():
    for make in (lambda: Sample(), lambda: Sample(data={"name": "n"})):
        first, second = make(), make()
        for name, declared in Sample._declared_fields.items():
            mine, theirs = first.fields[name], second.fields[name]
            assert mine is not theirs and mine is not declared and theirs is not declared
            assert (mine.parent, mine.field_name) == (first, name)
            assert (theirs.parent, theirs.field_name) == (second, name)
            assert declared.parent is None and declared.field_name is None


def test_it_leaves_other_copies_unbound_when_one_is_bound():
    declared = Sample._declared_fields["name"]
    parent_a, parent_b = Sample(), Sample()
    bound, other = field_copy(declared), field_copy(declared)
    bound.bind("name", parent_a)
    assert (bound.parent, bound.field_name, bound.source, bound.source_attrs, bound.label) == (
        parent_a, "name", "name", ["name"], "Name")
    assert (other.parent, other.field_name, other.source, other.label) == (None, None, None, None)
    assert (declared.parent, declared.field_name, declared.source, declared.label) == (None, None, None, None)
    other.bind("alias", parent_b)
    assert (bound.parent, bound.field_name, bound.source_attrs) == (parent_a, "name", ["name"])
    assert (other.parent, other.field_name, other.source_attrs) == (parent_b, "alias", ["alias"])


def test_it_gives_each_copy_its_own_messages_validators_and_style():
    declared = Sample._declared_fields["sample_id"]
    first, second = Sample().fields["sample_id"], Sample().fields["sample_id"]
    for attribute in ("error_messages", "validators", "style"):
        assert getattr(first, attribute) is not getattr(second, attribute)
        assert getattr(first, attribute) is not getattr(declared, attribute)
        assert getattr(first, attribute) == getattr(declared, attribute)
    first.error_messages["invalid"] = "changed"
    first.validators.append(lambda value: None)
    assert Sample().fields["sample_id"].error_messages["invalid"] == "Must be 1-128 characters of [A-Za-z0-9._:-]."
    assert len(Sample().fields["sample_id"].validators) == len(declared.validators)


def test_it_deep_copies_list_dict_and_nested_fields():
    first, second = Sample().fields, Sample().fields
    for name in ("refs", "data"):
        assert first[name].child is not second[name].child
        assert first[name].child.parent is first[name] and second[name].child.parent is second[name]
    assert first["tags"].default == ["x"] and first["tags"].default is not second["tags"].default

    for cls, name in ((DelegationChainSerializer, "constraints"), (EvidenceBundleSerializer, "items")):
        mine, theirs = cls().fields[name], cls().fields[name]
        assert mine is not theirs and type(mine) is type(theirs)
        nested_mine = getattr(mine, "child", mine)
        nested_theirs = getattr(theirs, "child", theirs)
        assert nested_mine is not nested_theirs
        for field_name in nested_mine.fields:
            assert nested_mine.fields[field_name] is not nested_theirs.fields[field_name]
            assert nested_mine.fields[field_name].parent is nested_mine


def test_it_refuses_unknown_read_only_missing_and_invalid_fields_as_before():
    serializer = Sample(data={"type": "Other", "sample_id": "bad id", "name": "far too long", "kind": "c",
                              "created_at": "2026-01-01T00:00:00Z", "extra": 1})
    assert not serializer.is_valid()
    assert serializer.errors == {"type": ["Must be 'Sample'."], "created_at": ["This field is read-only."],
                                 "extra": ["Unknown field."]}

    serializer = Sample(data={"sample_id": "bad id", "name": "far too long", "kind": "c", "refs": ["ok", "no way"],
                              "total": "-1"})
    assert not serializer.is_valid()
    errors = serializer.errors
    assert set(errors) == {"sample_id", "name", "kind", "refs", "total"}
    assert errors["name"] == ["Ensure this field has no more than 8 characters."]
    assert errors["kind"] == ['"c" is not a valid choice.']
    assert errors["total"] == ["Ensure this value is greater than or equal to 0."]
    assert [e.code for e in errors["sample_id"]] == ["invalid"] and list(errors["refs"]) == [1]
    assert [e.code for e in errors["refs"][1]] == ["invalid"]

    serializer = Sample(data={})
    assert not serializer.is_valid()
    assert serializer.errors == {"name": ["This field is required."]}


def test_it_applies_defaults_without_sharing_them_between_requests():
    first, second = Sample(data={"name": "n"}), Sample(data={"name": "m", "total": "1.5"})
    assert first.is_valid() and second.is_valid()
    assert first.validated_data == {"name": "n", "kind": "a", "refs": [], "data": {}, "tags": ["x"]}
    assert second.validated_data == {"name": "m", "kind": "a", "refs": [], "data": {}, "tags": ["x"],
                                     "total": Decimal("1.50")}
    first.validated_data["refs"].append("changed")
    first.validated_data["tags"].append("changed")
    third = Sample(data={"name": "o"})
    assert third.is_valid()
    assert third.validated_data["refs"] == [] and third.validated_data["tags"] == ["x"]
    assert Sample._declared_fields["tags"].default == ["x"]


def test_it_renders_one_and_many_as_before():
    row = {"sample_id": "s-1", "name": "n", "kind": "b", "refs": ["r"], "data": {"k": 1}, "tags": [],
           "total": Decimal("2.5"), "created_at": WHEN}
    expected = {"type": "Sample", "sample_id": "s-1", "name": "n", "kind": "b", "refs": ["r"], "data": {"k": 1},
                "tags": [], "total": Decimal("2.50"), "created_at": "2026-01-02T03:04:05.678000Z", "checked": "N"}
    assert Sample(row).data == expected
    many = Sample([row, {**row, "name": "m"}], many=True)
    assert many.data == [expected, {**expected, "name": "m", "checked": "M"}]
    assert all(field.parent is many.child for field in many.child.fields.values())
    signature = {"alg": "EdDSA", "kid": "k", "issuer": "i", "issued_at": "t", "payload_hash": "h", "value": "v"}
    assert SignatureSerializer().to_representation({}) is None
    assert SignatureSerializer(signature).data == signature


PAYLOADS = {**REQUESTS, Sample: [{"name": "n", "refs": ["a", "b", "c", "d"], "data": {"k": "v"}, "tags": {"a": 1}}]}


@pytest.mark.parametrize("cls", PAYLOADS, ids=lambda cls: cls.__name__)
def test_it_parses_every_payload_as_the_deep_copied_fields_did(cls):
    for payload in PAYLOADS[cls]:
        ours, theirs = cls(data=payload), _deep_copying(cls)(data=payload)
        assert ours.is_valid() == theirs.is_valid(), payload
        assert ours.errors == theirs.errors, payload
        if ours.is_valid():
            assert ours.validated_data == theirs.validated_data


def test_it_renders_a_policy_evaluation_as_the_deep_copied_fields_did():
    row = {"evaluation_id": "pe-1", "policy_set_id": "ps-1", "task_id": "t-1", "agent_id": "a", "input": {"x": 1},
           "result": {"allow": True, "require_approval": False, "reasons": ["r"]}, "input_hash": "sha256:0",
           "ruleset_hash": "sha256:1", "warnings": ["w"], "evaluated_at": WHEN, "created_at": WHEN}
    assert PolicyEvaluationSerializer(row).data == _deep_copying(PolicyEvaluationSerializer)(row).data
    assert list(PolicyEvaluationSerializer(row).data)[0] == "type"
    many = PolicyEvaluationSerializer([row, row], many=True).data
    assert many == _deep_copying(PolicyEvaluationSerializer)([row, row], many=True).data


def test_it_renders_correctly_from_many_threads_at_once():
    rows = [{"sample_id": f"s-{i}", "name": f"n{i}", "kind": "a", "refs": [str(i)], "data": {}, "tags": [i],
             "total": Decimal(i), "created_at": WHEN} for i in range(8)]

    def render(row):
        return lambda: [Sample(row).data for _ in range(200)]

    results = run_together([render(row) for row in rows])
    for row, rendered in zip(rows, results, strict=True):
        assert not isinstance(rendered, Exception), rendered
        assert all(data == rendered[0] for data in rendered)
        assert (rendered[0]["sample_id"], rendered[0]["checked"], rendered[0]["tags"]) == (
            row["sample_id"], row["name"].upper(), row["tags"])
