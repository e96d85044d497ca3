from rest_framework.parsers import JSONParser


class StrictJSONParser(JSONParser):
    """JSON bodies only; DRF's JSONParser already refuses NaN and Infinity (strict mode)."""

    media_type = "application/json"
