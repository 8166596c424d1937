"""The words every other part of the core speaks: the cluster's and the plan's models, sizes and durations, where a move
stands, rates, loads, broker capacity, and the port (what the core asks of a cluster).

Pure: imports no Airflow, no Kafka client, no PySpark."""
