"""``python -m airflow_kafka_reassign.report PLAN_DIR [--snapshot DIR] [--out DIR]``."""

from __future__ import annotations

import sys

from airflow_kafka_reassign.report import main

sys.exit(main())
