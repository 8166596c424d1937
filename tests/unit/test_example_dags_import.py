"""The example DAGs import cleanly (no import error, no warning of any kind) and their Params
refuse bad input before a run starts.

The DagBag is filled with every warning turned into an error, so a deprecated import path or
argument in an example fails here. The Params checks use Airflow's own validation (what a
trigger from the UI, the CLI or the REST API runs before it creates the DagRun). The runs
themselves against a real cluster are in tests/integration/test_example_dags.py.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from airflow.providers.common.compat.sdk import ParamValidationError

# Airflow 3.2 wraps the ParamValidationError of SerializedParamsDict.validate() in a ValueError
PARAM_ERRORS = (ParamValidationError, ValueError)
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "example_dags"
EXPECTED = {
    "kafka_rebalance_maintenance_window",
    "kafka_decommission_brokers",
    "kafka_scale_out",
    "kafka_grow_partitions",
    "kafka_heal_under_replicated",
    "kafka_rack_maintenance",
    "kafka_remove_disk",
    "kafka_heal_broker_down",
    "kafka_heal_log_dir",
    "kafka_heal_empty_broker",
    "kafka_heal_imbalance",
}


@pytest.fixture(scope="module")
def dagbag():
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow < 3.2
        from airflow.models.dagbag import DagBag

    # Airflow's own lazy imports first, outside the error filter: on Airflow 3.0 the chain behind `from airflow.sdk
    # import DAG, Param, task` warns about Airflow's own deprecated modules, which is not the examples' doing (in the
    # whole suite an earlier test has imported them already; alone, as the compat cells run it, the first example
    # to import them got the warning as its import error)
    import airflow.sdk

    for name in ("DAG", "Param", "task", "BaseOperator", "TaskGroup", "Asset"):
        getattr(airflow.sdk, name, None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bag = DagBag(dag_folder=str(EXAMPLES), safe_mode=False)
    return bag


def test_every_example_imports_without_errors_or_warnings(dagbag):
    assert dagbag.import_errors == {}
    assert dagbag.captured_warnings == {}
    assert set(dagbag.dag_ids) == EXPECTED
    assert {Path(d.fileloc).name for d in dagbag.dags.values()} == {p.name for p in EXAMPLES.glob("*.py")}


def test_every_example_is_documented_and_marked_for_the_docs(dagbag):
    for dag in dagbag.dags.values():
        source = Path(dag.fileloc).read_text(encoding="utf-8")
        assert dag.doc_md or source.lstrip().startswith('"""'), dag.dag_id
        assert "# [START " in source and "# [END " in source, dag.dag_id
        assert dag.catchup is False and dag.max_active_runs == 1, dag.dag_id
        assert dag.dagrun_timeout is not None, dag.dag_id
        assert all(t.retries is not None for t in dag.tasks)


def test_the_maintenance_window_is_a_cron_schedule_with_one_run_at_a_time(dagbag):
    dag = dagbag.dags["kafka_rebalance_maintenance_window"]
    assert serialized(dag).timetable.summary == "0 2 * * 6"
    assert [t.task_id for t in dag.topological_sort()] == ["plan", "approve", "execute", "wait"]
    assert dag.task_dict["plan"].skip_if_empty is True
    assert dag.task_dict["wait"].on_timeout == "cancel"
    assert all(t.execution_timeout for t in dag.tasks if t.task_id not in ("wait", "approve"))
    # a person's answer is bounded by response_timeout (HITL clears execution_timeout); no answer fails the task
    approve = dag.task_dict["approve"]
    assert getattr(approve, "response_timeout", None) or approve.execution_timeout


def serialized(dag):
    """The DAG as the scheduler and the API server see it (after serialisation)."""
    try:
        from airflow.serialization.serialized_objects import DagSerialization
    except ImportError:  # Airflow < 3.2
        from airflow.serialization.serialized_objects import SerializedDAG as DagSerialization

    return DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))


def validate(dag, conf: dict) -> dict:
    """What creating a DagRun with ``conf`` runs first (airflow.serialization.definitions.dag.create_dagrun)."""
    params = serialized(dag).params
    if hasattr(params, "deep_merge"):
        return params.deep_merge(conf).validate()
    import copy  # Airflow < 3.2: what DAG.create_dagrun does

    params = copy.deepcopy(params)
    params.update(conf)
    return params.validate()


