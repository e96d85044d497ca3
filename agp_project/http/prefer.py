"""RFC 7240 ``Prefer``: how an action envelope asks to be executed (docs/reference/execution.md).

``respond-async`` asks for validation and asynchronous execution; anything else (no
header, ``return=representation``, preferences the service does not support) is a
validation only. The idempotency fingerprint covers the mode, so a key used for a
validation is never replayed for an execution.
"""

EXECUTE = "execute"
VALIDATE = "validate"


def _split_outside_quotes(text: str, separator: str) -> list[str]:
    parts, current, quoted, escaped = [], [], False, False
    for char in text:
        if escaped:
            current.append(char)
            escaped = False
        elif quoted and char == "\\":
            current.append(char)
            escaped = True
        elif char == '"':
            current.append(char)
            quoted = not quoted
        elif char == separator and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        inner, out, escaped = value[1:-1], [], False
        for char in inner:
            if escaped or char != "\\":
                out.append(char)
                escaped = False
            else:
                escaped = True
        return "".join(out)
    return value


def parse_prefer(header: str) -> dict[str, str | None]:
    """RFC 7240 ``Prefer``: ``{name: value}`` with lower-cased names (and ``return`` values).

    Several headers arrive joined by commas; empty list elements are skipped; a
    preference's parameters (``; name=value``) are accepted and ignored; when a preference
    appears more than once only the first counts (RFC 7240 section 2).
    """
    preferences: dict[str, str | None] = {}
    for element in _split_outside_quotes(header or "", ","):
        head = _split_outside_quotes(element, ";")[0].strip()
        if not head:
            continue
        name, sep, value = head.partition("=")
        name = name.strip().lower()
        if not name or name in preferences:
            continue
        preferences[name] = _unquote(value) if sep else None
    if preferences.get("return"):
        preferences["return"] = preferences["return"].lower()
    return preferences


def execution_mode(header: str) -> str:
    """``EXECUTE`` when ``Prefer`` asks for ``respond-async``, else ``VALIDATE``."""
    return EXECUTE if "respond-async" in parse_prefer(header) else VALIDATE
