"""AGP's PostgreSQL backend: Django's own, told apart only where a commit fails.

A COMMIT that fails over a network leaves the outcome unknown: the server may have
committed before the connection broke (its answer was lost), or not. The error handler must
then not answer "nothing was written" (docs/decisions/reliability-security.md): a client
that believed it would submit the same action again under a new id. Django offers no hook
on the commit, so the backend here is the built-in one, subclassed as Django's
documentation describes, with ``commit()`` marking the error it raises; ``failed_at_commit``
reads the mark. SQLite keeps Django's backend: a local file's commit that fails did not
happen.
"""

from django.db import DatabaseError

_MARK = "_agp_failed_at_commit"


class MarkCommitFailures:
    """Mixin for a backend's ``DatabaseWrapper``: an error raised by COMMIT carries a mark."""

    def commit(self):
        try:
            super().commit()
        except DatabaseError as exc:
            setattr(exc, _MARK, True)
            raise


def failed_at_commit(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by a transaction's COMMIT (its outcome is unknown)."""
    return getattr(exc, _MARK, False)
