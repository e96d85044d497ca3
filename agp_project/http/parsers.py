"""The one request body parser: strict JSON, numbers exact (docs/reference/api.md).

Malformed input is a 400 before anything reads it: duplicate keys (one reader would take
the first, another the last), ``NaN``/``Infinity`` and other non-JSON numbers, numbers
longer than ``exactjson.MAX_NUMBER_DIGITS`` digits, NUL characters and lone UTF-16
surrogates (neither PostgreSQL nor a hash can take them), bytes that are not UTF-8, and
nesting past the parser's recursion limit. Where it is known, ``details.fields`` names
the field (a dotted path into the body).
"""

import json

from rest_framework.parsers import JSONParser

from agp_project import errors
from agp_project.exactjson import JSONInputError, bad_text, loads


class MalformedBody(errors.InvalidRequest):
    """400 for a body that is not acceptable JSON (raised by the parser, mapped as any AGPError)."""

    def __init__(self, problem: str, *, field: str | None = None):
        details = {"fields": {field: [problem]}} if field is not None else {"errors": [problem]}
        super().__init__(f"Malformed request body: {problem}", details=details)


class StrictJSONParser(JSONParser):
    """JSON bodies only, read by ``exactjson.loads`` and checked for unstorable strings."""

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None):
        raw = stream.read() if stream is not None else b""
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedBody(f"the body is not UTF-8 (byte {exc.start}).") from None
        try:
            data = loads(text)
        except JSONInputError as exc:
            raise MalformedBody(exc.message, field=exc.field) from None
        except json.JSONDecodeError as exc:
            raise MalformedBody(f"{exc.msg} at line {exc.lineno} column {exc.colno}.") from None
        except RecursionError:
            raise MalformedBody("nested too deeply.") from None
        found = bad_text(data)
        if found:
            path, problem = found
            raise MalformedBody(problem, field=path)
        return data


def has_nul(value) -> bool:
    """Whether any string (key or value) in a parsed JSON document holds NUL or a lone surrogate."""
    return bad_text(value) is not None
