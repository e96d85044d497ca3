"""JSON with exact numbers, as the service reads and writes it.

A number with a fraction or an exponent is a ``Decimal`` both ways: amounts such as
``1234567890123.4567`` arrive and leave exactly, and the canonical form a signature covers
(``canonical_json``) is the service's: RFC 8785, where a Decimal that is the shortest form of
a double is written as RFC 8785 writes that double, and any other as its exact decimal text.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

_INT_LIMIT = 2**53 - 1


def loads(text: str | bytes) -> Any:
    """Parse JSON, fractions as Decimals; a member name given twice in one object is a
    ``ValueError``: one reader would take the first, another the last, so the document would
    say two things (the service refuses such bodies too)."""
    return json.loads(text, parse_float=Decimal, object_pairs_hook=_unique_members)


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        names = [name for name, _ in pairs]
        twice = sorted({name for name in names if names.count(name) > 1})
        raise ValueError(f"the member name(s) {', '.join(map(repr, twice))} appear more than once in one object")
    return result


def decimal_text(value: Decimal) -> str:
    """A finite Decimal as a plain JSON number: no exponent, no trailing zeros."""
    if not value.is_finite():
        raise ValueError(f"{value} is not a JSON number")
    text = format(value, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def dumps(value: Any) -> str:
    """Compact JSON; a Decimal is written as its exact number (``json.dumps`` cannot)."""
    if isinstance(value, Decimal):
        return decimal_text(value)
    if isinstance(value, dict):
        return "{" + ",".join(json.dumps(str(key), ensure_ascii=False) + ":" + dumps(member)
                              for key, member in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(dumps(member) for member in value) + "]"
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def canonical_json(value: Any) -> bytes:
    """The service's canonical bytes of ``value`` (RFC 8785, Decimals exact)."""
    import rfc8785

    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"{value} is not a JSON number")
        if value == value.to_integral_value() and -_INT_LIMIT <= value <= _INT_LIMIT:
            return rfc8785.dumps(int(value))
        as_double = float(value)
        if math.isfinite(as_double) and Decimal(repr(as_double)) == value:
            return rfc8785.dumps(as_double)
        return decimal_text(value).encode("ascii")
    if isinstance(value, dict):
        members = sorted(((str(key), member) for key, member in value.items()),
                         key=lambda item: item[0].encode("utf-16-be", "surrogatepass"))
        return b"{" + b",".join(rfc8785.dumps(key) + b":" + canonical_json(member) for key, member in members) + b"}"
    if isinstance(value, (list, tuple)):
        return b"[" + b",".join(canonical_json(member) for member in value) + b"]"
    return rfc8785.dumps(value)
