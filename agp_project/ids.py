"""Identifiers (docs/reference/api.md): client-chosen or server-generated with a short prefix."""

import os
import re
import time

ID_PATTERN = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


def new_id(prefix: str) -> str:
    """``<prefix>_`` and a 26-character ULID: sortable by creation time, 80 random bits."""
    value = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return f"{prefix}_{''.join(reversed(chars))}"


def is_valid_id(value: str) -> bool:
    return isinstance(value, str) and bool(ID_PATTERN.fullmatch(value))
