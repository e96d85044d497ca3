"""The embedded broker: kombu's SQLAlchemy transport over a SQLite file under ``var/``.

Of kombu's transports that need no server, the filesystem one creates a message's file before
writing it, so a worker polling the folder can take the file empty and stop on the undecodable
message; SQLite commits a message whole or not at all. A virtual transport polls its queues,
once a second by default; kombu hands its ``polling_interval`` option to SQLAlchemy's
``create_engine`` too, which refuses it, so the interval is set here on the transport class
(``kombu.transport.virtual.Transport.polling_interval``).
"""

from kombu.transport import sqlalchemy

EMBEDDED_SCHEME = "sqlite:"
# What the settings name as Celery's transport for the embedded broker (CELERY_BROKER_TRANSPORT).
EMBEDDED_TRANSPORT = "agp_project.broker:Transport"


def is_embedded(url: str) -> bool:
    """Whether ``url`` names the embedded broker (a SQLite file) rather than a broker server."""
    return url.startswith(EMBEDDED_SCHEME)


def transport_for(url: str) -> str | None:
    """Celery's ``broker_transport`` for ``url``: this module's for the embedded broker, else
    None (the transport the URL's scheme names)."""
    return EMBEDDED_TRANSPORT if is_embedded(url) else None


class Transport(sqlalchemy.Transport):
    # With prefetch 1 a worker process takes one message a poll: a second between polls would
    # hold the embedded setup to about a task a second per process.
    polling_interval = 0.1
