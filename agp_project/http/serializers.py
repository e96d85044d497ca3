"""Strict request parsing (CONTRACT C1): unknown and read-only fields are a 400."""

import copy
import functools
import types
from collections.abc import Mapping
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from enum import Enum

from django.utils.functional import cached_property
from rest_framework import fields as drf_fields
from rest_framework import serializers
from rest_framework.fields import Field, SkipField, empty
from rest_framework.relations import PKOnlyObject

from agp_project.ids import ID_PATTERN


class FieldCopiesMixin:
    """Per-instance field copies by ``field_copy`` instead of DRF's deep copy of every declared
    field, and rendering through the class's shared fields (``rendering_fields``)."""

    def get_fields(self):
        return {name: field_copy(field) for name, field in self._declared_fields.items()}

    def to_representation(self, instance):
        """DRF's ``Serializer.to_representation``, through the class's shared rendering fields.

        An instance that only renders never builds its own bound copies of the fields (most
        of what rendering one resource costs); see ``rendering_fields`` for when sharing them
        is safe. A class whose fields could read the instance's context renders as DRF does.
        """
        fields = rendering_fields(type(self))
        if fields is None:
            return super().to_representation(instance)
        rendered = {}
        for field in fields:
            try:
                attribute = field.get_attribute(instance)
            except SkipField:
                continue
            present = attribute.pk if isinstance(attribute, PKOnlyObject) else attribute
            rendered[field.field_name] = None if present is None else field.to_representation(attribute)
        return rendered


class StrictSerializer(FieldCopiesMixin, serializers.Serializer):
    """A serializer that refuses what it does not know, so nothing is silently dropped.

    ``type_name`` is the resource's ``type`` constant: rendered first in every
    representation and, when a request sends it, required to match.
    """

    type_name: str | None = None

    def get_fields(self):
        """The declared fields; when parsing a request, response-only ones as plain placeholders.

        A request never reads the response-only fields, it only has to refuse them, so
        parsing instances get a ``ReadOnlyField`` in their place: the same refusal.
        """
        if not hasattr(self, "initial_data"):
            return super().get_fields()
        return {name: field_copy(_READ_ONLY if field.read_only else field)
                for name, field in self._declared_fields.items()}

    @cached_property
    def fields(self):
        """The root of a request's parsing reads the class's shared parsing fields
        (``parsing_fields``); every other instance binds copies of its own, as in DRF."""
        if hasattr(self, "initial_data") and self.parent is None:
            shared = parsing_fields(type(self), bool(self.partial))
            if shared is not None:
                return shared
        return serializers.Serializer.fields.func(self)

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": ["Expected a JSON object."]})
        problems = {}
        for name in data:
            if name == "type" and self.type_name:
                if data[name] != self.type_name:
                    problems[name] = [f"Must be {self.type_name!r}."]
                continue
            field = self.fields.get(name)
            if field is None:
                problems[name] = ["Unknown field."]
            elif field.read_only:
                problems[name] = ["This field is read-only."]
        if problems:
            raise serializers.ValidationError(problems)
        validated = super().to_internal_value(data)
        # Rendered with DATETIME_FORMAT's %Y, which does not pad years before 1000 ("10-08-14T..."
        # is no RFC 3339 date-time): refuse them rather than answer what no client can parse.
        early = {name: ["Must be a date-time in the years 1000 to 9999."] for name, value in validated.items()
                 if isinstance(value, datetime) and value.year < 1000}
        if early:
            raise serializers.ValidationError(early)
        return validated

    def to_representation(self, instance):
        data = super().to_representation(instance)
        if self.type_name:
            return {"type": self.type_name, **data}
        return data


_READ_ONLY = serializers.ReadOnlyField()


@functools.cache
def rendering_fields(serializer_class: type[serializers.Serializer]) -> tuple[Field, ...] | None:
    """The readable fields of ``serializer_class``, bound once to an instance of their own,
    or None when they must be bound to each rendering instance (``shares_bound_fields``)."""
    if not _class_shares(serializer_class):
        return None
    fields = tuple(serializer_class()._readable_fields)
    return None if any(_needs_own_copy(field) for field in fields) else fields


