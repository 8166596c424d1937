"""Unit-test setup shared by every test (unit and integration).

Airflow writes its config, database and logs under ``AIRFLOW_HOME`` (``~/airflow`` when
unset), and reads it when ``airflow`` is first imported: point it at a throw-away directory
before any test module imports Airflow.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

_AIRFLOW_HOME = tempfile.mkdtemp(prefix="akr-unit-airflow-home-")
atexit.register(shutil.rmtree, _AIRFLOW_HOME, ignore_errors=True)
os.environ["AIRFLOW_HOME"] = _AIRFLOW_HOME
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
