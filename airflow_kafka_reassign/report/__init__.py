"""The plan report: an HTML page with PNG charts written next to a plan, for a reviewer to read
before approving an execution, and how Airflow serves it.

    from airflow_kafka_reassign.report import write_report

    html = write_report("plans/2026-11-22", "snapshots/2026-11-22")   # -> plans/2026-11-22/report/report.html

or ``python -m airflow_kafka_reassign.report PLAN_DIR [--snapshot DIR]``. See docs/report.md.

* :mod:`~airflow_kafka_reassign.report.view`: what the report shows of a plan (per-broker load
  before and after, the moves broker to broker), pure and numpy-fast;
* :mod:`~airflow_kafka_reassign.report.page`: the HTML, rendered from Jinja2 templates
  (``templates/``) with autoescape;
* :mod:`~airflow_kafka_reassign.report.charts`: the PNG charts (matplotlib, the ``report`` extra);
* :mod:`~airflow_kafka_reassign.report.write`: ``write_report`` and the command line;
* :mod:`~airflow_kafka_reassign.report.links`: the "Plan report" extra link of the operators;
* :mod:`~airflow_kafka_reassign.report.server`: the Airflow plugin that serves reports.

Writing a report imports no Airflow or Kafka client, so the CLI, the Spark job's driver and the
operators can all call it. ``write_report`` is imported on first use: the links and the server
(imported by the operators and by Airflow) do not load matplotlib.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_kafka_reassign.report.write import REPORT_DIR, REPORT_FILE, main, write_report

__all__ = ["REPORT_DIR", "REPORT_FILE", "main", "write_report"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from airflow_kafka_reassign.report import write

        return getattr(write, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
