"""What the operators and the sensor share: a base module, so that no operator imports another.

* :class:`ExecutionTask`: the tasks that run the execution engine (ExecuteReassignment, CancelReassignment's
  rollback, WaitForReassignment with ``submit_pending``) take every setting of
  :class:`~airflow_kafka_reassign.core.execution.ExecutionConfig` (declared and documented once there) as a
  keyword argument, or together as ``execution={...}``; they are one templated field, ``execution``, rendered
  and read the same way by each task. The task also holds the plan's lease and restores throttles on a kill.
* :func:`as_bool` for the few flags outside that config, :func:`default_run_location` for what one DAG run writes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowFailException

from airflow_kafka_reassign.core.execution import EXECUTION_SETTINGS, ExecutionConfig, finish
from airflow_kafka_reassign.core.guards.disk import default_reserve
from airflow_kafka_reassign.core.records.lease import LeaseHeldError, LeaseKeeper, task_lease_identity
from airflow_kafka_reassign.core.records.store import Store, StoreError
from airflow_kafka_reassign.exceptions import ConfigurationError
from airflow_kafka_reassign.plan_storage import default_output_root, safe_name

if TYPE_CHECKING:
    from airflow_kafka_reassign.core.execution import ExecutionOptions
    from airflow_kafka_reassign.core.vocabulary.models import ReassignmentPlan


def as_bool(value: Any, name: str) -> bool:
    """``value`` as a boolean: ``"False"`` (a rendered template) must not mean True; other text is an error."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text not in ("true", "false"):
            raise ConfigurationError(f"{name} must be true or false, not {value!r}")
        return text == "true"
    return bool(value)


def default_run_location(context: Mapping[str, Any], task: Any, name: str) -> str:
    """``$AKR_OUTPUT_DIR/<dag_id>/<run_id>/<name>`` on this machine: what the tasks of one DAG run
    write when no object-storage location is given (one machine only: workers share no disk)."""
    dag_run = context.get("dag_run")
    run_id = getattr(dag_run, "run_id", None) or context.get("run_id") or "manual"
    dag_id = getattr(context.get("dag"), "dag_id", None) or getattr(task, "dag_id", None) or "dag"
    return str(default_output_root() / safe_name(dag_id) / safe_name(str(run_id)) / safe_name(name))


def execution_settings(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Take the execution settings out of a task's keyword arguments (the rest go to BaseOperator)."""
    return {name: kwargs.pop(name) for name in list(kwargs) if name in EXECUTION_SETTINGS}


def _templated(value: Any) -> bool:
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, Mapping):
        return any(_templated(v) for v in value.values())
    return False


class ExecutionTask:
    """The execution settings, the plan's lease and the kill switch of a task that runs the engine."""

    execution: dict[str, Any]
    task_id: str
    log: Any

    def _take_execution(self, execution: ExecutionConfig | Mapping[str, Any] | None, settings: dict[str, Any]) -> None:
        """Keep the settings as given (rendered later, as the ``execution`` template field); validated now unless a
        template is still to be rendered."""
        base = execution.model_dump(exclude_defaults=True) if isinstance(execution, ExecutionConfig) \
            else dict(execution or {})
        twice = sorted(set(base) & set(settings))
        if twice:
            raise ConfigurationError(f"execution setting(s) {', '.join(twice)} given twice (in execution= and as an "
                                     "argument of the task): give each once")
        self.execution = {**base, **settings}
        self._stop_requested = False
        self._running: tuple[ReassignmentPlan, ExecutionOptions, Store] | None = None
        self._lease: LeaseKeeper | None = None
        if not _templated(self.execution):
            self.execution_config()  # a wrong setting fails when the DAG is parsed, not when the task runs

    def execution_config(self) -> ExecutionConfig:
        """The task's settings, validated (after rendering, when the task runs)."""
        return ExecutionConfig.parse(self.execution)

    @staticmethod
    def default_disk_reserve() -> str:
        """The deployment's ``disk_reserve`` (``AKR_DISK_RESERVE``, else 1%) for a task that sets none."""
        return default_reserve(os.environ)

    def execution_options(self) -> ExecutionOptions:
        """The engine's options of this task (the deployment's disk reserve where the task sets none)."""
        return self.execution_config().options(default_disk_reserve=self.default_disk_reserve())

    # -- the plan's lease ------------------------------------------------------------------------

    def _take_lease(self, state: Store, context: Any, ttl_s: float) -> LeaseKeeper:
        holder, scope = task_lease_identity(context, self.task_id)
        try:
            self._lease = LeaseKeeper.take(state, holder=holder, scope=scope, ttl_s=ttl_s, log=self.log,
                                           take_over_from=self.execution_config().take_over_from)
        except (StoreError, LeaseHeldError) as e:
            raise AirflowFailException(f"task {self.task_id}: {e}") from e
        return self._lease

    def _release_lease(self) -> None:
        lease, self._lease = self._lease, None
        release_lease(lease, self.log)

    # -- the kill switch -------------------------------------------------------------------------

    def _should_stop(self) -> bool:
        return self._stop_requested

    def _kill(self, admin_factory: Any, log: Any) -> None:
        """on_kill: stop submitting and restore the throttles of the run now (the next run would too)."""
        self._stop_requested = True
        running = self._running
        if running is None:
            return
        plan, options, state_dir = running
        try:
            admin = admin_factory()
            try:
                finish(admin, plan, options, state_dir=state_dir, elect=False, log=log, lease=self._lease)
            finally:
                admin.close()
        except Exception:  # noqa: BLE001 (a kill must not fail; the next run restores from the backup)
            log.exception("on_kill: restoring the throttles failed; the next run restores them from %s", state_dir)


def release_lease(lease: Any, log: Any) -> None:
    """Give a plan's lease back (``None``: nothing held); a failure only warns: the lease expires by itself."""
    if lease is not None:
        try:
            lease.release()
        except Exception:  # noqa: BLE001 (it expires by itself)
            log.warning("could not release the plan's lease; it expires by itself", exc_info=True)
