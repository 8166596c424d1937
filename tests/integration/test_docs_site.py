"""The docs site opened from disk (``file://``) in headless Chromium: nav links and search work.

No Kafka needed. The site is built as ``make docs`` builds it (strict), into the test's tmp dir.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from browser import browser  # noqa: F401 (fixture)

ROOT = Path(__file__).resolve().parents[2]


def test_the_site_from_disk_follows_a_nav_link_and_finds_a_search_result(tmp_path, browser):  # noqa: F811
    site = tmp_path / "site"
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)], cwd=ROOT,
                           capture_output=True, text=True, timeout=300, check=False)
    assert built.returncode == 0, built.stderr[-3000:]

    browser.goto((site / "index.html").as_uri())
    href = browser.eval("[...document.querySelectorAll('.wy-menu-vertical a')]"
                        ".find(a => a.textContent.trim() === 'Approve a plan').href")
    assert href == (site / "approval.html").as_uri()  # a page, not a folder (a listing from disk)
    browser.eval("[...document.querySelectorAll('.wy-menu-vertical a')]"
                 ".find(a => a.textContent.trim() === 'Approve a plan').click()")
    browser.wait_for("location.href.endsWith('/approval.html') && document.readyState === 'complete'",
                     what="the nav link followed")
    assert browser.eval("document.querySelector('h1').textContent.trim()").startswith("Approve a plan")

    # the theme's search box: type, submit; the results page lists pages, no "Searching..." left
    browser.eval("(() => { const f = document.getElementById('rtd-search-form'); "
                 "f.querySelector('input[name=q]').value = 'throttle'; f.submit(); })()")
    results = browser.wait_for(
        "(() => { const r = document.querySelectorAll('#mkdocs-search-results article h3 a');"
        " return r.length ? [...r].map(a => a.getAttribute('href')) : null; })()",
        what="search results for 'throttle'", timeout=30)
    assert "Searching" not in browser.eval("document.getElementById('mkdocs-search-results').innerText")
    assert any(h.endswith("execute.html") or "execute.html#" in h for h in results), results
    first = browser.eval("document.querySelector('#mkdocs-search-results article h3 a').href")
    assert first.startswith("file://") and ".html" in first
