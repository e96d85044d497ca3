"""Canonical JSON (RFC 8785, JCS) and the hashes built on it.

One extension: numbers the service reads exactly (``Decimal``, docs/decisions/exact-json.md).
A Decimal that is the shortest form of an IEEE double (``0.1``, ``25.5``, ``1e-7``) is
written exactly as RFC 8785 writes that double, so for every such number the bytes are
plain RFC 8785; a Decimal no double holds (``1234567890123.4567``) is written as its exact
decimal text (``exactjson.decimal_text``) instead of being rounded, so what is hashed and
signed is what the client sent.
"""

import contextlib
import hashlib
import json
from decimal import Decimal
from typing import Any

import rfc8785

from .exactjson import as_double, decimal_text


def plain_json(value: Any) -> Any:
    """Bring values DRF may leave in rendered data to JSON types: tuples become lists, keys
    strings. Decimals stay Decimals: they are exact JSON numbers here (a float would round)."""
    if isinstance(value, dict):
        return {str(k): plain_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_json(v) for v in value]
    return value


# RFC 8785 numbers are IEEE doubles: integers beyond this are refused (rfc8785's domain).
INT_LIMIT = 2**53 - 1
_fast_dumps = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False).encode


def _fast_subset(value: Any) -> bool:
    """Whether ``json.dumps`` writes exactly the RFC 8785 bytes of ``value``.

    True for exact ``dict`` (ASCII string keys: Python's code-point order is then the
    UTF-16 order RFC 8785 sorts by), ``list``, ``str``, ``bool``, ``None`` and ``int``
    within +-(2**53 - 1). Floats (whose shortest form differs between Python and
    ECMAScript), Decimals, tuples and subclasses take the rfc8785 library instead.
    Strings are escaped identically by both (``"``, ``\\``, the short forms of
    \b \f \n \r \t, ``\\u00xx`` for other control characters, nothing else).
    """
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return -INT_LIMIT <= value <= INT_LIMIT
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or not key.isascii() or not _fast_subset(item):
                return False
        return True
    if kind is list:
        for item in value:
            if not _fast_subset(item):
                return False
        return True
    return False


def canonical_json(value: Any) -> bytes:
    """The RFC 8785 serialisation of ``value``: the bytes every hash and signature covers.

    The common JSON subset (see ``_fast_subset``) goes through the C JSON encoder, several
    times faster than the pure-Python rfc8785 library, which serialises everything else;
    tests/platform/test_canonical_fast.py proves both give the same bytes.
    """
    if _fast_subset(value):
        # A lone surrogate does not encode: rfc8785 below raises its CanonicalizationError.
        with contextlib.suppress(UnicodeEncodeError):
            return _fast_dumps(value).encode("utf-8")
    out: list[bytes] = []
    _write(value, out)
    return b"".join(out)


def decimal_canonical(value: Decimal) -> bytes:
    """A Decimal's canonical number: RFC 8785's form of the double it is the shortest form
    of, else its exact decimal text. Non-finite values are refused like RFC 8785's."""
    if not value.is_finite():
        raise rfc8785.FloatDomainError(float(value))
    if value == value.to_integral_value() and -INT_LIMIT <= value <= INT_LIMIT:
        return rfc8785.dumps(int(value))
    double = as_double(value)
    if double is not None:
        return rfc8785.dumps(double)
    return decimal_text(value).encode("ascii")


def _utf16_order(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _write(value: Any, out: list[bytes]) -> None:
    """RFC 8785 by recursion: rfc8785 writes every scalar, Decimals take ``decimal_canonical``."""
    if isinstance(value, Decimal):
        out.append(decimal_canonical(value))
    elif isinstance(value, dict):
        keys = sorted(((str(key), member) for key, member in value.items()), key=lambda item: _utf16_order(item[0]))
        out.append(b"{")
        for index, (key, member) in enumerate(keys):
            if index:
                out.append(b",")
            out.append(rfc8785.dumps(key))
            out.append(b":")
            _write(member, out)
        out.append(b"}")
    elif isinstance(value, (list, tuple)):
        out.append(b"[")
        for index, member in enumerate(value):
            if index:
                out.append(b",")
            _write(member, out)
        out.append(b"]")
    else:
        out.append(rfc8785.dumps(value))


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def content_hash(value: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``value``."""
    return "sha256:" + sha256_hex(canonical_json(value))


def bytes_hash(data: bytes) -> str:
    return "sha256:" + sha256_hex(data)


def action_document(*, tool_id: str, operation: str, parameters: dict[str, Any] | None) -> dict[str, Any]:
    """The action a policy evaluation is made for and an envelope asks to run (docs/reference/governance.md)."""
    return {"tool_id": tool_id, "operation": operation, "parameters": parameters or {}}


def action_hash(*, tool_id: str, operation: str, parameters: dict[str, Any] | None) -> str:
    """``content_hash`` of ``action_document``: an evaluation clears an envelope only when both agree."""
    return content_hash(action_document(tool_id=tool_id, operation=operation, parameters=parameters))