@functools.cache
def parsing_fields(serializer_class: type[serializers.Serializer], partial: bool) -> Mapping[str, Field] | None:
    """The fields a request's parsing reads, bound once to an instance of their own (one
    for full and one for partial parsing: a field asks its root whether parsing is
    partial), read-only, or None when they must be bound to each request's instance
    (``shares_bound_fields``).

    The serializer's own ``validate`` and ``validate_<field>`` methods still run on the
    request's instance, with its context; what a request may change in place, its
    validated data, is built anew for each request.
    """
    if not _class_shares(serializer_class):
        return None
    prototype = serializer_class(data={}, partial=partial)
    fields = serializers.Serializer.fields.func(prototype)
    if any(_needs_own_copy(field) for field in fields.values()):
        return None
    return types.MappingProxyType(fields)


def shares_bound_fields(cls: type) -> type:
    """Mark a field or serializer class whose own methods were read and found to use nothing
    of a bound field's parent, root or context, and not to change a field or a serializer's
    ``fields``: its instances may then be shared between requests (``rendering_fields``,
    ``parsing_fields``).

    DRF binds a fresh copy of every field to each serializer instance, because a bound
    field knows its parent, and through it the root's ``context``, ``instance`` and
    ``partial``. A shared field is bound to a prototype instance instead, whose context is
    empty and whose instance is None; only ``partial`` is kept right (one prototype for each
    value). So sharing is an allow-list, checked for every field of a class at any depth
    of nesting: each class in a field's (or nested serializer's) MRO must either be one of
    DRF's field classes audited for this (``_AUDITED``), define no method but ``__init__``,
    or carry this mark itself (a subclass does not inherit it). Anything else, for example
    a ``SerializerMethodField`` (an operation's absolute URLs come from the request), a
    relational field, a ``FileField``, a nested serializer with a ``validate`` method, a
    validator or default that asks for context, or a mutable default (see ``field_copy``),
    makes the whole class bind fields to each instance, as DRF does. A root class whose MRO
    defines ``__init__``, ``get_fields`` or ``fields`` outside the audited classes, without
    the mark, does too (it may change its fields per instance).
    """
    cls._shares_bound_fields = cls  # own mark: compared with the class that holds it
    return cls


def _marked(klass: type) -> bool:
    return klass.__dict__.get("_shares_bound_fields") is klass


@functools.cache
def _reads_no_binding(cls: type) -> bool:
    """Whether every class of ``cls``'s MRO is audited, marked, or defines no method but ``__init__``."""
    for klass in cls.__mro__:
        if klass in _AUDITED or _marked(klass):
            continue
        if any(name != "__init__" and isinstance(value, _METHODS) for name, value in vars(klass).items()):
            return False
    return True


@functools.cache
def _class_shares(serializer_class: type) -> bool:
    """Whether a root class leaves its fields as declared (no per-instance changes)."""
    return not any(name in vars(klass) for klass in serializer_class.__mro__
                   if klass not in _AUDITED and not _marked(klass) for name in ("__init__", "get_fields", "fields"))


def _needs_own_copy(field: Field) -> bool:
    """Whether ``field``, or one nested in it, must be bound to each serializer instance."""
    if not _reads_no_binding(type(field)):
        return True
    if any(getattr(validator, "requires_context", False) for validator in field.validators):
        return True
    # (``initial`` is left out: only HTML forms read it, and DRF's list and dict fields hold {} and [].)
    if getattr(field.default, "requires_context", False) or not _shareable(field.default):
        return True
    if isinstance(field, serializers.ListSerializer):
        return _needs_own_copy(field.child)
    if isinstance(field, serializers.Serializer):
        return any(_needs_own_copy(nested) for nested in field.fields.values())
    child = getattr(field, "child", None)
    return isinstance(child, Field) and _needs_own_copy(child)


_METHODS = (types.FunctionType, property, functools.cached_property, cached_property, classmethod, staticmethod)


