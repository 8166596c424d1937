"""Kafka version choice and the jar cache of the sandbox, without network or Maven."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airflow_kafka_reassign.sandbox import maven
from airflow_kafka_reassign.sandbox.nodes import controller_ids, rack_of

METADATA = """<?xml version="1.0" encoding="UTF-8"?>
<metadata>
  <groupId>org.apache.kafka</groupId>
  <artifactId>kafka_2.13</artifactId>
  <versioning>
    <latest>4.4.0</latest>
    <release>4.4.0</release>
    <versions>
      <version>3.9.1</version>
      <version>4.0.0-rc1</version>
      <version>4.0.2</version>
      <version>4.1.0</version>
      <version>4.1.2</version>
      <version>4.10.0</version>
      <version>4.2.0</version>
      <version>4.3.1</version>
      <version>4.4.0-rc2</version>
      <version>4.4.0</version>
      <version>5.0.0</version>
    </versions>
  </versioning>
</metadata>
"""


# ------------------------------------------------------------------------ pure logic


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4.3.1", (4, 3, 1)),
        (" 4.1 ", (4, 1)),
        ("4.10.0", (4, 10, 0)),
        ("4.4.0-rc1", None),
        ("3.0.0-SNAPSHOT", None),
        ("latest", None),
        ("", None),
    ],
)
def test_parse_version(text: str, expected: tuple[int, ...] | None) -> None:
    assert maven.parse_version(text) == expected


def test_parse_metadata_versions_keeps_the_listed_order() -> None:
    versions = maven.parse_metadata_versions(METADATA)
    assert versions[:3] == ["3.9.1", "4.0.0-rc1", "4.0.2"]
    assert len(versions) == 11


def test_parse_metadata_rejects_garbage() -> None:
    with pytest.raises(maven.KafkaFetchError, match="not valid XML"):
        maven.parse_metadata_versions("<html>503")


def test_default_candidates_are_4x_releases_from_4_1_newest_first() -> None:
    candidates = maven.default_candidates(maven.parse_metadata_versions(METADATA))
    # numeric order (4.10 > 4.4), no pre-release, nothing below 4.1, no other major
    assert candidates == ["4.10.0", "4.4.0", "4.3.1", "4.2.0", "4.1.2", "4.1.0"]


def test_newest() -> None:
    assert maven.newest(["4.1.0", "4.3.1", "4.10.0", "4.2.0-rc1", "4.0.2"]) == "4.10.0"
    assert maven.newest(["4.0.2", "junk"]) is None
    assert maven.newest([]) is None


@pytest.mark.parametrize("version", ["3.9.1", "4.0.2", "4.1.0", "4.3.1", "5.0.0", " 4.2.0 "])
def test_pinned_version_accepted(version: str) -> None:
    assert maven.check_pinned_version(version) == version.strip()


@pytest.mark.parametrize("version", ["3.8.1", "3.0.0", "2.8.0"])
def test_pinned_version_too_old_is_refused_clearly(version: str) -> None:
    with pytest.raises(maven.KafkaFetchError, match=re.escape(">= 3.9")):
        maven.check_pinned_version(version)


@pytest.mark.parametrize("version", ["4.4.0-rc1", "latest", "4.x"])
def test_pinned_version_must_be_a_release(version: str) -> None:
    with pytest.raises(maven.KafkaFetchError, match="not a release version"):
        maven.check_pinned_version(version)


def test_render_pom_names_broker_tools_and_binding() -> None:
    pom = maven.render_pom("4.3.1", "2.25.4")
    for artifact in ("kafka_2.13", "kafka-tools", "log4j-slf4j-impl"):
        assert f"<artifactId>{artifact}</artifactId>" in pom
    assert pom.count("<version>4.3.1</version>") == 3  # project, kafka_2.13, kafka-tools
    assert "<version>2.25.4</version>" in pom


@pytest.mark.parametrize(("version", "log4j2", "reload4j_excluded"),
                         [("3.9.1", True, True), ("4.0.2", True, False), ("4.1.0", False, False), ("4.4.0", False, False)])
def test_render_pom_adds_log4j2_where_kafkas_poms_bring_none(version: str, log4j2: bool, reload4j_excluded: bool) -> None:
    """kafka-server's pom declares log4j-core from 4.1 on (4.0.2's does not: 'did not pull log4j-core' in the
    py3.11 x Airflow 3.1 x Kafka 4.0.2 cell); 3.x brings reload4j's binding instead, left out."""
    pom = maven.render_pom(version, "2.25.4")
    assert ("<artifactId>log4j-core</artifactId>" in pom) is log4j2
    assert ("<artifactId>log4j-api</artifactId>" in pom) is log4j2
    assert ("<artifactId>slf4j-reload4j</artifactId>" in pom) is reload4j_excluded


