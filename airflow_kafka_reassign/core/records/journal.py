"""The run's journal: one small JSON object per step that changed something, in ``<state>/journal/``.

What each try submitted and decided, for people and the report; the cluster stays the authority
on what is done and in flight. Pure: it writes through a
:class:`~airflow_kafka_reassign.core.records.store.Store`.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from airflow_kafka_reassign.core.records.store import Store, as_store

#: The run's journal in ``state_dir``: one object per step that changed something (what it
#: submitted, what was refused, the throttles it set), named so that they list in time order.
JOURNAL_DIR = "journal"
#: Where the run state lives: a :class:`~airflow_kafka_reassign.core.records.store.Store` (a local
#: directory, object storage) or a local path.
StateLocation = Store | Path

_log = logging.getLogger(__name__)
_JOURNAL_SEQ = itertools.count()


def journal(state_dir: StateLocation | None, event: dict[str, Any], *, log: logging.Logger | None = None) -> None:
    """Add one entry to the run's journal (``<state>/journal/``); a failure to write it is a warning.

    The journal is the run's record (what each try submitted and decided, for people and the report);
    the cluster stays the authority on what is done and in flight, so a journal write that fails
    never stops a run that holds its lease."""
    if state_dir is None:
        return
    at = datetime.now(timezone.utc)
    name = f"{JOURNAL_DIR}/{at.strftime('%Y%m%dT%H%M%S.%fZ')}-{os.getpid()}-{next(_JOURNAL_SEQ):06d}.json"
    try:
        as_store(state_dir).write(name, json.dumps({"at": at.isoformat(), **event}, sort_keys=True).encode())
    except Exception as e:  # noqa: BLE001 (the record is best effort; see above)
        (log or _log).warning("could not write the run journal entry %s: %s", name, e)


def read_journal(state_dir: StateLocation) -> list[dict[str, Any]]:
    """The run's journal entries, oldest first."""
    store = as_store(state_dir)
    out = []
    for name in store.list(JOURNAL_DIR):
        data = store.read(name)
        if data is not None:
            out.append(json.loads(data))
    return out
