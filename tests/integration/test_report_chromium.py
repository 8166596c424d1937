"""The plan report in a real headless Chromium (Debian's ``chromium``; `.ci/run` installs it).

No Kafka needed: the report of a planned decommission is rendered from ``file://``. Two
checks: a screenshot that shows the charts (the page is not blank and the charts' colours are
on it), and the DOM after load where a probe script, added to a copy of the page, records how
many images decoded (``naturalWidth > 0``). The screenshot stays in pytest's tmp dir; its
path is printed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from airflow_kafka_reassign.report import write_report

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "report"))
from report_scenarios import write_decommission  # noqa: E402

WINDOW = (1400, 5000)
#: Colours only the charts draw: the first rack's bar colour and the "before" grey.
CHART_COLOURS = {(0x1F, 0x77, 0xB4), (0xC8, 0xC8, 0xC8)}
PROBE = """<script>
window.addEventListener("load", function () {
  var imgs = Array.prototype.slice.call(document.images);
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; });
  var marker = document.createElement("pre");
  marker.id = "render-probe";
  marker.textContent = "images-loaded " + ok.length + "/" + imgs.length + " widths " +
    ok.map(function (i) { return i.naturalWidth; }).join(",");
  document.body.appendChild(marker);
});
</script>"""


def chromium() -> str:
    found = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if found is None:
        pytest.fail("chromium is not installed: `apt-get install -y chromium` (Debian's package; .ci/run installs it)")
    return found


def run_chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    cmd = [
        chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
        "--no-first-run", "--disable-extensions", f"--user-data-dir={profile}", *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    plan_dir, snap_dir, _ = write_decommission(tmp_path_factory.mktemp("report"))
    return write_report(plan_dir, snap_dir)


@pytest.mark.parametrize("embed", [True, False], ids=["embedded", "png-files"])
def test_every_chart_loads_in_chromium(report: Path, tmp_path: Path, embed: bool) -> None:
    out = tmp_path / "report"
    page = write_report(report.parents[1], out_dir=out, embed_images=embed)
    probe = page.with_name("probe.html")
    html = page.read_text(encoding="utf-8")
    expected = len(re.findall(r"<img ", html))
    assert expected >= 5
    probe.write_text(html.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    result = run_chromium(["--virtual-time-budget=15000", "--dump-dom", probe.as_uri()], tmp_path / "profile")
    assert result.returncode == 0, result.stderr[-2000:]
    found = re.search(r"images-loaded (\d+)/(\d+) widths ([\d,]*)", result.stdout)
    assert found, f"the probe did not run; DOM tail: {result.stdout[-1000:]!r}"
    loaded, total = int(found.group(1)), int(found.group(2))
    assert (loaded, total) == (expected, expected)
    assert all(int(w) > 300 for w in found.group(3).split(","))


def test_the_report_renders_with_its_charts(report: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shot = tmp_path / "report-screenshot.png"
    result = run_chromium([f"--screenshot={shot}", f"--window-size={WINDOW[0]},{WINDOW[1]}", report.as_uri()],
                          tmp_path / "profile")
    assert result.returncode == 0, result.stderr[-2000:]
    with capsys.disabled():
        print(f"\nreport screenshot: {shot}")
    image = Image.open(shot).convert("RGB")
    assert image.size == WINDOW
    rgb = np.asarray(image).astype(np.int64)
    assert (rgb.min(axis=2) < 235).mean() > 0.05, "the screenshot is (nearly) blank"
    codes = np.unique((rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2])
    assert len(codes) > 200, "too few colours for a page with charts"
    wanted = {(r << 16) | (g << 8) | b for r, g, b in CHART_COLOURS}
    assert wanted <= set(codes.tolist()), "the charts' bar colours are not on the screenshot"