@pytest.mark.parametrize(
    ("conf", "problem"),
    [
        ({}, "No value passed"),  # broker_ids has no default: a trigger must name the brokers
        ({"broker_ids": []}, "should be non-empty"),
        ({"broker_ids": [4, 4]}, "non-unique"),
        ({"broker_ids": [-1]}, "less than the minimum"),
        ({"broker_ids": ["four"]}, "is not of type 'integer'"),
        ({"broker_ids": [4], "throttle_bytes_per_sec": 0}, "less than the minimum"),
        ({"broker_ids": [4], "max_moves_per_broker": 0}, "less than the minimum"),
        ({"broker_ids": [4], "max_moves": 5000}, "greater than the maximum"),
        ({"broker_ids": [4], "dry_run": "no"}, "is not of type 'boolean'"),
        ({"broker_ids": [4], "topic_include": []}, "should be non-empty"),
    ],
)
def test_decommission_params_refuse_bad_input_before_a_run(dagbag, conf, problem):
    with pytest.raises(PARAM_ERRORS, match=problem):
        validate(dagbag.dags["kafka_decommission_brokers"], conf)


def test_decommission_params_accept_a_valid_request_and_default_to_a_dry_run(dagbag):
    params = validate(dagbag.dags["kafka_decommission_brokers"], {"broker_ids": [4, 5]})
    assert params["broker_ids"] == [4, 5] and params["dry_run"] is True
    assert params["max_moves_per_broker"] <= params["max_moves"]


@pytest.mark.parametrize(
    ("conf", "problem"),
    [
        ({"new_total_partitions": {}}, "should be non-empty|does not have enough properties"),
        ({"new_total_partitions": {"orders": 0}}, "less than the minimum"),
        ({"new_total_partitions": {"orders": "12"}}, "is not of type 'integer'"),
        ({"new_total_partitions": ["orders"]}, "is not of type 'object'"),
    ],
)
def test_growth_params_refuse_bad_input(dagbag, conf, problem):
    with pytest.raises(PARAM_ERRORS, match=problem):
        validate(dagbag.dags["kafka_grow_partitions"], conf)


@pytest.mark.parametrize(
    ("dag_id", "conf"),
    [
        ("kafka_scale_out", {}),
        ("kafka_scale_out", {"new_broker_ids": []}),
        ("kafka_rebalance_maintenance_window", {"window_minutes": 1}),
        ("kafka_rebalance_maintenance_window", {"topic_include": "orders"}),
        ("kafka_heal_under_replicated", {"heal_targets_path": ""}),
        ("kafka_rack_maintenance", {"racks": [""]}),
        ("kafka_rack_maintenance", {"brokers": [-1]}),
        ("kafka_rack_maintenance", {"hold_seconds": -1}),
    ],
)
def test_other_params_refuse_bad_input(dagbag, dag_id, conf):
    with pytest.raises(PARAM_ERRORS):
        validate(dagbag.dags[dag_id], conf)


def test_scheduled_examples_run_with_their_defaults(dagbag):
    """A scheduled run has no conf: the defaults must be valid."""
    for dag_id in ("kafka_rebalance_maintenance_window", "kafka_heal_under_replicated"):
        validate(dagbag.dags[dag_id], {})


@pytest.mark.parametrize(("conf", "problem"), [
    ({}, "No value passed"),
    ({"log_dirs": []}, "should be non-empty"),
    ({"log_dirs": ["1:data-2"]}, "does not match"),
    ({"log_dirs": ["1:/d"], "max_moves_per_dir": 0}, "less than the minimum"),
])
def test_remove_disk_params_refuse_bad_input_before_a_run(dagbag, conf, problem):
    with pytest.raises(PARAM_ERRORS, match=problem):
        validate(dagbag.dags["kafka_remove_disk"], conf)


@pytest.mark.parametrize(("dag_id", "last_of_the_moves"), [
    ("kafka_decommission_brokers", "wait"),
    ("kafka_remove_disk", "execute"),
])
def test_the_cordons_of_a_plan_never_executed_are_given_back_whatever_happened_upstream(dagbag, dag_id,
                                                                                       last_of_the_moves):
    """Each DAG whose plan cordons has the clean-up: RestoreCordonsOperator after the last task that moves replicas
    (not after the approval: a "Reject" skips its direct downstream tasks whatever their trigger rule), all_done."""
    from airflow_kafka_reassign.operators.decommission import RestoreCordonsOperator

    dag = serialized(dagbag.dags[dag_id])
    restore = dag.task_dict["restore_cordons"]
    assert restore.task_type == RestoreCordonsOperator.__name__
    assert restore.trigger_rule == "all_done"
    assert restore.upstream_task_ids == {last_of_the_moves}
    assert restore.downstream_task_ids == set()
    assert "plan" in restore.get_flat_relative_ids(upstream=True)  # it runs after the plan task it reads
    assert dag.task_dict["plan"].task_type == "PlanReassignmentOperator"
    assert dagbag.dags[dag_id].task_dict["restore_cordons"].plan_task_id == "plan"
