"""What a log line says about the work it comes from: the request id, and the task running.

A request's id comes from its ``X-Request-ID`` header when that is sane (1-128 characters
of ``A-Z a-z 0-9 . _ : / + = @ -``), else it is made here; the response echoes it
(``agp_project.http.middleware.RequestIdMiddleware``). Work the request causes later carries
it on: the outbox row of a task stores it, the published message has it as the header
``agp_request_id``, and the worker binds it while the task runs (``execution.tasks``), so
every log line of that work names the request (docs/operations.md).

Context variables: each thread (a gunicorn ``gthread`` worker's) and each task sees its own.
"""

import re
import uuid
from contextvars import ContextVar, Token

HEADER = "X-Request-ID"
META_KEY = "HTTP_X_REQUEST_ID"
# The Celery message header that carries the id from the outbox to the worker.
TASK_HEADER = "agp_request_id"
_SANE = re.compile(r"[A-Za-z0-9._:/+=@-]{1,128}")

_request_id: ContextVar[str | None] = ContextVar("agp_request_id", default=None)
_task: ContextVar[tuple[str, str] | None] = ContextVar("agp_task", default=None)


def request_id_for(header_value: str | None) -> str:
    """The client's id when it is sane, else a new one (32 hex digits)."""
    if header_value and _SANE.fullmatch(header_value):
        return header_value
    return uuid.uuid4().hex


def sane_request_id(value: object) -> str | None:
    """``value`` if it is a sane request id (as a message header may carry it), else None."""
    return value if isinstance(value, str) and _SANE.fullmatch(value) else None


def current_request_id() -> str | None:
    return _request_id.get()


def bind_request_id(request_id: str | None) -> Token:
    return _request_id.set(request_id)


def unbind_request_id(token: Token) -> None:
    _request_id.reset(token)


def current_task() -> tuple[str, str] | None:
    """``(task name, task id)`` of the Celery task this code runs in, if any."""
    return _task.get()


def bind_task(name: str | None, task_id: str | None, request_id: str | None) -> None:
    """Set by the worker when a task starts (and cleared with ``None`` when it ends)."""
    _task.set((name or "", task_id or "") if task_id else None)
    _request_id.set(request_id)
