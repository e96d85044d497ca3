"""Canonical JSON (RFC 8785, JCS) and the hashes built on it."""

import hashlib
from decimal import Decimal
from typing import Any

import rfc8785


def _plain(value: Any) -> Any:
    """Bring values DRF may leave in rendered data (Decimal, tuples) to JSON types."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def canonical_json(value: Any) -> bytes:
    """The RFC 8785 serialisation of ``value``: the bytes every hash and signature covers."""
    return rfc8785.dumps(_plain(value))


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def content_hash(value: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``value``."""
    return "sha256:" + sha256_hex(canonical_json(value))


def bytes_hash(data: bytes) -> str:
    return "sha256:" + sha256_hex(data)
