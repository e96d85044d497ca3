"""Content negotiation: DRF's, answered at once for what nearly every request asks."""

from rest_framework.negotiation import DefaultContentNegotiation

# ``Accept`` values for which DRF's negotiation picks a sole JSON renderer with its own media type.
_JSON_ANSWERS = frozenset({None, "*/*", "application/json"})


class JSONContentNegotiation(DefaultContentNegotiation):
    """``DefaultContentNegotiation`` with a shortcut for a sole ``application/json`` renderer.

    The service renders JSON only. DRF still parses every request's ``Accept`` header into
    media types ordered by precedence, and its query string for a ``format`` override,
    before it settles on the one renderer: 45-65 us a request on the benchmark's VM. When
    the header is absent, ``*/*`` or ``application/json``, there is no format suffix and
    the query string cannot hold the override (it neither names it nor holds an escape
    that could spell it), DRF's answer is the renderer with its own media type, given
    here at once. Anything else (another type, parameters, several types, ``?format=``)
    goes through DRF's negotiation, its 406 included.
    """

    def select_renderer(self, request, renderers, format_suffix=None):
        override, query = self.settings.URL_FORMAT_OVERRIDE, request.META.get("QUERY_STRING", "")
        # The query string is looked at undecoded: one with an escape could spell the override.
        if (format_suffix is None and len(renderers) == 1 and renderers[0].media_type == "application/json"
                and request.META.get("HTTP_ACCEPT") in _JSON_ANSWERS
                and not (override and (override in query or "%" in query))):
            return renderers[0], renderers[0].media_type
        return super().select_renderer(request, renderers, format_suffix)
