"""MkDocs hook: search that works when the site is opened from disk (``file://``).

MkDocs' search runs in a Web Worker that fetches ``search/search_index.json``; a browser allows
neither from ``file://`` pages, so search stays at "Searching...". After the build this hook

* writes ``search/search_index.js`` (the same index as a script: ``<script>`` tags load from disk), and
* replaces ``search/main.js`` with a version that loads ``lunr.js`` and that script with
  ``<script>`` tags and searches in the page itself (no worker, no fetch).

It works the same over HTTP. Nothing is fetched from the network.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

MAIN_JS = r"""// offline search (docs/hooks/offline_search.py): no worker, no fetch; works from file://
(function () {
  function joinUrl(base, path) {
    if (path.substring(0, 1) === "/") { return path; }
    return base.substring(base.length - 1) === "/" ? base + path : base + "/" + path;
  }
  function escapeHtml(v) {
    return v.replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }
  function termFromLocation() {
    var vars = window.location.search.substring(1).split("&");
    for (var i = 0; i < vars.length; i++) {
      var kv = vars[i].split("=");
      if (kv[0] === "q") { return decodeURIComponent((kv[1] || "").replace(/\+/g, "%20")); }
    }
    return "";
  }
  function load(src, done) {
    var s = document.createElement("script");
    s.src = joinUrl(base_url, src);
    s.onload = done;
    document.head.appendChild(s);
  }
  var index = null, docs = {};
  function build() {
    var data = window.__mkdocs_search_index;
    data.docs.forEach(function (d) { docs[d.location] = d; });
    index = lunr(function () {
      this.ref("location");
      this.field("title", {boost: 10});
      this.field("text");
      data.docs.forEach(function (d) { this.add(d); }, this);
    });
  }
  function search(query) {
    var found;
    try { found = index.search(query); } catch (e) {
      found = index.search(query.replace(/[^\w\s]/g, " "));
    }
    return found.map(function (r) {
      var d = docs[r.ref];
      return {location: d.location, title: d.title, summary: (d.text || "").substring(0, 200)};
    });
  }
  function show(results) {
    var box = document.getElementById("mkdocs-search-results");
    if (!box) { return; }
    box.innerHTML = "";
    if (!results.length) {
      box.insertAdjacentHTML("beforeend", "<p>" + (box.getAttribute("data-no-results-text") || "No results found") + "</p>");
      return;
    }
    results.forEach(function (r) {
      box.insertAdjacentHTML("beforeend", '<article><h3><a href="' + joinUrl(base_url, r.location) + '">' +
        escapeHtml(r.title) + "</a></h3><p>" + escapeHtml(r.summary) + "</p></article>");
    });
  }
  function doSearch() {
    var input = document.getElementById("mkdocs-search-query");
    var q = input ? input.value.trim() : "";
    show(q.length > 1 ? search(q) : []);
  }
  load("search/lunr.js", function () {
    load("search/search_index.js", function () {
      build();
      var input = document.getElementById("mkdocs-search-query");
      if (input) { input.addEventListener("keyup", doSearch); }
      var term = termFromLocation();
      if (term && input) { input.value = term; doSearch(); }
    });
  });
})();
"""


def on_post_build(config: Any) -> None:
    search = Path(config["site_dir"]) / "search"
    index = search / "search_index.json"
    if not index.is_file():
        return
    (search / "search_index.js").write_text("window.__mkdocs_search_index = " + index.read_text(encoding="utf-8")
                                            + ";\n", encoding="utf-8")
    (search / "main.js").write_text(MAIN_JS, encoding="utf-8")
