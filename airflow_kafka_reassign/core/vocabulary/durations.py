"""Durations and deadlines as the tasks take them: one parser for every operator and sensor.

* :func:`deadline` reads a deadline: an instant (a datetime, ISO-8601 text such as ``{{ data_interval_end }}``
  renders to) or, where allowed, a duration from ``now`` (a timedelta, seconds, ISO-8601 ``"PT2H30M"`` or the
  short ``"2h30m"``, ``"90m"``, ``"45s"``). A wait re-reads its arguments at every poke, so it takes instants
  only (``durations=False``): "2h from now" would move.
* :func:`duration_s` reads a positive duration in seconds.

ISO-8601 texts are read by pydantic (already the models' library); only the short ``"1h30m"`` form is matched
here.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

from pydantic import TypeAdapter, ValidationError

from airflow_kafka_reassign.exceptions import ConfigurationError

_SHORT = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)\s*h)?\s*(?:(\d+(?:\.\d+)?)\s*m)?\s*(?:(\d+(?:\.\d+)?)\s*s)?\s*$", re.I)
_TIMEDELTA: TypeAdapter[timedelta] = TypeAdapter(timedelta)
_DATETIME: TypeAdapter[datetime] = TypeAdapter(datetime)


def as_timedelta(value: Any) -> timedelta | None:
    """``value`` as a duration (``None`` when it is not one): a timedelta, a number of seconds, or text (seconds,
    ISO-8601 ``"PT2H30M"``, ``"2h30m"``)."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return timedelta(seconds=float(value))
    if not isinstance(value, str):
        return None
    text = value.strip()
    match = _SHORT.match(text)
    if match and any(match.groups()):
        h, m, s = (float(g) if g else 0.0 for g in match.groups())
        return timedelta(hours=h, minutes=m, seconds=s)
    if text[:1] in ("P", "p") or text.replace(".", "", 1).isdigit():
        try:
            return _TIMEDELTA.validate_python(text.upper() if text[:1] in ("P", "p") else float(text))
        except ValidationError:
            return None
    return None


def as_instant(value: Any) -> datetime | None:
    """``value`` as an aware UTC datetime (naive means UTC; ``None`` when it is not one)."""
    at = value
    if isinstance(value, str):
        try:
            at = _DATETIME.validate_python(value.strip())
        except ValidationError:
            return None
    if not isinstance(at, datetime):
        return None
    return at.replace(tzinfo=timezone.utc) if at.tzinfo is None else at.astimezone(timezone.utc)


def deadline(value: Any, *, now: datetime | None = None, name: str = "deadline",
             durations: bool = True) -> datetime | None:
    """An aware UTC deadline from an instant or (with ``durations``) a duration from ``now``; ``None``/``""``:
    no deadline. Anything else is a :class:`ConfigurationError` that says what is accepted."""
    if value is None or value == "":
        return None
    if durations:
        span = as_timedelta(value)
        if span is not None:
            return (now or datetime.now(timezone.utc)) + span
    at = as_instant(value)
    if at is not None:
        return at
    if not durations:
        raise ConfigurationError(
            f"{name} {value!r} is not a date-time: give a datetime or ISO-8601 text, such as "
            "'{{ (dag_run.start_date + macros.timedelta(minutes=90)).isoformat() }}' renders to (a duration would "
            "restart at every poke)"
        )
    raise ConfigurationError(
        f"{name} {value!r} is neither a date-time nor a duration; give a datetime, a timedelta, a number of "
        "seconds, an ISO-8601 date-time such as '{{ data_interval_end }}' renders to, or a duration like '2h30m'"
    )


def duration_s(value: Any, name: str) -> float | None:
    """A positive duration in seconds (``None``/``""``: none); zero, negative or unreadable values are named."""
    if value is None or value == "":
        return None
    span = as_timedelta(value)
    if span is None or span.total_seconds() <= 0:
        raise ConfigurationError(f"{name} must be a positive duration (seconds, a timedelta, or text like '2h'), "
                                 f"not {value!r}")
    return span.total_seconds()
