"""Log lines as one JSON object each (``AGP_LOG_FORMAT=json``), and the filter that adds the request id.

``RequestIdFilter`` sits on the console handler in either format: it gives every record a
``request_id`` (None outside a request or a task that carries one) and, in a task, ``task``
and ``task_id``. gunicorn's access log lines get theirs from the response's
``X-Request-ID``, since gunicorn writes them after the request has ended.

``JsonFormatter`` writes ``{"time", "level", "logger", "message", "request_id", ...}``; an
access line adds ``http`` (remote address, request line, status, bytes, milliseconds), a
task's line ``task`` and ``task_id``, an exception ``exception`` (the formatted traceback).
``redact_url`` hides the value of an ``access_token`` query parameter (a bearer token
sent in the URL, which the API refuses): gunicorn's access lines go through it
(gunicorn.conf.py), so a token sent that way is never written to the log.

Nothing here imports Django: gunicorn's master process uses it too (gunicorn.conf.py).
"""

import json
import logging
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from urllib.parse import unquote_plus

from .request_context import current_request_id, current_task

ACCESS_LOGGER = "gunicorn.access"
# gunicorn's access log atoms: remote address, request line, status, response bytes, duration (ms).
_ACCESS_FIELDS = {"remote": "h", "request": "r", "status": "s", "bytes": "B", "duration_ms": "M"}


# RFC 6750 2.3's query parameter: a bearer token in the URL.
QUERY_TOKEN = "access_token"
REDACTED = "[redacted]"
_QUERY_PARTS = re.compile(r"([&;])")


def redact_url(text: str) -> str:
    """``text`` (a URL, a query string, or a request line ``GET /path?query HTTP/1.1``) with the
    value of every ``access_token`` parameter replaced by ``[redacted]``, however its name is
    percent-encoded."""
    if QUERY_TOKEN[:6] not in text and "%" not in text:
        return text
    head, mark, rest = text.partition("?") if "?" in text else ("", "", text)
    query, space, tail = rest.partition(" ")
    parts = _QUERY_PARTS.split(query)
    for index in range(0, len(parts), 2):
        name, equals, _ = parts[index].partition("=")
        if unquote_plus(name) == QUERY_TOKEN:
            parts[index] = f"{name}={REDACTED}"
    return head + mark + "".join(parts) + space + tail


def _atom(atoms: Mapping, key: str):
    """One of gunicorn's access log atoms (its mapping answers "-" for a missing header)."""
    try:
        return atoms[key]
    except KeyError:
        return None


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        request_id = current_request_id()
        if request_id is None and record.name == ACCESS_LOGGER and isinstance(record.args, Mapping):
            echoed = _atom(record.args, "{x-request-id}o")
            request_id = echoed if echoed and echoed != "-" else None
        record.request_id = request_id
        task = current_task()
        if task is not None:
            record.task, record.task_id = task
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
            "process": record.process,
        }
        task_id = getattr(record, "task_id", None)
        if task_id:
            entry["task"] = getattr(record, "task", "")
            entry["task_id"] = task_id
        if record.name == ACCESS_LOGGER and isinstance(record.args, Mapping):
            entry["http"] = {field: _atom(record.args, atom) for field, atom in _ACCESS_FIELDS.items()}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)
