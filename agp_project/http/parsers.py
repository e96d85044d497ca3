from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class StrictJSONParser(JSONParser):
    """JSON bodies only; DRF's JSONParser already refuses NaN and Infinity (strict mode)."""

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            # A body nested deeper than the parser's recursion limit is malformed input (400),
            # not a server fault.
            raise ParseError("JSON parse error - nested too deeply.") from None
