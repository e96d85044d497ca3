"""Reading settings from the environment, failing loudly on malformed values."""

import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured


def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = env_str(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be >= {minimum}, got {value}")
    return value


def env_bool(name: str, default: bool) -> bool:
    raw = env_str(name)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false), got {raw!r}")


def env_list(name: str, default: list[str]) -> list[str]:
    raw = env_str(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def file_created_once(path: Path, make: Callable[[], bytes]) -> bytes:
    """The contents of ``path``, written once (mode 0600) with ``make()`` when it is missing.

    O_EXCL: when web and worker start together exactly one of them writes the file and
    the other reads it (waiting briefly for the write), so both hold the same secret or key.
    """
    try:
        existing = path.read_bytes()
    except FileNotFoundError:
        existing = b""
    if existing.strip():
        return existing
    path.parent.mkdir(parents=True, exist_ok=True)
    value = make()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        for _ in range(50):
            existing = path.read_bytes()
            if existing.strip():
                return existing
            time.sleep(0.01)
        raise ImproperlyConfigured(f"{path} exists but is empty; delete it or set the secret") from None
    with os.fdopen(fd, "wb") as handle:
        handle.write(value)
    return value


def secret_from_file(path: Path) -> str:
    """A random secret generated once into ``path`` and read back afterwards."""
    return file_created_once(path, lambda: secrets.token_urlsafe(48).encode("ascii")).decode("ascii").strip()
