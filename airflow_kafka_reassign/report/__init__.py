"""The plan report: an HTML page with PNG charts written next to a plan, for a reviewer to read
before approving an execution.

    from airflow_kafka_reassign.report import write_report

    html = write_report("plans/2026-11-22", "snapshots/2026-11-22")   # -> plans/2026-11-22/report/report.html

or ``python -m airflow_kafka_reassign.report PLAN_DIR [--snapshot DIR]``. Pure Python and
matplotlib (Agg backend): no Airflow or Kafka import, so the CLI, the Spark job's driver and
the operators can all call it. See docs/report.md.
"""

from __future__ import annotations

from airflow_kafka_reassign.report.write import REPORT_DIR, REPORT_FILE, main, write_report

__all__ = ["REPORT_DIR", "REPORT_FILE", "main", "write_report"]
