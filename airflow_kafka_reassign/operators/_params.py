"""Argument coercion shared by the operators (templated fields render text unless the DAG renders native objects)."""

from __future__ import annotations

from typing import Any

from airflow_kafka_reassign.exceptions import ConfigurationError


def as_bool(value: Any, name: str) -> bool:
    """``value`` as a boolean: ``"False"`` (a rendered template) must not mean True; other text is an error."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text not in ("true", "false"):
            raise ConfigurationError(f"{name} must be true or false, not {value!r}")
        return text == "true"
    return bool(value)
