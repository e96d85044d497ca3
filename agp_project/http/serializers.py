"""Strict request parsing (docs/reference/api.md): unknown and read-only fields are a 400."""

import re
from datetime import datetime
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import connection
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agp_project.currencies import MAX_AMOUNT, decimals_of, minor_units
from agp_project.exactjson import as_double
from agp_project.ids import ID_PATTERN

# The date, "T" or a space, a time, and its zone: "Z" or an offset.
ZONED_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([Zz]|[+-]\d{2}:?\d{2})")


def _json_kind(value) -> type:
    """The JSON type a Python value stands for (choices are str enums; bool is no int in JSON)."""
    for kind in (bool, str, int):
        if isinstance(value, kind):
            return kind
    return type(value)


def json_type_problem(field: serializers.Field, value) -> str | None:
    """Why ``value``, as JSON gave it, is not of the JSON type ``field`` takes, or None.

    DRF converts on its own (``123`` becomes ``"123"`` for a CharField, ``"1"`` becomes ``1``
    for an IntegerField, ``"yes"`` and ``0`` become booleans): what was signed and stored
    would not be what the client sent. ``null`` is left to the field's ``allow_null``;
    fields with their own parsing (money, currencies, free-form JSON) check for themselves.
    """
    if value is None:
        return None
    if isinstance(field, serializers.BooleanField):
        return None if isinstance(value, bool) else "Must be a boolean (true or false)."
    if isinstance(field, serializers.ChoiceField):
        kinds = {_json_kind(choice) for choice in field.choices} or {str}
        return None if _json_kind(value) in kinds else "Must be one of the listed values, as a string."
    if isinstance(field, serializers.DateTimeField):
        # A date-time without its zone ("2030-01-01", "2030-01-01T00:00:00") would be read in
        # the server's zone: an expiry hours off for a client that meant its own.
        if isinstance(value, str) and ZONED_DATETIME.fullmatch(value):
            return None
        return "Must be an ISO 8601 date-time with its zone, such as 2030-01-01T00:00:00Z."
    if isinstance(field, (serializers.CharField, serializers.DateField)):
        return None if isinstance(value, str) else "Must be a string."
    if isinstance(field, serializers.IntegerField):
        return None if isinstance(value, int) and not isinstance(value, bool) else "Must be an integer."
    if isinstance(field, serializers.ListField):
        if not isinstance(value, list):
            return "Must be a list."
        for index, item in enumerate(value):
            problem = json_type_problem(field.child, item)
            if problem:
                return f"Item {index}: {problem}"
    if isinstance(field, serializers.DictField):
        if not isinstance(value, dict):
            return "Must be an object."
        for key, item in value.items():
            problem = json_type_problem(field.child, item)
            if problem:
                return f"{key}: {problem}"
    return None


class StrictSerializer(serializers.Serializer):
    """A serializer that refuses what it does not know, so nothing is silently dropped.

    ``type_name`` is the resource's ``type`` constant: rendered first in every
    representation and, when a request sends it, required to match.
    """

    type_name: str | None = None

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
            else:
                problem = json_type_problem(field, data[name])
                if problem:
                    problems[name] = [problem]
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


class WholeMatchRegexValidator(RegexValidator):
    """A ``RegexValidator`` that must match the whole value.

    ``RegexValidator`` searches, and ``$`` also matches before a final newline, so
    ``^[a-z]+$`` lets ``"abc\\n"`` through: an id with a newline would be stored and logged.
    The pattern text stays the anchored one the OpenAPI document shows.
    """

    def __call__(self, value):
        if not isinstance(value, str) or not self.regex.fullmatch(value):
            raise ValidationError(self.message, code=self.code, params={"value": value})


class PatternField(serializers.RegexField):
    """A string field whose pattern must match the whole value (see ``WholeMatchRegexValidator``)."""

    def __init__(self, regex, **kwargs):
        # Refused, not trimmed: "abc\\n" is not the id "abc".
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(regex, **kwargs)
        self.validators = [WholeMatchRegexValidator(validator.regex, message=validator.message)
                           if type(validator) is RegexValidator else validator for validator in self.validators]


