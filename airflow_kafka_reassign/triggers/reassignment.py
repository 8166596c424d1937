"""The deferrable half of :class:`~airflow_kafka_reassign.sensors.reassignment.WaitForReassignmentSensor`.

:class:`ReassignmentTrigger` polls a plan's progress in the triggerer: every ``poke_interval`` seconds it runs one
:meth:`~airflow_kafka_reassign.core.execution.progress.ReassignmentWatch.poke` (the same code the sensor runs in poke mode) in
a thread (``asyncio.to_thread``: the Kafka clients block), logs one progress line, and yields ONE event when the
wait is over::

    {"status": "complete" | "blocked" | "timeout" | "deadline" | "error", "message": str, "summary": {...}}

The worker then concludes (XCom summary, throttles restored, the timeout policy): the trigger itself never cancels
or rolls back anything. With ``submit_pending`` it does submit the plan's pending moves within the limits
(:func:`airflow_kafka_reassign.core.execution.step`), which is retry-safe by construction.

Restart-safe: the kwargs hold only the plan's location, the settings, the start time and the small tracker state
at deferral (last progress time, best values, throughput samples). Everything else is read again from the cluster
and the plan directory, so a triggerer that dies and restarts the trigger loses nothing but the samples taken since
deferral (the ETA needs a poke or two to settle again).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_kafka_reassign.core.execution.progress import TrackerState
from airflow_kafka_reassign.core.execution.session import MAX_UNREACHABLE_POLLS
from airflow_kafka_reassign.exceptions import ClusterAccessError, ClusterUnreachableError
from airflow_kafka_reassign.wait import (
    WaitSpec,
    event_payload,
    log_progress,
    make_admin,
)

if TYPE_CHECKING:
    from airflow_kafka_reassign.core.execution.progress import ReassignmentWatch
    from airflow_kafka_reassign.core.vocabulary.ports import ClusterAdmin


def next_poke_s(watch: ReassignmentWatch, poke_interval: float) -> float:
    """The pause before the next poke: when the execution session predicts the first move in flight finishes (so a
    freed slot is refilled about then, not a whole ``poke_interval`` later), never longer than ``poke_interval``."""
    predicted = watch.next_poll_s
    return poke_interval if predicted is None else max(0.0, min(poke_interval, predicted))


class ReassignmentTrigger(BaseTrigger):
    """Polls a plan's progress until it is complete, blocked or timed out; see the module docstring.

    :param spec: a :class:`WaitSpec` as a dict.
    :param started_at: when the wait started (seconds since the epoch): the timeout counts from here.
    :param poke_interval: seconds between polls.
    :param state: the :class:`~airflow_kafka_reassign.core.execution.progress.TrackerState` at deferral, as a dict.
    """

    def __init__(self, *, spec: dict[str, Any], started_at: float, poke_interval: float = 30.0,
                 state: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.spec = dict(spec)
        self.started_at = float(started_at)
        self.poke_interval = float(poke_interval)
        self.state = state
        self._admin: ClusterAdmin | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"spec": self.spec, "started_at": self.started_at, "poke_interval": self.poke_interval,
             "state": self.state},
        )

    def _start(self) -> tuple[WaitSpec, ReassignmentWatch, ClusterAdmin]:
        spec = WaitSpec(**self.spec)
        state = TrackerState.model_validate(self.state) if self.state else None
        spec.plan_store  # noqa: B018 (a missing plan fails first, naming the URI)
        admin = make_admin(spec)
        try:
            watch = spec.watch(started_at=self.started_at, state=state, admin=admin)
        except BaseException:
            admin.close()
            raise
        return spec, watch, admin

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            spec, watch, self._admin = await asyncio.to_thread(self._start)
        except ClusterAccessError as e:
            yield TriggerEvent({"status": "error", "message": str(e), "fatal": True})
            return
        except Exception as e:  # noqa: BLE001 - reported to the worker, which fails the task with it
            yield TriggerEvent({"status": "error", "message": f"could not start the wait: {type(e).__name__}: {e}"})
            return
        admin = self._admin
        last_blocked: str | None = None
        unreachable = 0
        while True:
            try:
                progress = await asyncio.to_thread(watch.poke, admin, now=time.time())
                unreachable = 0
            except ClusterAccessError as e:  # the cluster refused the client: not transient, the task fails at once
                yield TriggerEvent({"status": "error", "message": str(e), "fatal": True})
                return
            except ClusterUnreachableError as e:
                unreachable += 1
                self.log.warning("poll %d/%d failed: %s", unreachable, MAX_UNREACHABLE_POLLS, e)
                if unreachable >= MAX_UNREACHABLE_POLLS:
                    yield TriggerEvent({"status": "error", "message": str(e)})
                    return
                await asyncio.sleep(self.poke_interval)
                continue
            except Exception as e:  # noqa: BLE001
                yield TriggerEvent({"status": "error", "message": f"{type(e).__name__}: {e}"})
                return
            last_blocked = log_progress(self.log, progress, watch, last_blocked)
            if progress.status != "running":
                yield TriggerEvent(event_payload(progress, spec))
                return
            await asyncio.sleep(next_poke_s(watch, self.poke_interval))

    async def cleanup(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            try:
                await asyncio.to_thread(admin.close)
            except Exception:  # noqa: BLE001 - closing is best effort
                self.log.warning("closing the Kafka admin client failed", exc_info=True)