def test_jar_version() -> None:
    names = ["log4j-core-2.25.4.jar", "log4j-core-api-9.jar", "kafka_2.13-4.3.1.jar"]
    assert maven.jar_version(names, "log4j-core") == "2.25.4"
    assert maven.jar_version(names, "kafka_2.13") == "4.3.1"
    assert maven.jar_version(names, "log4j-api") is None


def test_mvn_error_summary_names_the_unresolved_artifacts() -> None:
    output = (
        "\x1b[0m[ERROR] Failed to execute goal on project x: Could not resolve dependencies for "
        "project a:b:pom:4.4.0: The following artifacts could not be resolved: "
        "org.apache.kafka:kafka-tools-api:jar:4.4.0, org.apache.kafka:kafka-tools:jar:4.4.0: "
        "org.apache.kafka:kafka-tools-api:jar:4.4.0 was not found in https://repo -> [Help 1]\n"
        "[ERROR] \n[ERROR] To see the full stack trace of the errors, re-run Maven with -e.\n"
    )
    assert maven.mvn_error_summary(output) == (
        "unresolved: org.apache.kafka:kafka-tools-api:jar:4.4.0, org.apache.kafka:kafka-tools:jar:4.4.0"
    )
    assert maven.mvn_error_summary("[ERROR] something else broke\n") == "something else broke"


# ------------------------------------------------------------------------ cache and choice


def _complete(root: Path, version: str) -> maven.KafkaDistribution:
    libs = root / version / "libs"
    libs.mkdir(parents=True)
    (libs / maven.COMPLETE_MARKER).write_text("{}")
    return maven.KafkaDistribution(version, libs)


def test_cache_root_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert maven.cache_root() == tmp_path / "airflow-kafka-reassign" / "kafka"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert maven.cache_root() == tmp_path / "home" / ".cache" / "airflow-kafka-reassign" / "kafka"


def test_only_complete_versions_count_as_cached(tmp_path: Path) -> None:
    _complete(tmp_path, "4.2.0")
    (tmp_path / "4.3.1" / "libs").mkdir(parents=True)  # no marker: an interrupted fetch
    (tmp_path / "4.4.0").mkdir()
    assert maven.cached_versions(tmp_path) == ["4.2.0"]
    assert maven.cached_distribution("4.3.1", tmp_path) is None


class FakeNetwork:
    """Stands in for Maven Central and mvn: records what was asked."""

    def __init__(self, root: Path, listed: list[str] | None, resolvable: set[str]) -> None:
        self.root, self.listed, self.resolvable = root, listed, resolvable
        self.metadata_reads = 0
        self.fetched: list[str] = []

    def metadata(self, url: str = maven.METADATA_URL, timeout: float = 15.0) -> list[str]:
        self.metadata_reads += 1
        if self.listed is None:
            raise maven.KafkaFetchError("cannot read metadata: network unreachable")
        return self.listed

    def fetch(
        self, version: str, root: Path | None = None, timeout: float = 900.0
    ) -> maven.KafkaDistribution:
        self.fetched.append(version)
        cached = maven.cached_distribution(version, root)
        if cached:
            return cached
        if version not in self.resolvable:
            raise maven.KafkaFetchError(f"mvn could not resolve Kafka {version} (unresolved: x)\nlog")
        return _complete(root or self.root, version)


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(maven.VERSION_ENV, raising=False)


def _install(monkeypatch: pytest.MonkeyPatch, net: FakeNetwork) -> None:
    monkeypatch.setattr(maven, "fetch_metadata_versions", net.metadata)
    monkeypatch.setattr(maven, "fetch", net.fetch)


