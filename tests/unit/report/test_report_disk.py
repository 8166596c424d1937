"""write_report with a capacity document: per-broker disk before/after against capacity."""

from __future__ import annotations

import re

from airflow_kafka_reassign.core.planner import PlanRequest, plan_reassignment
from airflow_kafka_reassign.core.planner.ingress import STOP_REASONS
from airflow_kafka_reassign.core.planner.synthetic import snapshot_from_assignment
from airflow_kafka_reassign.core.records.plan_io import read_metrics, write_plan_dir
from airflow_kafka_reassign.core.records.snapshot_io import write_snapshot
from airflow_kafka_reassign.core.vocabulary.capacity import capacity_document
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


def test_the_report_shows_bytes_in_per_broker_against_network_in_and_tiered_topics(tmp_path):
    # one topic, hot partitions (10 MB/s) on brokers 1 and 2, idle ones on 3 and 4; topic "logs" is tiered
    snap = snapshot_from_assignment({1: None, 2: None, 3: None, 4: None},
                                    {"t": [[1, 2]] * 4 + [[3, 4]] * 4, "logs": [[1, 3], [2, 4]]},
                                    sizes={"t": [10**9] * 8, "logs": [10**6] * 2})
    rates = {"t": [10**7] * 4 + [0.0] * 4, "logs": [0.0, 0.0]}
    snap = snap.model_copy(update={
        "partitions": tuple(p.model_copy(update={"bytes_in_per_s": rates[p.topic][p.partition]}) for p in snap.partitions),
        "topics": tuple(t.model_copy(update={"configs": {"remote.storage.enable": str(t.name == "logs").lower()}})
                        for t in snap.topics)})
    doc = capacity_document({"default": {"disk": "20GB", "network_in": "100MB"}})
    result = plan_reassignment(snap, PlanRequest(capacity=doc))
    plan_dir = write_plan_dir(result, tmp_path / "plan", snapshot=str(write_snapshot(snap, tmp_path / "snapshot")))
    metrics = read_metrics(plan_dir)
    assert metrics["ingress"]["rate_before"]["1"] == 4e7 and metrics["summary"]["ingress"]["balanced"]
    assert metrics["tiered"]["partitions"] == 2 and metrics["tiered"]["local_bytes"] == 4 * 10**6
    html = write_report(plan_dir, embed_images=False).read_text(encoding="utf-8")
    assert "Bytes in per broker (estimated; goal: every broker within 5% of the mean share 20.0% of its network_in" in html
    section = html.split("Bytes in per broker")[1].split("</table>")[0]
    rows = dict(re.findall(r"<tr><td>(\d)</td>(.*?)</tr>", section))
    cells = re.findall(r'<td class="n">(.*?)</td>', rows["1"])
    after = metrics["ingress"]["rate_after"]["1"]
    assert cells[0] == "40.0 MB/s" and cells[2] == "100.0 MB/s" and cells[3] == "40.0%"
    assert cells[4] == f"{after / 10**8:.1%}" and abs(after - 2e7) <= 5e6
    assert "Tiered topics (remote.storage.enable): 1 topic(s), 2 partition(s), counted at their local bytes" in html


def test_the_report_and_metrics_say_which_brokers_the_bytes_in_step_left_outside_and_why(tmp_path):
    # broker 1's only busy partition takes in 60 MB/s, more than any other broker's band has room for: it stays
    # above the band, and brokers 2 and 3 below it
    snap = snapshot_from_assignment({1: None, 2: None, 3: None}, {"t": [[1], [2], [3], [3], [1]]}, sizes={"t": [10**9] * 5})
    rates = [6e7, 5e6, 0.0, 0.0, 0.0]
    snap = snap.model_copy(update={"partitions": tuple(p.model_copy(update={"bytes_in_per_s": rates[p.partition]})
                                                       for p in snap.partitions)})
    doc = capacity_document({"default": {"disk": "100GB", "network_in": "100MB"}})
    result = plan_reassignment(snap, PlanRequest(capacity=doc, disk_tolerance=0.5))
    assert result.ingress.stopped_by == {1: "too busy", 2: "too busy", 3: "too busy"}
    assert result.summary()["ingress"]["stopped_short"] == {"too busy": [1, 2, 3]}
    assert any(w.startswith("bytes in: broker(s) [1, 2, 3]") and STOP_REASONS["too busy"] in w
               for w in result.warnings), result.warnings
    plan_dir = write_plan_dir(result, tmp_path / "plan", snapshot=str(write_snapshot(snap, tmp_path / "snapshot")))
    assert read_metrics(plan_dir)["ingress"]["stopped_by"] == {"1": "too busy", "2": "too busy", "3": "too busy"}
    html = write_report(plan_dir, embed_images=False).read_text(encoding="utf-8")
    assert "Outside the bytes-in band after the plan, and what stopped them: too busy: broker(s) 1, 2, 3." in html
