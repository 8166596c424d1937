"""The checks that stop or slow a run before it hurts the cluster: health, disk room, network headroom, adaptive limits,
snapshot completeness, the approval.

Pure: imports no Airflow, no Kafka client, no PySpark."""