def test_default_skips_a_listed_release_that_does_not_resolve(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, offline: None, caplog: pytest.LogCaptureFixture
) -> None:
    net = FakeNetwork(tmp_path, ["4.1.0", "4.3.1", "4.4.0", "4.4.0-rc1", "3.9.1"], {"4.3.1", "4.1.0"})
    _install(monkeypatch, net)
    caplog.set_level("INFO", logger=maven.__name__)

    dist = maven.resolve(root=tmp_path)

    assert dist.version == "4.3.1"
    assert net.fetched == ["4.4.0", "4.3.1"]
    assert maven.read_default_version(tmp_path) == "4.3.1"
    assert "4.4.0 is listed but does not resolve" in caplog.text
    assert "newest resolvable" in caplog.text


def test_recorded_default_is_reused_without_network(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, offline: None
) -> None:
    _complete(tmp_path, "4.3.1")
    (tmp_path / maven.DEFAULT_VERSION_FILE).write_text("4.3.1\n")
    net = FakeNetwork(tmp_path, ["4.9.0"], {"4.9.0"})
    _install(monkeypatch, net)

    assert maven.resolve(root=tmp_path).version == "4.3.1"
    assert net.metadata_reads == 0
    assert net.fetched == []


def test_recorded_default_whose_jars_vanished_is_resolved_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, offline: None
) -> None:
    (tmp_path).mkdir(exist_ok=True)
    (tmp_path / maven.DEFAULT_VERSION_FILE).write_text("4.3.1\n")
    net = FakeNetwork(tmp_path, ["4.3.1", "4.2.0"], {"4.3.1"})
    _install(monkeypatch, net)

    assert maven.resolve(root=tmp_path).version == "4.3.1"
    assert net.metadata_reads == 1


def test_unreachable_network_falls_back_to_the_newest_cached_version(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, offline: None
) -> None:
    _complete(tmp_path, "4.1.2")
    _complete(tmp_path, "4.3.0")
    net = FakeNetwork(tmp_path, None, set())
    _install(monkeypatch, net)

    assert maven.resolve(root=tmp_path).version == "4.3.0"
    assert net.fetched == []


def test_unreachable_network_and_empty_cache_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, offline: None
) -> None:
    _install(monkeypatch, FakeNetwork(tmp_path, None, set()))
    with pytest.raises(maven.KafkaFetchError, match="no Kafka is cached"):
        maven.resolve(root=tmp_path)


def test_nothing_resolvable_lists_every_failure(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, offline: None
) -> None:
    _install(monkeypatch, FakeNetwork(tmp_path, ["4.2.0", "4.1.0"], set()))
    with pytest.raises(maven.KafkaFetchError, match=r"(?s)4\.2\.0.*4\.1\.0"):
        maven.resolve(root=tmp_path)


def test_pinned_version_wins_over_the_recorded_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, offline: None
) -> None:
    _complete(tmp_path, "4.3.1")
    (tmp_path / maven.DEFAULT_VERSION_FILE).write_text("4.3.1\n")
    net = FakeNetwork(tmp_path, ["4.3.1"], {"4.2.0"})
    _install(monkeypatch, net)

    assert maven.resolve("4.2.0", root=tmp_path).version == "4.2.0"
    monkeypatch.setenv(maven.VERSION_ENV, "4.1.0")
    net.resolvable.add("4.1.0")
    assert maven.resolve(root=tmp_path).version == "4.1.0"
    assert net.metadata_reads == 0
    assert maven.read_default_version(tmp_path) == "4.3.1"


def test_pinned_version_too_old_fails_before_any_download(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, offline: None
) -> None:
    net = FakeNetwork(tmp_path, ["3.8.1"], {"3.8.1"})
    _install(monkeypatch, net)
    monkeypatch.setenv(maven.VERSION_ENV, "3.8.1")
    with pytest.raises(maven.KafkaFetchError, match=re.escape(">= 3.9")):
        maven.resolve(root=tmp_path)
    assert net.fetched == []


# ------------------------------------------------------------------------ fetch (fake mvn)


