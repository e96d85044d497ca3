"""JSON with exact numbers, and strict about what it accepts.

A JSON number with a fraction or an exponent is read as a ``Decimal``, never a binary
float: ``1234567890123.4567`` stays ``1234567890123.4567`` through parsing, storage,
hashing, signing and rendering (docs/decisions/exact-json.md). ``loads`` refuses what JSON
does not allow or what the service cannot keep (duplicate keys, ``NaN``/``Infinity``,
numbers longer than ``MAX_NUMBER_DIGITS`` digits written out); ``bad_text`` finds strings
no database or hash can hold (NUL, lone UTF-16 surrogates). ``dumps`` writes ``Decimal``
values as plain JSON numbers (``decimal_text``) and everything else as ``json.dumps`` does.
"""

import json
import math
import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

# Written out in full (no exponent), a number has at most this many digits: enough for any
# amount or measurement, and it bounds what a 1 MiB body can make us allocate ("1e999999999").
MAX_NUMBER_DIGITS = 40
# NUL (PostgreSQL text cannot hold it) and UTF-16 surrogates (not Unicode scalar values: they
# have no UTF-8 form, so neither a database nor a hash can take them).
_BAD_CHARACTERS = re.compile("[\x00\ud800-\udfff]")


class JSONInputError(ValueError):
    """Input that is not acceptable JSON; ``field`` names where, when that is known."""

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field


