"""The Celery app, configured from Django settings with the ``CELERY_`` prefix.

The worker logs through Django's ``LOGGING`` (the format ``AGP_LOG_FORMAT`` chooses, the level
``AGP_LOG_LEVEL``) rather than Celery's own set-up, and binds the request id a task's message
carries while the task runs (agp_project/request_context.py).
"""

import logging.config
import os
import warnings

from celery import Celery
from celery.exceptions import SecurityWarning
from celery.signals import setup_logging, task_postrun, task_prerun, worker_process_shutdown, worker_ready

from .request_context import TASK_HEADER, bind_task, sane_request_id

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agp_project.settings.base")

# Celery warns on every start as root because a root worker that unpickles messages can be
# made to run anything. This worker accepts JSON only (CELERY_ACCEPT_CONTENT; with pickle
# Celery refuses to start as root at all), and scripts/serve commonly runs as root in
# containers and CI; the Docker image runs as an unprivileged user.
warnings.filterwarnings("ignore", message="You're running the worker with superuser privileges",
                        category=SecurityWarning)

app = Celery("agp")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


# Tasks an operator is waiting on go to the control queue, and policy work nobody waits on
# (backtests, shadow evaluations) to the background queue, beside the default one (settings:
# CELERY_TASK_QUEUES). Every worker consumes the three and takes them in turns, so a control
# starts as soon as a worker process is free rather than behind every queued operation, and
# an operation never waits behind a backlog of background work. By name: the tasks live in
# apps above this package, which may not import them. The router is a function, not a
# settings dict, because the queues it names follow the default queue of the moment (tests
# point the app at a queue of their own).
CONTROL_TASKS = frozenset({"agp.enforce_freeze"})
BACKGROUND_TASKS = frozenset({"agp.run_backtest", "agp.evaluate_shadows"})


def control_queue(default_queue: str) -> str:
    return f"{default_queue}.control"


def background_queue(default_queue: str) -> str:
    return f"{default_queue}.background"


def route_by_kind(name, args, kwargs, options, task=None, **kw):
    """Celery router (CELERY_TASK_ROUTES): control tasks to the control queue, background tasks
    to the background queue (both of the current default queue), everything else to the default."""
    if name in CONTROL_TASKS:
        return {"queue": control_queue(app.conf.task_default_queue)}
    if name in BACKGROUND_TASKS:
        return {"queue": background_queue(app.conf.task_default_queue)}
    return None


@setup_logging.connect
def _logging_from_settings(**kwargs):
    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)


@task_prerun.connect
def _bind_task_context(task_id=None, task=None, **kwargs):
    request_id = sane_request_id(task.request.get(TASK_HEADER)) if task is not None else None
    bind_task(task.name if task is not None else None, task_id, request_id)


@task_postrun.connect
def _unbind_task_context(**kwargs):
    bind_task(None, None, None)


@worker_process_shutdown.connect
def _forget_exited_pool_process(pid=None, **kwargs):
    # A pool process's live gauges must not outlive it (prometheus-client's multiprocess mode);
    # its counters stay in the sums.
    from .metrics import multiprocess_dir

    if multiprocess_dir():
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid or os.getpid())


@worker_ready.connect
def _serve_worker_metrics(**kwargs):
    # Where the worker runs on another machine than gunicorn, its figures cannot reach the web
    # tier's /metrics through a shared directory: it serves them itself (docs/operations.md).
    from django.conf import settings

    from .metrics import multiprocess_dir, worker_metrics_serve

    bind = settings.AGP_WORKER_METRICS_BIND
    if not bind:
        return
    if not multiprocess_dir():
        logging.getLogger(__name__).error(
            "AGP_WORKER_METRICS_BIND needs PROMETHEUS_MULTIPROC_DIR: the pool processes count, not this one")
        return
    worker_metrics_serve(bind)
