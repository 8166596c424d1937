"""What a run keeps on the plan storage: the store port, the journal, the lease, the plan directory and the snapshot
files.

Pure: imports no Airflow, no Kafka client, no PySpark."""
