"""write_report with a capacity document: per-broker disk before/after against capacity."""

from __future__ import annotations

import re

from airflow_kafka_reassign.core.capacity import capacity_document
from airflow_kafka_reassign.core.plan_io import read_metrics, write_plan_dir
from airflow_kafka_reassign.core.planner import PlanRequest, plan_reassignment
from airflow_kafka_reassign.core.snapshot_io import write_snapshot
from airflow_kafka_reassign.core.synthetic import snapshot_from_assignment
from airflow_kafka_reassign.report import write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_the_report_shows_disk_per_broker_before_and_after_against_capacity(tmp_path):
    # broker 4 has half the disk of the others and starts at 110% of it
    snap = snapshot_from_assignment(
        {1: "r1", 2: "r2", 3: "r3", 4: "r1", 5: "r2"},
        {"big": [[1, 2], [4, 5], [1, 5], [4, 2]], "small": [[3, 1], [3, 4], [2, 3], [5, 3], [1, 2], [4, 5]]},
        sizes={"big": [8_000_000] * 4, "small": [300_000] * 6},
    )
    doc = capacity_document({"default": {"disk": "32MB"}, "brokers": {"4": {"disk": "16MB"}}})
    result = plan_reassignment(snap, PlanRequest(capacity=doc, disk_tolerance=0.05))
    plan_dir = write_plan_dir(result, tmp_path / "plan", snapshot=str(write_snapshot(snap, tmp_path / "snapshot")))
    disk = read_metrics(plan_dir)["disk"]
    html_path = write_report(plan_dir, embed_images=False)
    html = html_path.read_text(encoding="utf-8")

    chart = html_path.parent / "disk.png"
    assert chart.read_bytes().startswith(PNG_MAGIC) and chart.stat().st_size > 5000
    assert 'src="disk.png"' in html
    assert "Disk used against capacity (cap 85%; goal: every broker within 5% of the mean share" in html
    section = html.split("Disk used against capacity")[1].split("</table>")[0]
    rows = dict(re.findall(r"<tr><td>(\d)</td>(.*?)</tr>", section))
    assert set(rows) == {"1", "2", "3", "4", "5"}
    cells = re.findall(r'<td class="n">(.*?)</td>', rows["4"])
    before, after = disk["bytes_before"]["4"], disk["bytes_after"]["4"]
    assert cells[0] == "16.0 MB" and cells[2] == f"{before / 16_000_000:.1%}" == "103.8%"
    assert cells[4] == f"{after / 16_000_000:.1%}" and after < 0.85 * 16_000_000
    assert "over the cap" not in html  # no broker over its cap after the plan


def test_the_report_marks_a_broker_left_over_its_cap(tmp_path):
    # one partition pinned (in flight elsewhere is not needed: RF 2 on 2 brokers, nowhere to go)
    snap = snapshot_from_assignment({1: None, 2: None}, {"t": [[1, 2]]}, sizes={"t": [900]})
    doc = capacity_document({"brokers": {"1": {"disk": 1000}, "2": {"disk": 2000}}})
    result = plan_reassignment(snap, PlanRequest(capacity=doc))
    plan_dir = write_plan_dir(result, tmp_path / "plan", snapshot=str(write_snapshot(snap, tmp_path / "snapshot")))
    html = write_report(plan_dir).read_text(encoding="utf-8")
    assert '<span class="removed">90.0% (over the cap)</span>' in html
