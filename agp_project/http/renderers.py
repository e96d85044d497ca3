"""The one JSON renderer of the API: numbers exact (docs/reference/api.md; docs/decisions/exact-json.md)."""

from rest_framework import renderers
from rest_framework.utils.encoders import JSONEncoder

from agp_project.exactjson import dumps

_default = JSONEncoder().default


class ExactJSONRenderer(renderers.JSONRenderer):
    """DRF's compact JSON, but a Decimal is written as the exact JSON number it is.

    DRF's own turns a Decimal into a binary float (1234567890123.4567 -> ...4568), which
    would make an amount rendered in a response, or inside a signed delegation link,
    differ from the amount that was checked and signed.
    """

    def render(self, data, accepted_media_type=None, renderer_context=None):
        if data is None:
            return b""
        text = dumps(data, default=_default)
        # As DRF: U+2028 and U+2029 escaped, so the output is also a JavaScript literal.
        return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").encode()
