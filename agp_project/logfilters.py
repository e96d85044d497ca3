"""Filters of the service's plain log configuration (settings ``LOGGING``)."""

import logging

from celery.app import trace
from django.conf import settings

# celery.beat's line for each task it sends (its format string, with the entry's name and task).
BEAT_SENDING = "Scheduler: Sending due task %s (%s)"
# The worker's line for a message it drops: a sweep's tick past its ``expires`` (by design: the
# next tick does the work), with the task's name and id.
DISCARDING = "Discarding revoked task: %s[%s]"
# What a sweep returns when it found nothing to do (a count, or no checkpoint).
IDLE_RESULTS = ("0", "None")


def _sweep_tasks() -> frozenset[str]:
    return frozenset(entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values())


class QuietIdleSweeps(logging.Filter):
    """Drop the INFO lines of the periodic sweeps that found nothing to do.

    Beat sends each sweep every few seconds, and Celery logs the send, the receipt and the
    success of every one: on an idle service, most of the log. A sweep that did something
    returns a non-zero count and its success line stays; the sweeps log what they recover
    themselves; warnings and errors always pass. Celery passes each task's log context as
    the record's ``data`` (celery.app.trace, for custom handlers).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        if record.msg == BEAT_SENDING and isinstance(record.args, tuple) and len(record.args) == 2:
            return record.args[1] not in _sweep_tasks()
        if record.msg == DISCARDING and isinstance(record.args, tuple) and len(record.args) == 2:
            return record.args[0] not in _sweep_tasks()
        data = getattr(record, "data", None)
        if not isinstance(data, dict) or data.get("name") not in _sweep_tasks():
            return True
        if record.msg == trace.LOG_RECEIVED:
            return False
        if record.msg == trace.LOG_SUCCESS:
            return data.get("return_value") not in IDLE_RESULTS
        return True