class FakeMvn:
    """Plays ``mvn dependency:copy-dependencies``: writes jar names into -DoutputDirectory."""

    def __init__(self, log4j_core: str = maven.LOG4J_BINDING_GUESS, fail: bool = False) -> None:
        self.log4j_core, self.fail = log4j_core, fail
        self.poms: list[str] = []

    def __call__(self, args: list[str], timeout: float) -> object:
        import subprocess

        pom = Path(args[args.index("-f") + 1]).read_text()
        self.poms.append(pom)
        out = Path(next(a.split("=", 1)[1] for a in args if a.startswith("-DoutputDirectory=")))
        version = re.search(r"kafka_2\.13</artifactId>\s*<version>([^<]+)", pom).group(1)  # type: ignore[union-attr]
        binding = re.search(r"log4j-slf4j-impl</artifactId>\s*<version>([^<]+)", pom).group(1)  # type: ignore[union-attr]
        out.mkdir(parents=True, exist_ok=True)
        for name in (f"kafka_2.13-{version}.jar", f"kafka-tools-{version}.jar",
                     f"log4j-core-{self.log4j_core}.jar", f"log4j-slf4j-impl-{binding}.jar"):  # fmt: skip
            (out / name).write_text("jar")
        if self.fail:
            return subprocess.CompletedProcess(args, 1, "[ERROR] Could not find artifact x:y:jar:1", "")
        return subprocess.CompletedProcess(args, 0, "", "")


def test_fetch_commits_the_libs_dir_only_when_complete(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = FakeMvn()
    monkeypatch.setattr(maven, "_run_mvn", fake)

    dist = maven.fetch("4.3.1", tmp_path)

    assert dist.libs_dir == tmp_path / "4.3.1" / "libs"
    assert (dist.libs_dir / maven.COMPLETE_MARKER).is_file()
    assert (dist.libs_dir / "log4j-slf4j-impl-2.25.4.jar").is_file()
    assert dist.classpath == f"{dist.libs_dir}/*"
    assert len(fake.poms) == 1
    assert not list((tmp_path / "4.3.1").glob("libs.tmp-*"))
    # cached now: no second mvn run
    assert maven.fetch("4.3.1", tmp_path) == dist
    assert len(fake.poms) == 1


def test_fetch_matches_the_binding_to_kafkas_log4j_core(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = FakeMvn(log4j_core="2.26.0")
    monkeypatch.setattr(maven, "_run_mvn", fake)

    dist = maven.fetch("4.9.0", tmp_path)

    assert len(fake.poms) == 2
    assert "<version>2.26.0</version>" in fake.poms[1]
    assert (dist.libs_dir / "log4j-slf4j-impl-2.26.0.jar").is_file()
    assert not (dist.libs_dir / "log4j-slf4j-impl-2.25.4.jar").exists()


def test_failed_fetch_leaves_no_partial_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(maven, "_run_mvn", FakeMvn(fail=True))
    with pytest.raises(maven.KafkaFetchError, match="x:y:jar:1"):
        maven.fetch("4.4.0", tmp_path)
    assert not (tmp_path / "4.4.0" / "libs").exists()
    assert not list((tmp_path / "4.4.0").glob("libs.tmp-*"))
    assert maven.cached_versions(tmp_path) == []


def test_stale_temporary_dirs_of_a_killed_fetch_are_removed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    stale = tmp_path / "4.3.1" / "libs.tmp-killed"
    stale.mkdir(parents=True)
    (stale / "half.jar").write_text("")
    monkeypatch.setattr(maven, "_run_mvn", FakeMvn())
    maven.fetch("4.3.1", tmp_path)
    assert not stale.exists()


# ------------------------------------------------------------------------ topology naming


def test_racks_are_assigned_round_robin() -> None:
    assert [rack_of(i, 3) for i in range(1, 6)] == ["r1", "r2", "r3", "r1", "r2"]
    assert [rack_of(i, 0) for i in range(1, 3)] == [None, None]
    assert [rack_of(i, 1) for i in range(1, 3)] == ["r1", "r1"]


def test_at_most_three_controllers() -> None:
    assert controller_ids(1) == [1]
    assert controller_ids(2) == [1, 2]
    assert controller_ids(5) == [1, 2, 3]
