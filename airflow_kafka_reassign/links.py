"""Kept for the operators that import the link from here: it is :mod:`airflow_kafka_reassign.report.links`."""

from __future__ import annotations

from airflow_kafka_reassign.report.links import (
    REPORT_XCOM_KEY,
    URL_PREFIX,
    PlanReportLink,
    push_report_location,
    report_url,
)

__all__ = ["REPORT_XCOM_KEY", "URL_PREFIX", "PlanReportLink", "push_report_location", "report_url"]
