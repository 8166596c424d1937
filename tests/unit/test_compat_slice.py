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
    names = sorted(set(airflow_line.CELLS) - set(airflow_line.UNVERIFIED) - set(airflow_line.OUT_OF_SLICE))
    assert readme_cells() == [(i, name, *airflow_line.CELLS[name]) for i, name in enumerate(names)]


def test_the_slice_is_the_first_8_hex_digits_of_the_commit_modulo_the_cells():
    names = sorted(set(airflow_line.CELLS) - set(airflow_line.UNVERIFIED) - set(airflow_line.OUT_OF_SLICE))
    assert [airflow_line.slice_cell(f"{i:08x}" + "f" * 32) for i in range(len(names) * 2)] == names * 2
    assert airflow_line.slice_cell("0000000" + "1" * 33) == names[1]
    assert airflow_line.UNIT_CELL in airflow_line.CELLS
    assert set(airflow_line.UNVERIFIED) <= set(airflow_line.CELLS)
    assert set(airflow_line.OUT_OF_SLICE) <= set(airflow_line.CELLS)


def test_each_lock_is_its_lines_dated_resolution_with_the_hand_pins():
    """tests/compat/locks/<line>.txt (``airflow_line.py --lock LINE``): one per LINE_RELEASES entry, pinning that patch,
    its header naming the day and what was pinned by hand; the Airflow 3.2 lock keeps svcs below 26.2."""
    locks = sorted(p.stem for p in airflow_line.LOCKS.glob("*.txt"))
    assert locks == sorted(airflow_line.LINE_RELEASES)
    for line, (patch, day) in airflow_line.LINE_RELEASES.items():
        text = (airflow_line.LOCKS / f"{line}.txt").read_text()
        assert f"--lock {line}" in text and f"on {day}" in text and "Pinned by hand" in text
        assert f"\napache-airflow=={patch}\n" in text and f"\napache-airflow-core=={patch}\n" in text
        for pin in airflow_line.LINE_PINS.get(line, []):
            assert pin in text.splitlines()[2]
        for released in airflow_line.LINE_RELEASED.get(line, []):
            assert f"{released} released from the day's set" in text.splitlines()[2]
    svcs = re.search(r"^svcs==(\d+)\.(\d+)", (airflow_line.LOCKS / "3.2.txt").read_text(), re.M)
    assert svcs and (int(svcs[1]), int(svcs[2])) < (26, 2)
    # the 3.1 lock keeps the standard provider at the floor the provider declares (1.12.0, the day's, has no
    # ApprovalOperator(response_timeout=...)): every pin of it, for every Python
    lock_31 = (airflow_line.LOCKS / "3.1.txt").read_text()
    standard = re.findall(r"^apache-airflow-providers-standard==(\d+)\.(\d+)\.(\d+)", lock_31, re.M)
    assert standard and all((int(a), int(b), int(c)) >= (1, 13, 1) for a, b, c in standard)