def decimal_text(value: Decimal) -> str:
    """The JSON number of a finite Decimal: plain notation, no trailing zeros, no exponent.

    ``Decimal("25.5000")`` -> ``25.5``, ``Decimal("1E+2")`` -> ``100``, ``Decimal("-0.0")`` -> ``0``.
    Exact whatever the precision of the decimal context (nothing here rounds).
    """
    if not value.is_finite():
        raise ValueError(f"{value} is not a JSON number")
    text = format(value, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def as_double(value: Decimal) -> float | None:
    """The IEEE double whose shortest decimal form is ``value`` (``0.1``, ``25.5``), or None when
    no double holds it exactly (``1234567890123.4567``, ``100.0000000000000000001``)."""
    double = float(value)
    if math.isfinite(double) and Decimal(repr(double)) == value:
        return double
    return None


# Integers a reader of JSON numbers as IEEE doubles holds exactly, whatever it does past them.
DOUBLE_EXACT_INTEGERS = 2**53


def changed_as_double(value: Any) -> tuple[str, Any] | None:
    """The first number with a fraction or an exponent (a ``Decimal``) in ``value`` that a reader
    of JSON numbers as IEEE doubles would not read as written, compared with numbers written
    as decimals: ``(dotted path, number)``, or None. Plain integers are left to canonical
    JSON, which refuses them past 2^53. Kept: whole numbers within +-2^53, and the shortest
    decimal form of a double (``0.1``, ``25.5``): two different such forms are two different
    doubles, in the same order. Changed: ``100.0000000000000000001`` (read as 100),
    ``0.9499999999999999999`` (read as the double ``0.95`` is read as), ``18446744073709551617.0``.
    """
    for item, path in _nodes(value):
        if isinstance(item, Decimal) and as_double(item) is None \
                and not (item == item.to_integral_value() and abs(item) <= DOUBLE_EXACT_INTEGERS):
            return _path(path), item
    return None


def digits_written_out(value: Decimal) -> int:
    """How many digits ``decimal_text(value)`` has (computed, not written: "1e999999999" is cheap)."""
    _, digits, exponent = value.as_tuple()
    if not any(digits):
        return 1
    trailing = len(digits) - len("".join(map(str, digits)).rstrip("0"))
    significant, exponent = len(digits) - trailing, exponent + trailing
    whole = significant + exponent  # digits before the point; <= 0 for 0.00ddd
    return max(whole, 1) + max(-exponent, 0)


def _number(text: str) -> Decimal:
    """``parse_float``: a number with a fraction or an exponent, exactly."""
    try:
        value = Decimal(text)
    except InvalidOperation:  # the JSON scanner only hands over number syntax; defensive
        raise JSONInputError(f"{text[:50]} is not a number.") from None
    if digits_written_out(value) > MAX_NUMBER_DIGITS:
        raise JSONInputError(f"The number {text[:50]} has more than {MAX_NUMBER_DIGITS} digits written out.")
    return value


def _integer(text: str) -> int:
    """``parse_int``: an integer of at most ``MAX_NUMBER_DIGITS`` digits. Checked on the text:
    Python refuses to read one past 4,300 digits with a ValueError that is no JSON error."""
    if len(text.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise JSONInputError(f"The number {text[:50]}{'...' if len(text) > 50 else ''} has more than "
                             f"{MAX_NUMBER_DIGITS} digits written out.")
    return int(text)


def _refuse_constant(name: str):
    raise JSONInputError(f"{name} is not a JSON number.")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook``: a key given twice is refused (one reader would take the first,
    another the last: what was checked would not be what is acted on)."""
    result = dict(pairs)
    if len(result) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise JSONInputError(f"The key {key[:100]!r} appears more than once in one object.", field=key)
            seen.add(key)
    return result


def loads(text: str | bytes) -> Any:
    """Parse JSON text strictly, numbers exact. Raises ``JSONInputError`` (a ``ValueError``),
    ``json.JSONDecodeError`` for syntax errors, ``RecursionError`` for absurd nesting."""
    return json.loads(text, parse_float=_number, parse_int=_integer, parse_constant=_refuse_constant,
                      object_pairs_hook=_object)


def bad_text(value: Any) -> tuple[str, str] | None:
    """The first string (key or value) holding NUL or a lone surrogate: ``(path, problem)``.

    The path is dotted (``data.items.2.note``); None when every string is clean.
    """
    for item, path in _nodes(value):
        if isinstance(item, str):
            match = _BAD_CHARACTERS.search(item)
            if match:
                return _path(path), _problem(match.group())
        elif isinstance(item, dict):
            for key in item:
                match = _BAD_CHARACTERS.search(key)
                if match:
                    return _path((*path, key.encode("utf-8", "backslashreplace").decode())), _problem(match.group())
    return None


def _nodes(value: Any):
    """Every value of a parsed JSON document with its path (keys and indices), depth first,
    from a stack rather than by recursion: nesting deep enough for the parser is fine here."""
    stack: list[tuple[Any, tuple]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        yield item, path
        if isinstance(item, dict):
            stack.extend((member, (*path, key)) for key, member in item.items())
        elif isinstance(item, list):
            stack.extend((member, (*path, index)) for index, member in enumerate(item))


def _path(parts: tuple) -> str:
    return ".".join(str(part) for part in parts) or "(body)"


def _problem(character: str) -> str:
    if character == "\x00":
        return "NUL characters (\\u0000) are not accepted."
    return "Lone UTF-16 surrogates (\\ud800-\\udfff) are not accepted: they are not Unicode characters."


class _HasDecimal(Exception):
    pass


def _no_decimal(default: Callable[[Any], Any] | None):
    def hook(value: Any) -> Any:
        if isinstance(value, Decimal):
            raise _HasDecimal
        if default is None:
            raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
        return default(value)
    return hook


def dumps(value: Any, *, default: Callable[[Any], Any] | None = None, sort_keys: bool = False) -> str:
    """Compact JSON text (UTF-8 characters as they are), Decimals as exact numbers.

    ``default`` converts other types (as ``json.dumps``'s). Without a Decimal in ``value``
    this is ``json.dumps`` itself; with one, a small writer of the same output that writes
    each Decimal as ``decimal_text``.
    """
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False, sort_keys=sort_keys,
                          default=_no_decimal(default))
    except _HasDecimal:
        pass
    out: list[str] = []
    _write(value, out, default, sort_keys)
    return "".join(out)


def _write(value: Any, out: list[str], default, sort_keys: bool) -> None:
    if isinstance(value, Decimal):
        out.append(decimal_text(value))
    elif isinstance(value, dict):
        out.append("{")
        items = sorted(value.items()) if sort_keys else value.items()
        for index, (key, member) in enumerate(items):
            if index:
                out.append(",")
            out.append(json.dumps(key if isinstance(key, str) else str(key), ensure_ascii=False))
            out.append(":")
            _write(member, out, default, sort_keys)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for index, member in enumerate(value):
            if index:
                out.append(",")
            _write(member, out, default, sort_keys)
        out.append("]")
    elif value is None or isinstance(value, (str, int, float, bool)):
        out.append(json.dumps(value, ensure_ascii=False, allow_nan=False))
    elif default is not None:
        _write(default(value), out, default, sort_keys)
    else:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


class ExactJSONEncoder(DjangoJSONEncoder):
    """For APIs that take an encoder class (Django's ``JSONField``, ``JsonResponse``): ``dumps``,
    other types (dates, UUIDs) as Django's encoder writes them."""

    def encode(self, o: Any) -> str:
        return dumps(o, default=self.default, sort_keys=self.sort_keys)


class ExactJSONDecoder(json.JSONDecoder):
    """For APIs that take a decoder class: numbers with a fraction or exponent as Decimals.

    Lenient about length (stored values were checked when they came in).
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("parse_float", Decimal)
        super().__init__(*args, **kwargs)
