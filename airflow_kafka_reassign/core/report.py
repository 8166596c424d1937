"""Kept for the operators that still import ``human_bytes`` from here (operators/plan.py, operators/approval.py).

The per-broker loads are in :mod:`airflow_kafka_reassign.core.loads`, byte sizes in
:mod:`airflow_kafka_reassign.core.units`, the plan report in :mod:`airflow_kafka_reassign.report`.
"""

from __future__ import annotations

from airflow_kafka_reassign.core.units import format_bytes as human_bytes

__all__ = ["human_bytes"]