class IdField(PatternField):
    """A resource identifier: 1-128 characters of ``[A-Za-z0-9._:-]``."""

    # A class default, not set after __init__: RegexField builds its validator from the
    # message in __init__, so a later assignment never reached a client.
    default_error_messages = {"invalid": "Must be 1-128 characters of [A-Za-z0-9._:-]."}

    def __init__(self, **kwargs):
        kwargs.setdefault("max_length", 128)
        super().__init__(ID_PATTERN, **kwargs)


@extend_schema_field({"type": "string", "pattern": "^[A-Z]{3}$", "description": "An ISO 4217 currency code."})
class CurrencyField(serializers.Field):
    """An ISO 4217 currency code that has minor units (``agp_project.currencies``)."""

    default_error_messages = {"invalid": "Must be an ISO 4217 currency code such as USD, EUR or JPY."}

    def to_internal_value(self, data):
        if not isinstance(data, str) or minor_units(data) is None:
            self.fail("invalid")
        return data

    def to_representation(self, value):
        return value


@extend_schema_field({"type": "number", "description": "A JSON number (never a string), exact; at most as many "
                                                       "decimals as the currency's ISO 4217 minor units."})
class AmountField(serializers.Field):
    """A money amount: a JSON number, read exactly (a Decimal), ``0 <= amount < 10^14``
    (``positive``: above 0). A string (``"1e-2"``, ``"1_000"``) is refused, not converted:
    a tool must receive the very amount that was checked and reserved."""

    default_error_messages = {
        "not_a_number": "Must be a JSON number, not a string or another type.",
        "negative": "Must not be negative.",
        "not_positive": "Must be greater than 0.",
        "too_large": f"Must be less than {MAX_AMOUNT:f}.",
        "inexact_here": ("This service's database (SQLite, the embedded default) stores amounts as binary "
                         "doubles and would round this one: use at most 15 significant digits, or run the "
                         "service on PostgreSQL."),
    }

    def __init__(self, *, positive: bool = False, **kwargs):
        self.positive = positive
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, Decimal)):
            self.fail("not_a_number")
        value = Decimal(data)
        if not value.is_finite():
            self.fail("not_a_number")
        if value < 0:
            self.fail("negative")
        if self.positive and value == 0:
            self.fail("not_positive")
        if value >= MAX_AMOUNT:
            self.fail("too_large")
        if connection.vendor == "sqlite" and as_double(value) is None:
            self.fail("inexact_here")  # never stored rounded, and never read back past its column's digits
        return value

    def to_representation(self, value):
        return Decimal(value)


def minor_units_problem(currency: str | None, amount: Decimal | None) -> str | None:
    """Why ``amount`` has more decimals than ``currency`` allows, or None."""
    if currency is None or amount is None:
        return None
    units = minor_units(currency)
    if units is not None and decimals_of(amount) > units:
        return (f"{currency} has {units} decimal{'s' if units != 1 else ''} (ISO 4217 minor units); "
                f"{amount} has more. Amounts are never rounded.")
    return None


class MoneySerializer(StrictSerializer):
    """``{"currency", "amount"}``: an ISO 4217 code and an exact JSON number within its minor units."""

    currency = CurrencyField()
    amount = AmountField()

    def validate(self, attrs):
        problem = minor_units_problem(attrs.get("currency"), attrs.get("amount"))
        if problem:
            raise serializers.ValidationError({"amount": [problem]})
        return attrs


class SignatureSerializer(serializers.Serializer):
    """The server's Ed25519 signature of the record: ``payload_hash`` is the SHA-256 of the record
    without its signature in canonical JSON (RFC 8785), ``value`` the signature of that hash by
    the key ``kid`` of ``/.well-known/jwks.json``."""

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
