"""The maintenance operations a run carries out: cordons, the controller quorum's voters, the broker lifecycle, drains,
disk removal, leader evacuation, partition growth.

Pure: imports no Airflow, no Kafka client, no PySpark."""
