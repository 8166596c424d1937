"""Airflow sensors: thin shells over the pure core (progress rules in ``core/execution/progress.py``)."""