# Values a field may hold as its default or initial that no request can change in place.
_IMMUTABLE = (str, bytes, int, float, Decimal, date, time, timedelta, Enum, type(None))
# Callable defaults that are called for each value and hold no state of their own (``default=list``).
_FACTORIES = (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def field_copy(field: Field) -> Field:
    """A copy of a declared field for one serializer instance, to bind to that instance alone.

    DRF deep-copies each declared field for every serializer instance, and a field's
    ``__deepcopy__`` runs its ``__init__`` again (a ``RegexField`` builds its validators
    anew): up to 10 us a field, 0.3 ms for a request that parses and renders one
    resource. ``bind()`` only sets attributes (``field_name``, ``parent``, ``label``,
    ``source``, ``source_attrs``), so a shallow copy of an unbound leaf field is enough to
    keep DRF's guarantee that no two instances share a bound field. The copy gets its own
    ``error_messages``, ``validators`` and ``style`` containers; what it still shares with the
    declared field (compiled regexes, validator objects, choices, ``_args``/``_kwargs``)
    is never written after construction.

    Deep-copied as before: serializers and list serializers, fields with a bound child
    (``ListField``, ``DictField``, ``HStoreField``, ``ManyRelatedField``), a field class with
    its own ``__deepcopy__``, a field that is already bound, and one whose default or
    initial value is a mutable object (a request could change it in place).
    """
    if (isinstance(field, serializers.BaseSerializer) or type(field).__deepcopy__ is not Field.__deepcopy__
            or hasattr(field, "child") or hasattr(field, "child_relation") or field.parent is not None
            or not _shareable(field.default) or not _shareable(field.initial)):
        return copy.deepcopy(field)
    # What copy.copy does, without its __reduce_ex__ round trip (three times the cost).
    clone = object.__new__(type(field))
    state = clone.__dict__
    state.update(field.__dict__)
    state["error_messages"] = dict(field.error_messages)
    state["style"] = dict(field.style)
    if "_validators" in state:  # else built lazily on the copy, from get_validators()
        state["_validators"] = list(state["_validators"])
    return clone


def _shareable(value) -> bool:
    return value is empty or isinstance(value, _IMMUTABLE) or isinstance(value, _FACTORIES)


class IdField(serializers.RegexField):
    """A resource identifier: 1-128 characters of ``[A-Za-z0-9._:-]``."""

    # A class default, not set after __init__: RegexField builds its validator from the
    # message in __init__, so a later assignment never reached a client.
    default_error_messages = {"invalid": "Must be 1-128 characters of [A-Za-z0-9._:-]."}

    def __init__(self, **kwargs):
        kwargs.setdefault("max_length", 128)
        super().__init__(ID_PATTERN, **kwargs)


class MoneySerializer(StrictSerializer):
    currency = serializers.RegexField(r"^[A-Z]{3}$")
    amount = serializers.DecimalField(max_digits=18, decimal_places=4, min_value=0)


@shares_bound_fields
class SignatureSerializer(FieldCopiesMixin, serializers.Serializer):
    """The C9 Signature object, rendered read-only; one component for every app's schema."""

    alg = serializers.CharField()
    kid = serializers.CharField()
    issuer = serializers.CharField()
    issued_at = serializers.CharField()
    payload_hash = serializers.CharField()
    value = serializers.CharField()

    def __init__(self, *args, **kwargs):
        # Rendered null for an unsigned row (below), so the schema says it may be null.
        kwargs.setdefault("allow_null", True)
        super().__init__(*args, **kwargs)

    def to_representation(self, instance):
        # Not signed yet (or a row written without one): null, never a half object.
        if not instance:
            return None
        return super().to_representation(instance)


# DRF's classes (its version is pinned) and ours whose methods were read for
# ``shares_bound_fields``: parsing and rendering read ``partial`` from the root and
# nothing else of the parent, root or context, and write nothing to the field.
_AUDITED = frozenset({
    object, Field, serializers.BaseSerializer, serializers.Serializer, serializers.ListSerializer,
    serializers.BooleanField, serializers.CharField, serializers.RegexField, serializers.URLField,
    serializers.ChoiceField, serializers.DateTimeField, serializers.DecimalField, serializers.IntegerField,
    serializers.FloatField, serializers.ListField, serializers.DictField, serializers.JSONField,
    serializers.ReadOnlyField, drf_fields._UnvalidatedField,
    FieldCopiesMixin, StrictSerializer,
})
