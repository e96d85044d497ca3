"""Settings for every environment, read from the environment (docs/configuration.md).

With nothing configured the service runs on embedded defaults: a SQLite database and a
SQLite broker file under ``var/``.
 Production points ``AGP_DATABASE_URL`` at PostgreSQL and
``AGP_BROKER_URL`` at Redis.
"""

from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from kombu import Exchange, Queue

from .env import env_bool, env_int, env_list, env_str, secret_from_file

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = Path(env_str("AGP_VAR_DIR", str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("AGP_DEBUG", False)
# Only signs Django admin sessions and CSRF tokens; API tokens use AGP_AUTH_SECRET. Never
# the auth secret itself: unset, a random key is generated once under var/.
SECRET_KEY = env_str("AGP_DJANGO_SECRET_KEY") or secret_from_file(VAR_DIR / "django-secret-key")
# The loopback names: what a local run answers to, and what health checks on the host use.
LOOPBACK_HOSTS = ["localhost", "127.0.0.1", "[::1]"]


def _allowed_hosts(base_url: str | None) -> list[str]:
    """AGP_ALLOWED_HOSTS when given; else the host of AGP_BASE_URL and the loopback names; else
    only the loopback names. Never "*" by default: without AGP_BASE_URL, the Host header
    becomes the Location, status_url and result_url a client is sent to."""
    configured = env_list("AGP_ALLOWED_HOSTS", [])
    if configured:
        return configured
    if base_url:
        host = urlsplit(base_url).hostname
        if not host:
            raise ImproperlyConfigured(f"AGP_BASE_URL must be an absolute URL, got {base_url!r}")
        return [f"[{host}]" if ":" in host else host, *LOOPBACK_HOSTS]
    return list(LOOPBACK_HOSTS)


ALLOWED_HOSTS = _allowed_hosts(env_str("AGP_BASE_URL"))
CSRF_TRUSTED_ORIGINS = env_list("AGP_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "core",
    "auth_tokens",
    "registry",
    "decision",
    "execution",
    "auditing",
    "axes",
]

MIDDLEWARE = [
    # Outermost: every answer, whichever middleware gives it, has a request id and is counted.
    "agp_project.http.middleware.RequestIdMiddleware",
    "agp_project.http.middleware.MetricsMiddleware",
    "agp_project.http.middleware.SecurityHeadersMiddleware",
    "agp_project.http.middleware.BodySizeLimitMiddleware",
    "agp_project.http.middleware.QueryStringMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Serves the admin's CSS and JS from gunicorn itself, so auditors get a working admin
    # with no separate web server in front (docs/decisions/platform.md).
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "auth_tokens.middleware.ClientMiddleware",
    "core.idempotency.IdempotencyMiddleware",
    # Last, as django-axes asks: refuses a locked-out admin login (429) before the view runs.
    "axes.middleware.AxesMiddleware",
]

# --- Admin login throttle (django-axes; docs/decisions/hostile-input.md) -----------------
# Failed admin logins are counted per username and per source address (either one reaching
# the limit locks it out) in the database; a lockout lasts AGP_ADMIN_LOCKOUT_MINUTES and a
# successful login resets the count. API clients never log in here (tokens only).
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = env_int("AGP_ADMIN_LOGIN_FAILURES", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("AGP_ADMIN_LOCKOUT_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False
# Lockouts are handled with `manage.py axes_reset` (and axes_list_attempts), not admin pages:
# the admin stays the read-only auditors' view of AGP's own records.
AXES_ENABLE_ADMIN = False

ROOT_URLCONF = "agp_project.urls"
WSGI_APPLICATION = "agp_project.wsgi.application"
APPEND_SLASH = False

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------
DATABASE_URL = env_str("AGP_DATABASE_URL", f"sqlite:///{VAR_DIR / 'agp.sqlite3'}")
try:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=env_int("AGP_DB_CONN_MAX_AGE", 60))}
except ValueError as exc:
    raise ImproperlyConfigured(f"AGP_DATABASE_URL is malformed: {exc}") from None
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {
        # IMMEDIATE: a write transaction takes the write lock at BEGIN, so two writers
        # queue on the lock instead of failing with "database is locked" on upgrade.
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    DATABASES["default"]["CONN_MAX_AGE"] = 0
else:
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    DATABASES["default"].setdefault("OPTIONS", {})["connect_timeout"] = env_int("AGP_DB_CONNECT_TIMEOUT", 5)
    # Django's backend, with an error raised by COMMIT told apart: over a network its outcome
    # is unknown, so it is never answered "nothing was written" (agp_project/db/__init__.py).
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        DATABASES["default"]["ENGINE"] = "agp_project.db.postgresql"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = []
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)
# Serve straight from the apps' static folders: no collectstatic step on a fresh machine.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

# --- HTTP contract (docs/reference/api.md) ---------------------------------------------
AGP_MAX_BODY_BYTES = env_int("AGP_MAX_BODY_BYTES", 1024 * 1024, minimum=1024)
# Threads of a web process (scripts/serve passes it to gunicorn); the MCP gateway keeps as many
# database threads (gateway/server.py).
AGP_WEB_THREADS = env_int("AGP_WEB_THREADS", 4, minimum=1)
DATA_UPLOAD_MAX_MEMORY_SIZE = AGP_MAX_BODY_BYTES
AGP_BASE_URL = (env_str("AGP_BASE_URL") or "").rstrip("/")
AGP_IDEMPOTENCY_TTL_SECONDS = env_int("AGP_IDEMPOTENCY_TTL_SECONDS", 86400, minimum=1)
# Returned by /healthz: scripts/serve sets a random one to know that the server answering
# its health check is the one it started, not another on the same port.
AGP_INSTANCE_ID = env_str("AGP_INSTANCE_ID")

# --- Authentication (docs/reference/api.md) ---------------------------------------------------
AGP_AUTH_SECRET = env_str("AGP_AUTH_SECRET")
AGP_CLIENT_ID = env_str("AGP_CLIENT_ID")
AGP_CLIENT_SECRET = env_str("AGP_CLIENT_SECRET")
AGP_TOKEN_TTL_SECONDS = env_int("AGP_TOKEN_TTL_SECONDS", 3600, minimum=1)
AGP_TOKEN_ISSUER = env_str("AGP_TOKEN_ISSUER", "agp")
# "aud" of the tokens, required on every token presented (RFC 7519 4.1.3).
AGP_TOKEN_AUDIENCE = env_str("AGP_TOKEN_AUDIENCE", "agp")
AGP_TOKEN_FAILURES_PER_MINUTE = env_int("AGP_TOKEN_FAILURES_PER_MINUTE", 10, minimum=1)

# --- Signing (docs/reference/ledger.md) ------------------------------------------------------------
AGP_SIGNING_KEY = env_str("AGP_SIGNING_KEY")
AGP_SIGNING_KEY_FILE = Path(env_str("AGP_SIGNING_KEY_FILE", str(VAR_DIR / "signing-key.pem")))
AGP_ISSUER = env_str("AGP_ISSUER", "agp")

# --- Governance -----------------------------------------------------------------------
AGP_DEFAULT_MAX_HOPS = env_int("AGP_DEFAULT_MAX_HOPS", 3, minimum=0)
AGP_OPA_URL = env_str("AGP_OPA_URL")
# Timeout of one OPA Data API call (seconds, > 0; fractions allowed).
try:
    AGP_OPA_TIMEOUT_SECONDS = float(env_str("AGP_OPA_TIMEOUT_SECONDS", "2"))
except ValueError:
    raise ImproperlyConfigured("AGP_OPA_TIMEOUT_SECONDS must be a number of seconds") from None
if not 0 < AGP_OPA_TIMEOUT_SECONDS < float("inf"):
    raise ImproperlyConfigured("AGP_OPA_TIMEOUT_SECONDS must be greater than 0")
# Every ruleset runs in an engine process under these limits (core/engine/sandbox.py): past
# either, the evaluation is allow: false. Per web or worker process, at most this many
# engine processes (started on first use).
AGP_POLICY_TIMEOUT_MS = env_int("AGP_POLICY_TIMEOUT_MS", 500, minimum=10)
AGP_POLICY_MEMORY_MB = env_int("AGP_POLICY_MEMORY_MB", 256, minimum=128)
AGP_POLICY_PROCESSES = env_int("AGP_POLICY_PROCESSES", 4, minimum=1)
AGP_ALLOW_PRIVATE_URLS = env_bool("AGP_ALLOW_PRIVATE_URLS", False)
# Receivers hold this key, so it must never be the token-signing AGP_AUTH_SECRET (whoever
# holds that can mint tokens). Unset: generated once under var/ (`manage.py callback_secret`).
AGP_CALLBACK_SECRET = env_str("AGP_CALLBACK_SECRET") or secret_from_file(VAR_DIR / "callback-secret")

# --- Celery (docs/reference/execution.md) -------------------------------------------------------------
# The embedded broker (agp_project/broker.py): a SQLite file of its own beside the database.
CELERY_BROKER_URL = env_str("AGP_BROKER_URL", f"sqlite:///{VAR_DIR / 'broker.sqlite3'}")
if CELERY_BROKER_URL.startswith("sqlite:"):  # agp_project.broker.is_embedded
    CELERY_BROKER_TRANSPORT = "agp_project.broker:Transport"  # agp_project.broker.EMBEDDED_TRANSPORT
    # Passed to SQLAlchemy's create_engine: how long a writer waits for SQLite's lock.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"connect_args": {"timeout": 30}}
else:

    CELERY_BROKER_TRANSPORT_OPTIONS = {
        # Longer than any task may run, so a message is redelivered only when its
        # worker is really gone (late acknowledgement).
        "visibility_timeout": env_int("AGP_BROKER_VISIBILITY_TIMEOUT", 3600, minimum=60),
    }
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# Messages a worker process reserves ahead of the one it runs: 1, as docs/reference/execution.md says. A
# worker killed with kill -9 strands what it reserved until the broker's visibility timeout
# or agp.recover_operations brings it back (docs/reliability.md measures how long); with 1,
# that is the one operation it was running and at most one more.
CELERY_WORKER_PREFETCH_MULTIPLIER = env_int("AGP_WORKER_PREFETCH", 1, minimum=1)
# Celery's Django fixup closes every database connection before and after each task unless
# this is set: a new PostgreSQL backend per task (connect, authenticate, cold catalog caches)
# cost more than the task itself. Connections are kept instead, and recycled like the web
# tier's (CONN_MAX_AGE, health checks, errors) by execution/tasks.py between tasks; the
# fixup still closes them every this many tasks.
CELERY_DB_REUSE_MAX = env_int("AGP_WORKER_DB_REUSE_MAX", 1000, minimum=1)
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ALWAYS_EAGER = False
CELERY_BEAT_SCHEDULE = {
    "purge-expired-idempotency-records": {
        "task": "core.purge_expired_idempotency_records",
        "schedule": env_int("AGP_IDEMPOTENCY_PURGE_SECONDS", 3600, minimum=60),
    },
}

# --- Execution worker (docs/reference/execution.md; execution/runner.py, execution/callbacks.py) -------------
# One queue for the work, and beside it one for operator controls (a freeze's enforcement,
# docs/reference/governance.md) and one for background policy work (backtests, shadow evaluations), which
# every worker consumes too, taking the queues in turns: a control never waits behind a
# backlog of operations, and an operation never behind a backlog of background work
# (agp_project/celery.py routes them; docs/operations.md sizes them). A separate name lets
# several deployments (or test sessions) share one broker.
CELERY_TASK_DEFAULT_QUEUE = env_str("AGP_CELERY_QUEUE", "celery")
CELERY_TASK_QUEUES = [Queue(name, Exchange(name), routing_key=name)
                      for name in (CELERY_TASK_DEFAULT_QUEUE, f"{CELERY_TASK_DEFAULT_QUEUE}.control",
                                   f"{CELERY_TASK_DEFAULT_QUEUE}.background")]
CELERY_TASK_ROUTES = ["agp_project.celery.route_by_kind"]
# Backtests (decision/backtests.py): each runs in slices of about a second, yielding its worker
# process between them, and stops at whichever bound comes first (reported in its result);
# each client may have this many unfinished at once (past it, 429).
AGP_BACKTEST_MAX_SECONDS = env_int("AGP_BACKTEST_MAX_SECONDS", 600, minimum=1)
AGP_BACKTEST_MAX_EVALUATIONS = env_int("AGP_BACKTEST_MAX_EVALUATIONS", 100_000, minimum=1)
AGP_BACKTESTS_PER_CLIENT = env_int("AGP_BACKTESTS_PER_CLIENT", 2, minimum=1)
# A running operation's claim lasts this long unless its worker renews it (every third of
# it); a worker that dies stops renewing, and the operation is taken over after this.
AGP_OPERATION_LEASE_SECONDS = env_int("AGP_OPERATION_LEASE_SECONDS", 30, minimum=1)
AGP_RECOVER_PENDING_AFTER_SECONDS = env_int("AGP_RECOVER_PENDING_AFTER_SECONDS", 120, minimum=1)
AGP_NOOP_MAX_SLEEP_SECONDS = env_int("AGP_NOOP_MAX_SLEEP_SECONDS", 30, minimum=0)
AGP_CONNECTOR_TIMEOUT_SECONDS = env_int("AGP_CONNECTOR_TIMEOUT_SECONDS", 10, minimum=1)
AGP_CONNECTOR_ATTEMPTS = env_int("AGP_CONNECTOR_ATTEMPTS", 3, minimum=1)
# Registering an mcp skill lists the server's tools while a web thread waits
# (docs/decisions/mcp-tools.md): the whole exchange gets this many seconds (capped by the
# connector timeout), and each web process asks at most this many servers at once (past it,
# 503 with Retry-After), so servers that never answer cannot take the web tier's threads.
AGP_MCP_REGISTRATION_TIMEOUT_SECONDS = env_int("AGP_MCP_REGISTRATION_TIMEOUT_SECONDS", 3, minimum=1)
AGP_MCP_REGISTRATIONS_PER_PROCESS = env_int("AGP_MCP_REGISTRATIONS_PER_PROCESS", 2, minimum=1)
AGP_CONNECTOR_RETRY_BASE_SECONDS = env_int("AGP_CONNECTOR_RETRY_BASE_SECONDS", 1, minimum=0)
AGP_CALLBACK_TIMEOUT_SECONDS = env_int("AGP_CALLBACK_TIMEOUT_SECONDS", 5, minimum=1)
AGP_CALLBACK_MAX_ATTEMPTS = env_int("AGP_CALLBACK_MAX_ATTEMPTS", 6, minimum=1)
AGP_CALLBACK_RETRY_BASE_SECONDS = env_int("AGP_CALLBACK_RETRY_BASE_SECONDS", 10, minimum=0)
# How long an approval made in the approvals inbox stays valid (docs/reference/approvals.md).
AGP_INBOX_APPROVAL_TTL_SECONDS = env_int("AGP_INBOX_APPROVAL_TTL_SECONDS", 86400, minimum=60)
AGP_OUTBOX_SWEEP_SECONDS = env_int("AGP_OUTBOX_SWEEP_SECONDS", 10, minimum=1)
AGP_RECOVER_OPERATIONS_SECONDS = env_int("AGP_RECOVER_OPERATIONS_SECONDS", 15, minimum=1)
# "expires": a tick no worker picked up in time is dropped, not piled up behind the next.
CELERY_BEAT_SCHEDULE["agp.outbox_sweep"] = {
    "task": "agp.outbox_sweep", "schedule": AGP_OUTBOX_SWEEP_SECONDS,
    "options": {"expires": AGP_OUTBOX_SWEEP_SECONDS},
}
CELERY_BEAT_SCHEDULE["agp.recover_operations"] = {
    "task": "agp.recover_operations", "schedule": AGP_RECOVER_OPERATIONS_SECONDS,
    "options": {"expires": AGP_RECOVER_OPERATIONS_SECONDS},
}

# --- Transparency log (docs/reference/ledger.md; core/tree.py, docs/decisions/ledger.md) ----------------
# How often the worker extends the Merkle tree and signs a checkpoint (only when the ledger grew).
AGP_CHECKPOINT_SECONDS = env_int("AGP_CHECKPOINT_SECONDS", 10, minimum=1)
CELERY_BEAT_SCHEDULE["core.checkpoint"] = {
    "task": "core.checkpoint", "schedule": AGP_CHECKPOINT_SECONDS, "options": {"expires": AGP_CHECKPOINT_SECONDS},
}

# --- The ledger's sequencer (docs/reference/ledger.md, docs/decisions/ledger.md) ------------
# On PostgreSQL an event is written with its change and given its place in the chain after
# the commit, in batches, by one sequencer (a thread of every Celery worker; one at a time
# holds its lock). False: each event is chained inside its change's transaction under the
# head row's lock, as on SQLite, which keeps no sequencer.
AGP_LEDGER_SEQUENCER = env_bool("AGP_LEDGER_SEQUENCER", DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3")
# How many events one integration takes at most (one transaction).
AGP_LEDGER_SEQUENCER_BATCH = env_int("AGP_LEDGER_SEQUENCER_BATCH", 2000, minimum=1)
# How long POST /agp/ledger-events and an evidence bundle wait for their events' integration.
AGP_LEDGER_WAIT_SECONDS = env_int("AGP_LEDGER_WAIT_SECONDS", 5, minimum=1)

# --- REST framework -------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_RENDERER_CLASSES": ["agp_project.http.renderers.ExactJSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["agp_project.http.parsers.StrictJSONParser"],
    "DEFAULT_AUTHENTICATION_CLASSES": ["auth_tokens.authentication.BearerTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["auth_tokens.permissions.HasGroupScope"],
    "UNAUTHENTICATED_USER": None,
    "EXCEPTION_HANDLER": "agp_project.http.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "COERCE_DECIMAL_TO_STRING": False,
    "DATETIME_FORMAT": "%Y-%m-%dT%H:%M:%S.%fZ",
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    # The test client writes bodies with the API's own renderer: a Decimal stays exact.
    "TEST_REQUEST_RENDERER_CLASSES": ["agp_project.http.renderers.ExactJSONRenderer",
                                      "rest_framework.renderers.MultiPartRenderer"],
}

SPECTACULAR_SETTINGS = {
    "TITLE": "AGP — Agent Governance Service",
    "DESCRIPTION": (
        "AGP governs autonomous software agents: who delegated what authority to which agent, which policies "
        "are in force, which decisions, approvals and assessments stand behind an action. It executes an agent's "
        "action only when every one of those checks passes, and records everything in a hash-chained ledger.\n\n"
        "**Authentication.** When the server has authentication on, every operation needs "
        "`Authorization: Bearer <token>`; get a token from `POST /oauth/token` with your client id and secret. "
        "Each operation lists the scopes of which the token needs one.\n\n"
        "**Requests.** JSON in, JSON out. Unknown fields are refused (400), never ignored. Leave an id out and the "
        "server makes one. Send an `Idempotency-Key` with a POST or PATCH and retry it safely.\n\n"
        "**Errors.** Every error has the body `{\"error\": {\"code\", \"message\", \"retryable\", "
        "\"details\"}}`; `code` is stable (`AGP_INVALID_REQUEST`, `AGP_PREREQUISITE_FAILED`, ...) and "
        "`retryable` says whether the same request may succeed later.\n\n"
        "**Lists** are newest first and paged with `limit` and `cursor`; query parameters filter by exact match."),
    "VERSION": "0.1.0",
    "OAS_VERSION": "3.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": r"/agp",
    # One name per choice set shared by several fields, where the field names alone would
    # collide ("status") or differ ("primary"/"secondary"); without them the generator warns
    # on every first /agp/openapi.json and names enums by hash.
    "ENUM_NAME_OVERRIDES": {
        "ActiveStatusEnum": "registry.choices.ActiveStatus.choices",
        "PolicySetStatusEnum": "registry.choices.PolicySetStatus.choices",
        "OpenClosedStatusEnum": "registry.choices.TaskStatus.choices",  # tasks and commerce sessions
        "DecisionStatusEnum": "decision.choices.DecisionStatus.choices",
        "FreezeStatusEnum": "registry.choices.FreezeStatus.choices",
        "OperationStatusEnum": "decision.choices.BacktestStatus.choices",  # an Operation's, a backtest's too
        "EthicalFrameworkEnum": "decision.choices.EthicalFramework.choices",
        "SeverityEnum": "decision.choices.Severity.choices",  # severity and magnitude
    },
    # The document's shared parts (agp_project/http/schema.py) and the token endpoint
    # (auth_tokens/schema.py), added by drf-spectacular's public postprocessing hooks.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "agp_project.http.schema.shared_responses",
        "agp_project.http.schema.response_patterns",
        "agp_project.http.schema.members_when_set",

        "agp_project.http.schema.plain_component_descriptions",
        "auth_tokens.schema.token_endpoint",
    ],
    # /agp/docs serves Swagger UI's files from the installed sidecar package: no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "persistAuthorization": False, "displayRequestDuration": True,
                            "docExpansion": "list", "defaultModelsExpandDepth": 0},
}

# --- Operating it (docs/operations.md; docs/operations.md) -----------------------------------
# Set: GET /metrics answers only "Authorization: Bearer <this>".
AGP_METRICS_TOKEN = env_str("AGP_METRICS_TOKEN")
# host:port: the Celery worker serves its own GET /metrics there (for a worker on another machine).
AGP_WORKER_METRICS_BIND = env_str("AGP_WORKER_METRICS_BIND")
if AGP_WORKER_METRICS_BIND and not AGP_WORKER_METRICS_BIND.rpartition(":")[2].isdigit():
    raise ImproperlyConfigured(f"AGP_WORKER_METRICS_BIND must be host:port, got {AGP_WORKER_METRICS_BIND!r}")
# "plain" (a line of text) or "json" (one object a line, with the request id).
AGP_LOG_FORMAT = env_str("AGP_LOG_FORMAT", "plain")
if AGP_LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"AGP_LOG_FORMAT must be plain or json, got {AGP_LOG_FORMAT!r}")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
                   "json": {"()": "agp_project.logformat.JsonFormatter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": AGP_LOG_FORMAT,
                             "filters": ["request_id"]}},
    "filters": {"request_id": {"()": "agp_project.logformat.RequestIdFilter"},
                # Beat's sweeps that found nothing log nothing at INFO (agp_project/logfilters.py).
                "quiet_idle_sweeps": {"()": "agp_project.logfilters.QuietIdleSweeps"}},
    "root": {"handlers": ["console"], "level": env_str("AGP_LOG_LEVEL", "INFO")},
    "loggers": {
        "django.request": {"level": "ERROR"},
        "celery.beat": {"filters": ["quiet_idle_sweeps"]},
        "celery.worker.strategy": {"filters": ["quiet_idle_sweeps"]},
        "celery.worker.request": {"filters": ["quiet_idle_sweeps"]},
        "celery.app.trace": {"filters": ["quiet_idle_sweeps"]},
        # The MCP SDK and its HTTP client log every request at INFO; the connector logs what matters.
        "httpx2": {"level": "WARNING"},
        "mcp": {"level": "WARNING"},
    },
}

# --- Cache (token-endpoint failure counters, compiled-policy metadata) -----------------
# "local" is each process's own memory: the token endpoint counts failures there too, so they
# are still counted while the shared cache (Redis) is away (auth_tokens/views.py).
_LOCAL_CACHE = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "agp-local"}
_cache_url = env_str("AGP_CACHE_URL")
if _cache_url:
    # A Redis that hangs must not hang the requests that count on it: 1 s to connect or answer.
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": _cache_url,
                          "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1}},
              "local": _LOCAL_CACHE}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}, "local": _LOCAL_CACHE}
