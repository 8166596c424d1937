"""Which brokers lag behind the cluster's metadata (kafka/admin/cluster.py): the adapter's snapshot reads
the cluster only once every live broker has applied the metadata as it was when the snapshot began."""

from __future__ import annotations

from airflow_kafka_reassign.kafka.admin import metadata_lag


def test_every_broker_at_or_past_the_target_is_caught_up():
    assert metadata_lag({1: 83018, 2: 83020, 3: 83018}, 83018) == ""


def test_lagging_brokers_are_named_with_their_offsets_and_silent_ones_are_not_waited_for():
    # seen on the sandbox under load: ApiVersions' FinalizedFeaturesEpoch while the high watermark was 83019
    assert metadata_lag({1: 82457, 2: 81954, 3: 79619, 4: 83018, 5: None}, 83018) == (
        "broker(s) 1, 2, 3 had not yet applied the cluster's metadata up to offset 83018, where it was when the "
        "snapshot began (1 at 82457, 2 at 81954, 3 at 79619)"
    )
