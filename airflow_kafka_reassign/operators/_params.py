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


def health_args(gate: Any, on_unhealthy: Any, max_pause_s: Any, below_min_isr: Any) -> dict[str, Any]:
    """The keyword arguments of :class:`~airflow_kafka_reassign.core.health.HealthPolicy` from a task's
    ``health_gate``, ``on_unhealthy``, ``max_pause_s`` and ``below_min_isr`` (JSON-serialisable: the sensor's
    trigger carries them); the policy validates the values."""
    try:
        pause = None if max_pause_s is None or max_pause_s == "" else float(max_pause_s)
    except (TypeError, ValueError):
        raise ConfigurationError(f"max_pause_s must be a number of seconds or None, not {max_pause_s!r}") from None
    return {"gate": as_bool(gate, "health_gate"), "on_unhealthy": on_unhealthy, "max_pause_s": pause,
            "below_min_isr": below_min_isr}
