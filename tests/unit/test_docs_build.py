"""The docs site builds with no warning (mkdocs --strict), and its include hook works.

The build is the same command as ``make docs`` into a temporary directory; a warning (a broken
link, a nav entry without its page, an include naming a missing file or section) fails it.
"""

from __future__ import annotations

import html as html_module
import importlib.util
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "docs" / "hooks" / "include_files.py"


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        capture_output=True, text=True, timeout=300, check=False, cwd=config.parent,
    )


def test_the_site_builds_with_no_warning(tmp_path):
    site = tmp_path / "site"
    result = build(ROOT / "mkdocs.yml", site)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert not re.search(r"^(WARNING|ERROR)\b", output, re.MULTILINE), output
    nav_pages = re.findall(r":\s*([\w-]+)\.md\s*$", (ROOT / "mkdocs.yml").read_text(), re.MULTILINE)
    assert {"index", "getting-started", "safety", "performance", "troubleshooting"} <= set(nav_pages)
    for name in nav_pages:
        page = site / f"{name}.html"  # use_directory_urls: false: links work from disk
        assert page.is_file(), name
    for page in site.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        text = html_module.unescape(re.sub(r"<[^>]+>", "", html))
        assert not re.search(r'^\s*--8<-- "', text, re.MULTILINE), f"an include was not expanded in {page}"
        # no CDN asset: the site works offline (links to other sites are fine)
        assert not re.search(r'<(script|link)[^>]+(src|href)="(https?:)?//', html), page
    assert not (site / "hooks").exists()


@pytest.fixture(scope="module")
def hook():
    spec = importlib.util.spec_from_file_location("include_files_hook", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXAMPLE = '''\
"""An example DAG."""
from datetime import datetime

# [START params]
params = {
    "brokers": [4],
}
# [END params]

with DAG("x") as dag:
    # [START tasks]
    plan = Plan(task_id="plan")
    # [START inner]
    wait = Wait(task_id="wait")
    # [END inner]
    # [END tasks]
'''


@pytest.fixture
def repo(tmp_path):
    (tmp_path / "example_dags").mkdir()
    (tmp_path / "example_dags" / "x.py").write_text(EXAMPLE)
    return tmp_path


def test_a_whole_file_is_included_without_its_markers(hook, repo):
    out = hook.include('```python\n--8<-- "example_dags/x.py"\n```', repo, "page.md")
    assert out.startswith('```python\n"""An example DAG."""')
    assert "[START" not in out and "[END" not in out
    assert out.endswith("    wait = Wait(task_id=\"wait\")\n```")


def test_a_section_is_included_dedented_and_indented_like_the_directive(hook, repo):
    out = hook.include('- step\n\n    --8<-- "example_dags/x.py:tasks"\n', repo, "page.md")
    assert out == '- step\n\n    plan = Plan(task_id="plan")\n    wait = Wait(task_id="wait")\n'
    out = hook.include('--8<-- "example_dags/x.py:params"', repo, "page.md")
    assert out == 'params = {\n    "brokers": [4],\n}'


def test_a_line_range_is_included(hook, repo):
    assert hook.include('--8<-- "example_dags/x.py:2:2"', repo, "p.md") == "from datetime import datetime"


def test_the_directive_can_be_shown_literally(hook, repo):
    assert hook.include(';--8<-- "example_dags/x.py"', repo, "p.md") == '--8<-- "example_dags/x.py"'


@pytest.mark.parametrize(
    ("directive", "problem"),
    [
        ('--8<-- "example_dags/missing.py"', "no such file"),
        ('--8<-- "../outside.py"', "no such file"),
        ('--8<-- "example_dags/x.py:nope"', r"\[START nope\]"),
        ('--8<-- "example_dags/x.py:5:99"', "outside x.py"),
    ],
)
def test_a_bad_include_fails_the_build_with_the_page_named(hook, repo, directive, problem):
    from mkdocs.exceptions import PluginError

    (repo.parent / "outside.py").write_text("secret = 1\n")
    with pytest.raises(PluginError, match=problem) as info:
        hook.include(directive, repo, "how-to/page.md")
    assert "how-to/page.md" in str(info.value)


def test_the_hook_works_in_a_real_strict_build(repo):
    (repo / "docs").mkdir()
    (repo / "docs" / "index.md").write_text(textwrap.dedent('''\
        # Example

        ```python
        --8<-- "example_dags/x.py:params"
        ```
        '''))
    (repo / "mkdocs.yml").write_text(textwrap.dedent(f'''\
        site_name: t
        strict: true
        theme: {{name: mkdocs, highlightjs: false}}
        hooks: [{HOOK}]
        '''))
    result = build(repo / "mkdocs.yml", repo / "site")
    assert result.returncode == 0, result.stdout + result.stderr
    html = (repo / "site" / "index.html").read_text()
    assert "&quot;brokers&quot;: [4]" in html or '"brokers": [4]' in html
    (repo / "docs" / "index.md").write_text('```\n--8<-- "example_dags/x.py:gone"\n```\n')
    result = build(repo / "mkdocs.yml", repo / "site2")
    assert result.returncode != 0
    assert "[START gone]" in result.stdout + result.stderr


def test_every_operator_and_sensor_has_a_parameter_table_from_its_docstring(tmp_path):
    spec = importlib.util.spec_from_file_location("param_tables", ROOT / "docs" / "hooks" / "param_tables.py")
    assert spec is not None and spec.loader is not None
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    pages = "".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    classes = [
        "operators.plan.PlanReassignmentOperator", "operators.approval.PlanApprovalOperator",
        "operators.execute.ExecuteReassignmentOperator", "operators.cancel.CancelReassignmentOperator",
        "operators.partitions.GuardedCreatePartitionsOperator", "operators.partitions.PlanHealOperator",
        "sensors.reassignment.WaitForReassignmentSensor",
    ]
    for name in classes:
        assert f"<!-- params: airflow_kafka_reassign.{name} -->" in pages, name
        table = tables.table(ROOT, f"airflow_kafka_reassign.{name}")
        assert table.count("\n") > 3
    # a parameter without its :param: fails the build, naming it
    module = tmp_path / "pkg" / "op.py"
    module.parent.mkdir()
    module.write_text('class Op:\n    """Doc.\n\n    :param a: documented.\n    """\n\n'
                      '    def __init__(self, *, a: int = 1, b: int = 2, **kwargs):\n        pass\n')
    with pytest.raises(Exception, match=r"pkg.op.Op: no :param: for \['b'\]"):
        tables.table(tmp_path, "pkg.op.Op")


def test_the_docs_screenshots_are_small_shown_and_made_by_the_browser_test():
    """Every image in docs/img/ is a PNG under 200 kB that a page shows and that ``make screenshots``
    (tests/integration/test_airflow_ui.py) produces; every screenshot that test names is there."""
    images = sorted((ROOT / "docs" / "img").glob("*"))
    pages = "".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    ui_test = (ROOT / "tests" / "integration" / "test_airflow_ui.py").read_text()
    named = set(re.findall(r'"(first-decommission-[\w-]+\.png)"', ui_test))
    assert named and named <= {p.name for p in images}
    for image in images:
        assert image.suffix == ".png" and image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", image.name
        assert image.stat().st_size < 200_000, (image.name, image.stat().st_size)
        assert f"img/{image.name}" in pages, f"{image.name} is shown by no docs page"
        assert image.name in named, f"{image.name} is not produced by make screenshots"
