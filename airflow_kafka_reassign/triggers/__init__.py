"""Airflow triggers (deferrable mode): poll in the triggerer, yield one event, let the worker act."""
