"""Self-healing: the incidents a cluster watch raises and the decisions a healing run takes on them.

Pure: imports no Airflow, no Kafka client, no PySpark."""
