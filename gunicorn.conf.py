"""gunicorn's settings for AGP (gunicorn reads ./gunicorn.conf.py; scripts/serve and the image name it too).

- Request limits: gunicorn refuses what breaks them before Django sees the request, with
  its own plain HTML page and ``Connection: close`` (not the JSON error envelope): a request
  line longer than ``limit_request_line`` bytes is a 414; more than ``limit_request_fields``
  header fields, or one longer than ``limit_request_field_size`` bytes, a 431; a request line
  or header it cannot parse, a 400. Every request the API defines fits far inside them, so
  only malformed or hostile requests meet these answers (docs/decisions/hostile-input.md).
- Metrics: with ``PROMETHEUS_MULTIPROC_DIR`` set, each worker process writes its counters to
  files in that directory and ``/metrics`` adds them up. A worker that exits is marked dead,
  so its live gauges leave the sums (its counters stay). Emptying the directory before the
  server starts is the starter's job (scripts/serve does it before starting gunicorn and the
  Celery worker, which share it): gunicorn alone cannot know whether a worker still writes there.
- Logs: with ``AGP_LOG_FORMAT=json``, gunicorn's own lines (start, workers, access log) are
  JSON objects like the application's, the access line with the request's ``X-Request-ID``.
  In either format an ``access_token`` in a query string (which the API refuses) is written
  ``[redacted]``: a token in a log is a credential for whoever reads the log.
"""

import os

from gunicorn.glogging import Logger
from prometheus_client import multiprocess

from agp_project.logformat import redact_url

limit_request_line = 4094
limit_request_fields = 100
limit_request_field_size = 8190


class RedactingLogger(Logger):
    """gunicorn's logger, with tokens in the URL's query hidden from the access line's atoms."""

    def atoms(self, resp, req, environ, request_time):
        atoms = super().atoms(resp, req, environ, request_time)
        for key in ("r", "q", "f"):  # the request line, the query string, the referring URL
            if isinstance(atoms.get(key), str):
                atoms[key] = redact_url(atoms[key])
        return atoms


logger_class = RedactingLogger


def child_exit(server, worker):
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(worker.pid)


if os.environ.get("AGP_LOG_FORMAT") == "json":
    # The request line, status, bytes and duration (ms), and the id the response echoed.
    access_log_format = '%(h)s "%(r)s" %(s)s %(B)s %(M)sms %({x-request-id}o)s'
    logconfig_dict = {
        "formatters": {"json": {"()": "agp_project.logformat.JsonFormatter"}},
        "filters": {"request_id": {"()": "agp_project.logformat.RequestIdFilter"}},
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": "json", "filters": ["request_id"],
                        "stream": "ext://sys.stdout"},
            "error_console": {"class": "logging.StreamHandler", "formatter": "json", "filters": ["request_id"],
                              "stream": "ext://sys.stderr"},
        },
        "loggers": {
            "gunicorn.error": {"level": "INFO", "handlers": ["error_console"], "propagate": False},
            "gunicorn.access": {"level": "INFO", "handlers": ["console"], "propagate": False},
        },
    }
