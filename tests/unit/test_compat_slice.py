"""The CI slice of the compatibility matrix (``make compat-slice``): README.md's table of cells is
tests/compat/airflow_line.py's ``CELLS`` but the ``UNVERIFIED`` ones, in the order the commit hash indexes them."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("compat_airflow_line", ROOT / "tests" / "compat" / "airflow_line.py")
assert spec is not None and spec.loader is not None
airflow_line = importlib.util.module_from_spec(spec)
spec.loader.exec_module(airflow_line)


def readme_cells() -> list[tuple[int, str, str, str, str]]:
    section = (ROOT / "README.md").read_text().split("## What CI runs", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+) \| (\S+) \| (\S+) \| (\S+) \| (\S+) \|$", section, re.M)
    return [(int(i), name, py, af, kafka) for i, name, py, af, kafka in rows]


def test_the_readme_lists_the_cells_in_the_order_the_commit_hash_indexes_them():
    names = sorted(set(airflow_line.CELLS) - set(airflow_line.UNVERIFIED))
    assert readme_cells() == [(i, name, *airflow_line.CELLS[name]) for i, name in enumerate(names)]


def test_the_slice_is_the_first_8_hex_digits_of_the_commit_modulo_the_cells():
    names = sorted(set(airflow_line.CELLS) - set(airflow_line.UNVERIFIED))
    assert [airflow_line.slice_cell(f"{i:08x}" + "f" * 32) for i in range(len(names) * 2)] == names * 2
    assert airflow_line.slice_cell("0000000" + "1" * 33) == names[1]
    assert airflow_line.UNIT_CELL in airflow_line.CELLS
    assert set(airflow_line.UNVERIFIED) <= set(airflow_line.CELLS)
