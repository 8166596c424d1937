"""write_report: the page's content, its escaping, its files, and the command line."""

from __future__ import annotations

import base64
import html as html_module
import json
import re
import shutil

import pytest
from report_scenarios import HOSTILE_RACK, HOSTILE_TOPIC, decommission_snapshot, write_decommission

from airflow_kafka_reassign.core.planner import PlanRequest, plan_reassignment
from airflow_kafka_reassign.core.planner.synthetic import snapshot_from_assignment, synthetic_snapshot
from airflow_kafka_reassign.core.records.plan_io import write_plan_dir
from airflow_kafka_reassign.exceptions import ConfigurationError
from airflow_kafka_reassign.report import main, write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def decommission(tmp_path_factory):
    root = tmp_path_factory.mktemp("decommission")
    plan_dir, snap_dir, snapshot = write_decommission(root)
    html_path = write_report(plan_dir, snap_dir)
    return plan_dir, snap_dir, snapshot, html_path, html_path.read_text(encoding="utf-8")


def attribute_values(html: str, name: str) -> list[str]:
    return re.findall(rf'\b{name}="([^"]*)"', html)


def test_the_report_is_written_in_the_plan_directory_with_its_charts(decommission):
    plan_dir, _, _, html_path, html = decommission
    assert html_path == plan_dir / "report" / "report.html"
    pngs = sorted(p.name for p in html_path.parent.glob("*.png"))
    assert pngs == ["bytes.png", "cost.png", "leaders.png", "moves-brokers.png", "moves-racks.png", "replicas.png"]
    for name in pngs:
        data = (html_path.parent / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000
    # embedded by default: every chart is in the page, so report.html alone is complete
    sources = attribute_values(html, "src")
    assert len(sources) == len(pngs)
    for src in sources:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(PNG_MAGIC)
    assert not html_path.with_name("report.html.tmp").exists()


def test_the_page_uses_no_network_asset_and_no_script(decommission):
    html = decommission[4]
    assert "<script" not in html.lower()
    for value in attribute_values(html, "src") + attribute_values(html, "href"):
        assert not re.match(r"^(https?:)?//", value), value
    assert "@import" not in html and "url(" not in html


def test_user_data_is_escaped(decommission):
    html = decommission[4]
    assert HOSTILE_TOPIC not in html
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;&#39;&#34;" in html  # Jinja2's autoescape (markupsafe)
    assert HOSTILE_RACK not in html
    assert "&lt;b&gt;r$1$&lt;/b&gt;" in html
    # the only tags are the page's own
    tags = set(re.findall(r"<([a-zA-Z0-9]+)", html))
    assert tags <= {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "code", "div", "ul", "li",
                    "span", "table", "thead", "tbody", "tr", "th", "td", "figure", "img", "figcaption", "a"}


def test_the_page_shows_the_plan_its_bounds_and_its_guard_decisions(decommission):
    plan_dir, _, _, _, html = decommission

    summary = json.loads((plan_dir / "metrics.json").read_text())["summary"]
    text = re.sub(r"<[^>]+>", "", html)
    assert "Reassignment plan: remove-brokers" in text
    assert f"{summary['replica_moves']:,} / {summary['lower_bound']:,}" in text
    assert f"{summary['leader_changes']:,} / {summary['leader_changes_lower_bound']:,}" in text
    assert f"{summary['partitions_moved']:,}" in text
    # guard decisions: RF changes allowed for exactly the requested topic, in-flight partitions left alone,
    # the removed broker emptied
    assert "clicks-0" in text and "allow_rf_change" in text and "2 → 3" in text
    assert 'as requested by rf_changes/heal_targets ({"clicks": 3})' in html_module.unescape(
        html.replace("<code>", "").replace("</code>", ""))
    assert "in-flight reassignment are left alone: payments-1" in text
    assert "brokers [6] hold 10 replicas now and 0 after the plan" in text
    spread = json.loads((plan_dir / "metrics.json").read_text())["after"]["replica_max_min"]
    assert (f"replicas per broker end at max-min {spread}; the best any plan can reach here is "
            f"{summary['replica_max_min_floor']}") in text
    assert "6 (removed)" in text
    assert "Replication-factor changes" in text
    for label in ("replicas per broker", "preferred leaders per broker", "bytes per broker",
                  "replicas moved, broker to broker", "replicas moved, rack to rack"):
        assert f'alt="{label}' in html
    for name in ("plan.json", "reassignment.json", "rollback.json", "rollback-kafka.json", "metrics.json"):
        assert f'href="../{name}"' in html


@pytest.mark.parametrize("summary, spread, kind, words", [
    ({}, 3, None, None),  # plans written before these fields: nothing said
    ({"replica_max_min_floor": 0}, 1, "ok", "the best any plan can reach here is 0"),
    ({"replica_max_min_floor": 7, "replica_balance_bounded_by": ["racks"], "topics_uneven_for_racks": 12}, 7, "ok",
     "(bounded by: racks); 12 topic(s) are left uneven"),
    ({"replica_max_min_floor": 1, "replica_balance_bounded_by": ["topic spread"]}, 5, "warn", "bounded by: topic spread"),
])
def test_the_balance_decision_says_what_bounded_the_balance(summary, spread, kind, words):
    from airflow_kafka_reassign.report.page import balance_decision

    decision = balance_decision(summary, spread)
    if kind is None:
        assert decision is None
    else:
        assert decision is not None and decision[0] == kind and decision[1] == "balance" and words in decision[2]


def test_without_embedding_the_page_refers_to_the_png_files_next_to_it(decommission, tmp_path):
    plan_dir, snap_dir = decommission[0], decommission[1]
    html_path = write_report(plan_dir, snap_dir, out_dir=tmp_path / "out", embed_images=False)
    sources = attribute_values(html_path.read_text(), "src")
    assert sources and all(not s.startswith("data:") for s in sources)
    for src in sources:
        assert (html_path.parent / src).read_bytes().startswith(PNG_MAGIC)


def test_the_snapshot_can_be_in_memory_or_the_one_metrics_json_names(decommission, tmp_path):
    plan_dir, _, snapshot, _, html = decommission

    def numbers(page: str) -> list[str]:
        body = page.split("<h2>Guard decisions</h2>", 1)[0].split('<div class="cards">', 1)[1]
        return re.findall(r'class="v">([^<]*)<', body)

    in_memory = write_report(plan_dir, snapshot, out_dir=tmp_path / "mem").read_text()
    recorded = write_report(plan_dir, out_dir=tmp_path / "recorded").read_text()
    assert numbers(in_memory) == numbers(recorded) == numbers(html)
    assert "in memory" in in_memory


def test_no_snapshot_found_is_a_clear_error(decommission, tmp_path):
    plan_dir = tmp_path / "plan"
    shutil.copytree(decommission[0], plan_dir, ignore=shutil.ignore_patterns("report"))
    metrics = (plan_dir / "metrics.json").read_text().replace(str(decommission[1]), "s3://bucket/snap")
    (plan_dir / "metrics.json").write_text(metrics)
    with pytest.raises(ConfigurationError, match="pass the snapshot"):
        write_report(plan_dir)


def test_a_report_against_another_snapshot_says_so(decommission, tmp_path):
    other = snapshot_from_assignment({1: "r1", 2: "r2"}, {"x": [[1, 2]]})
    html = write_report(decommission[0], other, out_dir=tmp_path / "o").read_text()
    assert "this report compares the plan with another snapshot" in html
    assert "execution will refuse them as stale" in html  # its moves name partitions that snapshot lacks


def test_an_incomplete_plan_directory_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a complete plan directory"):
        write_report(tmp_path, decommission_snapshot())


def test_an_empty_plan_reports_no_moves(tmp_path):
    snapshot = snapshot_from_assignment({1: "a", 2: "b"}, {"t": [[1, 2], [2, 1]]})
    result = plan_reassignment(snapshot, PlanRequest())
    assert len(result.plan) == 0
    plan_dir = write_plan_dir(result, tmp_path / "plan")
    html_path = write_report(plan_dir, snapshot)
    html = html_path.read_text()
    assert "The plan moves no replica." in html
    assert "no partition changes its replication factor" in html
    assert not (html_path.parent / "moves-brokers.png").exists()
    assert "No replica sizes in the snapshot" in html


def test_a_hundred_brokers_keep_the_matrix_readable(tmp_path):
    snapshot = synthetic_snapshot(brokers=100, racks=3, new_brokers=10, topics=40, seed=2, validate=False)
    result = plan_reassignment(snapshot, PlanRequest(goal="add-brokers"))
    plan_dir = write_plan_dir(result, tmp_path / "plan")
    html = write_report(plan_dir, snapshot, max_matrix_brokers=30).read_text()
    assert "the 29 brokers sending and the 29 receiving the most, of 110" in html
    assert html.count("<tr>") > 110  # one row per broker in the broker table


def test_main_prints_the_report_path_and_fails_cleanly(decommission, tmp_path, capsys):
    plan_dir, snap_dir = decommission[0], decommission[1]
    assert main([str(plan_dir), "--snapshot", str(snap_dir), "--out", str(tmp_path / "cli"), "--no-embed"]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path / "cli" / "report.html") in out
    assert main([str(tmp_path / "nothing-here")]) == 2
    assert "not a complete plan directory" in capsys.readouterr().err


def test_the_report_imports_no_airflow_kafka_client_or_spark():
    import subprocess
    import sys

    code = (
        "import sys, airflow_kafka_reassign.report\n"
        "bad = sorted({m.split('.')[0] for m in sys.modules} & {'airflow', 'kafka', 'confluent_kafka', 'pyspark'})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""
