"""The one timestamp format and the one clock-skew allowance.

``TIME_FORMAT`` is how AGP writes a timestamp it signs, hashes or quotes in a message (the
ledger's ``recorded_at``, signatures' ``issued_at``, envelope documents, warnings): UTC,
microseconds, ``Z`` - the same form the API renders (REST_FRAMEWORK DATETIME_FORMAT).
``FUTURE_SKEW`` is how far a client-given timestamp may run ahead of the server clock.
"""

from datetime import UTC, datetime, timedelta

from agp_project import errors

TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"

# A timestamp a client sets may run ahead of the server clock by at most this much.
FUTURE_SKEW = timedelta(seconds=60)


def iso(value: datetime) -> str:
    """``value`` in ``TIME_FORMAT`` (without strftime's cost; strftime's own form for years before 1000)."""
    if value.utcoffset():
        value = value.astimezone(UTC)
    if value.year < 1000:  # strftime does not pad %Y; keep its form for such (never written) years
        return value.strftime(TIME_FORMAT)
    return "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ" % (value.year, value.month, value.day, value.hour, value.minute,
                                                     value.second, value.microsecond)


def not_in_future(value: datetime, *, field: str, now: datetime) -> datetime:
    """``value``, or a 400 on ``field`` when it is more than ``FUTURE_SKEW`` ahead of ``now``."""
    if value > now + FUTURE_SKEW:
        raise errors.invalid_fields({field: ["Must not be in the future."]})
    return value
