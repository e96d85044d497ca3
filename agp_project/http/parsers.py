from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class StrictJSONParser(JSONParser):
    """JSON bodies only; DRF's JSONParser already refuses NaN and Infinity (strict mode)."""

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            # A body nested deeper than the parser's recursion limit is malformed input (400),
            # not a server fault.
            raise ParseError("JSON parse error - nested too deeply.") from None
        if has_nul(data):
            # PostgreSQL cannot store NUL in text or jsonb: refuse it here (400), on every database.
            raise ParseError("JSON parse error - NUL characters (\\u0000) are not accepted.")
        return data


def has_nul(value) -> bool:
    """Whether any string (key or value) in a parsed JSON document holds a NUL character."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
