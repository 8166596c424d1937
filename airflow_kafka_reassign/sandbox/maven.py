"""Fetch an Apache Kafka broker classpath from Maven Central, and pick its version.

Kafka's broker is not packaged for PyPI, npm or Debian, but every release is published to
Maven Central. This module writes a tiny pom depending on ``org.apache.kafka:kafka_2.13``,
``org.apache.kafka:kafka-tools`` (for ``kafka-reassign-partitions``) and the log4j2 SLF4J
binding, and lets ``mvn dependency:copy-dependencies`` put every runtime jar into one
directory: that directory, used as ``-cp '<libs>/*'``, runs brokers and tools.

Cache layout (``$XDG_CACHE_HOME`` or ``~/.cache``)::

    airflow-kafka-reassign/kafka/
        default-version            the default version resolved once (no network afterwards)
        <V>/pom.xml                the pom used for <V>
        <V>/libs/                  the jars; renamed into place only once complete
        <V>/libs/.complete         marker (JSON) written before the rename
        <V>/.lock                  serialises concurrent fetches of <V>

Version choice (first match wins):

1. an explicit version (``--kafka-version`` / ``AKR_KAFKA_VERSION``), which must be >= 3.9 (KRaft with
   KIP-853; below 4.1 the brokers lack KIP-860, so reassignments need ``rf_guard="client"``); in ZooKeeper mode
   (``--zookeeper``) a 3.x release >= :data:`ZOOKEEPER_MIN_VERSION`, by default :data:`ZOOKEEPER_DEFAULT_VERSION`
   (ZooKeeper mode was removed in Kafka 4.0; the 3.x classpath holds the ZooKeeper server Kafka depends on);
2. the version recorded in ``default-version`` when its jars are cached;
3. the newest 4.x release >= 4.1 listed in Maven Central's ``maven-metadata.xml`` whose
   dependencies resolve (a listed release may lack an artifact, e.g. 4.4.0 without
   ``kafka-tools-api``), tried newest first;
4. when Maven Central cannot be reached, the newest version already cached.

Delete ``default-version`` to make the next run look for a newer release.

The pure functions (:func:`parse_version`, :func:`parse_metadata_versions`,
:func:`default_candidates`, :func:`newest`, :func:`check_pinned_version`) need no network.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

METADATA_URL = "https://repo.maven.apache.org/maven2/org/apache/kafka/kafka_2.13/maven-metadata.xml"
MIN_VERSION: tuple[int, ...] = (4, 1)
#: The oldest version an explicit pin may ask for: the oldest line ``make compat`` runs (tests/compat/airflow_line.py).
PINNED_MIN_VERSION: tuple[int, ...] = (3, 9)
DEFAULT_MAJOR = 4
VERSION_ENV = "AKR_KAFKA_VERSION"
#: ZooKeeper mode (``up --zookeeper``): the oldest line the sandbox runs, the first without it, and its default. 2.8 is
#: below the provider's floor (3.0, core/guards/kafka_line.py): a 2.8 sandbox shows the provider refusing it.
ZOOKEEPER_MIN_VERSION: tuple[int, ...] = (2, 8)
ZOOKEEPER_REMOVED_IN: tuple[int, ...] = (4, 0)
ZOOKEEPER_DEFAULT_VERSION = "3.9.1"
#: The ZooKeeper server's jar, a runtime dependency of Kafka 3.x's ``kafka_2.13``.
ZOOKEEPER_ARTIFACT = "zookeeper"
#: log4j2's binding for SLF4J 1.x, which Kafka 4.x logs through. Its version is made equal to
#: the log4j-core version that Kafka itself pulls (checked after resolution).
LOG4J_BINDING_ARTIFACT = "log4j-slf4j-impl"
LOG4J_BINDING_GUESS = "2.25.4"
COMPLETE_MARKER = ".complete"
DEFAULT_VERSION_FILE = "default-version"

_RELEASE_RE = re.compile(r"^\d+(\.\d+){1,3}$")


class KafkaFetchError(RuntimeError):
    """Kafka's jars could not be resolved (bad version, no network and no cache, mvn failure)."""


@dataclass(frozen=True)
class KafkaDistribution:
    """A resolved Kafka classpath: ``java -cp '<libs_dir>/*' kafka.Kafka ...`` runs a broker."""

    version: str
    libs_dir: Path

    @property
    def classpath(self) -> str:
        """The JVM class path (a wildcard the ``java`` launcher expands itself)."""
        return str(self.libs_dir / "*")


# --------------------------------------------------------------------------- pure logic


def parse_version(text: str) -> tuple[int, ...] | None:
    """Return a release version as a tuple of ints, or ``None`` for anything else.

    Pre-releases and other qualifiers (``4.0.0-rc1``, ``3.0.0-SNAPSHOT``) give ``None``.
    """
    text = text.strip()
    if not _RELEASE_RE.match(text):
        return None
    return tuple(int(part) for part in text.split("."))


def parse_metadata_versions(xml_text: str) -> list[str]:
    """Return the ``<versions><version>`` entries of a Maven ``maven-metadata.xml``, in order."""
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError as exc:
        raise KafkaFetchError(f"maven-metadata.xml is not valid XML: {exc}") from exc
    return [v.text.strip() for v in root.iterfind("./versioning/versions/version") if v.text]


def default_candidates(versions: Iterable[str]) -> list[str]:
    """Versions the default may pick: releases of the current major (4.x) >= 4.1, newest first."""
    parsed = {}
    for version in versions:
        key = parse_version(version)
        if key is not None and key[0] == DEFAULT_MAJOR and key >= MIN_VERSION:
            parsed[version] = key
    return sorted(parsed, key=lambda v: parsed[v], reverse=True)


def newest(versions: Iterable[str]) -> str | None:
    """The newest release among ``versions`` (>= 4.1), or ``None``."""
    usable = [v for v in versions if (k := parse_version(v)) is not None and k >= MIN_VERSION]
    return max(usable, key=lambda v: parse_version(v) or ()) if usable else None


def check_pinned_version(version: str, *, zookeeper: bool = False) -> str:
    """Validate an explicitly requested version; return it stripped.

    Raises :class:`KafkaFetchError` unless it is a release (no qualifier) and at least 3.9 (KRaft with a
    static quorum of combined nodes, as the sandbox runs it). Below 4.1 the brokers lack KIP-860, first
    shipped in Kafka 4.1: a warning says that reassignments need ``rf_guard="client"`` there. With ``zookeeper``
    (ZooKeeper mode) a 3.x release from :data:`ZOOKEEPER_MIN_VERSION` on: Kafka 4.0 removed ZooKeeper mode.
    """
    version = version.strip()
    key = parse_version(version)
    if key is None:
        raise KafkaFetchError(
            f"Kafka version {version!r} is not a release version such as 4.3.1 "
            f"(set by --kafka-version or {VERSION_ENV})"
        )
    if zookeeper:
        if not ZOOKEEPER_MIN_VERSION <= key < ZOOKEEPER_REMOVED_IN:
            raise KafkaFetchError(
                f"Kafka {version} cannot run in ZooKeeper mode here: the sandbox runs ZooKeeper-mode Kafka "
                f"{'.'.join(map(str, ZOOKEEPER_MIN_VERSION))} to 3.9 (Kafka 4.0 removed ZooKeeper mode); pick a 3.x "
                f"--kafka-version / {VERSION_ENV}, or drop --zookeeper for KRaft")
        return version
    if key < PINNED_MIN_VERSION:
        raise KafkaFetchError(
            f"Kafka version {version} is too old: the sandbox needs Apache Kafka >= "
            f"{'.'.join(map(str, PINNED_MIN_VERSION))} (KRaft); "
            f"pick a newer --kafka-version / {VERSION_ENV}"
        )
    if key < MIN_VERSION:
        log.warning("Kafka %s has no KIP-860 on the broker (4.1+): reassignments need rf_guard=\"client\"", version)
    return version


def render_pom(version: str, binding_version: str) -> str:
    """The pom whose runtime dependencies are a broker + tools classpath for ``version``.

    Kafka 3.x logs through reload4j (log4j 1): its SLF4J binding is left out. Below 4.1 Kafka's poms bring no
    log4j2 at all (4.0's binary distribution ships the jars, its kafka-server pom does not declare them; 4.1's
    does): log4j2 (core and API at ``binding_version``) is added, so that every line logs through the same log4j2
    configuration as from 4.1 on.
    """
    key = parse_version(version) or (0,)
    no_reload4j = ("\n      <exclusions><exclusion><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId>"
                   "</exclusion></exclusions>") if key < (4, 0) else ""
    log4j2 = "".join(f"""
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>{artifact}</artifactId>
      <version>{binding_version}</version>
    </dependency>""" for artifact in ("log4j-api", "log4j-core")) if key < (4, 1) else ""
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by airflow_kafka_reassign.sandbox.maven: the classpath of a local Kafka sandbox. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>airflow-kafka-reassign.sandbox</groupId>
  <artifactId>kafka-sandbox-classpath</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>{version}</version>{no_reload4j}
    </dependency>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka-tools</artifactId>
      <version>{version}</version>{no_reload4j}
    </dependency>{log4j2}
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>{LOG4J_BINDING_ARTIFACT}</artifactId>
      <version>{binding_version}</version>
      <exclusions>
        <!-- keep the log4j-api/log4j-core versions that Kafka itself asks for -->
        <exclusion><groupId>org.apache.logging.log4j</groupId><artifactId>*</artifactId></exclusion>
        <exclusion><groupId>org.slf4j</groupId><artifactId>*</artifactId></exclusion>
      </exclusions>
    </dependency>
  </dependencies>
</project>
"""


def jar_version(libs: Iterable[str], artifact: str) -> str | None:
    """Version of ``<artifact>-<version>.jar`` among file names ``libs``, if present."""
    pattern = re.compile(rf"^{re.escape(artifact)}-(\d[^/]*)\.jar$")
    for name in libs:
        match = pattern.match(name)
        if match:
            return match.group(1)
    return None


# --------------------------------------------------------------------------- cache


def cache_root() -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/airflow-kafka-reassign/kafka``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "airflow-kafka-reassign" / "kafka"


def cached_distribution(version: str, root: Path | None = None) -> KafkaDistribution | None:
    """The cached, complete classpath of ``version``, or ``None``."""
    libs = (root or cache_root()) / version / "libs"
    if (libs / COMPLETE_MARKER).is_file():
        return KafkaDistribution(version, libs)
    return None


def cached_versions(root: Path | None = None) -> list[str]:
    """Versions whose classpath is completely cached."""
    root = root or cache_root()
    if not root.is_dir():
        return []
    return [p.name for p in root.iterdir() if p.is_dir() and cached_distribution(p.name, root)]


def read_default_version(root: Path | None = None) -> str | None:
    """The recorded default version, if any."""
    path = (root or cache_root()) / DEFAULT_VERSION_FILE
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    return text if parse_version(text) else None


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created), shared by the sandbox's caches."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# --------------------------------------------------------------------------- fetching


def fetch_metadata_versions(url: str = METADATA_URL, timeout: float = 15.0) -> list[str]:
    """Kafka versions listed in Maven Central's metadata (network)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (fixed https URL)
            body = resp.read().decode("utf-8")
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise KafkaFetchError(f"cannot read {url}: {exc}") from exc
    return parse_metadata_versions(body)


def _run_mvn(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaFetchError("Maven ('mvn') is not on PATH: it is needed to fetch Kafka's jars")
    try:
        return subprocess.run(
            [mvn, "-B", "-q", *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise KafkaFetchError(f"mvn did not finish within {timeout:.0f} s") from exc


_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
_UNRESOLVED_RE = re.compile(
    r"(?:following artifacts could not be resolved|Could not find artifact|"
    r"Could not resolve dependencies)[^:]*: (.*?)(?:: |$)"
)


def mvn_error_summary(output: str) -> str:
    """One line saying why Maven failed (the unresolved artifacts when it says so)."""
    lines = [_ANSI_RE.sub("", line).strip() for line in output.splitlines()]
    errors = [line.removeprefix("[ERROR]").strip() for line in lines if line.startswith("[ERROR]")]
    errors = [line for line in errors if line]
    for line in errors:
        match = _UNRESOLVED_RE.search(line)
        if match:
            return f"unresolved: {match.group(1)}"
    if errors:
        return errors[0][:300]
    return (lines[-1] if lines else "no output")[:300]


def _copy_dependencies(version: str, vdir: Path, out: Path, binding: str, timeout: float) -> None:
    pom = vdir / "pom.xml"
    _write_atomic(pom, render_pom(version, binding))
    proc = _run_mvn(
        [
            "-Dstyle.color=never",
            "-f", str(pom),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={out}",
        ],
        timeout,
    )  # fmt: skip
    if proc.returncode != 0:
        output = proc.stdout + "\n" + proc.stderr
        raise KafkaFetchError(
            f"mvn could not resolve Kafka {version} ({mvn_error_summary(output)})\n"
            + "\n".join(_ANSI_RE.sub("", output).strip().splitlines()[-15:])
        )


def fetch(version: str, root: Path | None = None, timeout: float = 900.0) -> KafkaDistribution:
    """Return the classpath of Kafka ``version``, downloading it with Maven if not cached.

    The jars are copied into a temporary directory that is renamed to ``<V>/libs`` only once
    complete, so an interrupted download never leaves a partial cache. Raises
    :class:`KafkaFetchError` when Maven cannot resolve every artifact.
    """
    root = root or cache_root()
    cached = cached_distribution(version, root)
    if cached:
        return cached
    vdir = root / version
    with file_lock(vdir / ".lock"):
        cached = cached_distribution(version, root)  # another process may have finished it
        if cached:
            return cached
        libs = vdir / "libs"
        for stale in [*vdir.glob("libs.tmp-*"), libs]:  # we hold the lock: leftovers are dead
            if stale.exists():
                shutil.rmtree(stale, ignore_errors=True)
        started = time.monotonic()
        log.info("fetching Apache Kafka %s jars with Maven into %s", version, libs)
        tmp = Path(tempfile.mkdtemp(dir=vdir, prefix="libs.tmp-"))
        try:
            binding = LOG4J_BINDING_GUESS
            _copy_dependencies(version, vdir, tmp, binding, timeout)
            names = os.listdir(tmp)
            core = jar_version(names, "log4j-core")
            if core is None:
                raise KafkaFetchError(f"Kafka {version} did not pull log4j-core: cannot log")
            if core != binding:
                log.info("log4j-core is %s: re-resolving with the matching SLF4J binding", core)
                shutil.rmtree(tmp)
                tmp.mkdir()
                binding = core
                _copy_dependencies(version, vdir, tmp, binding, timeout)
                names = os.listdir(tmp)
            for required in (f"kafka_2.13-{version}.jar", f"kafka-tools-{version}.jar",
                             f"{LOG4J_BINDING_ARTIFACT}-{binding}.jar"):  # fmt: skip
                if required not in names:
                    raise KafkaFetchError(f"{required} missing after resolving Kafka {version}")
            marker = {
                "kafka_version": version,
                "log4j_version": binding,
                "jars": len(names),
                "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }
            (tmp / COMPLETE_MARKER).write_text(json.dumps(marker, indent=2) + "\n")
            tmp.chmod(0o755)
            os.rename(tmp, libs)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    log.info("fetched Kafka %s (%d jars) in %.1f s", version, len(names), time.monotonic() - started)
    return KafkaDistribution(version, libs)


def resolve(
    version: str | None = None,
    *,
    root: Path | None = None,
    metadata_url: str = METADATA_URL,
    timeout: float = 900.0,
    zookeeper: bool = False,
) -> KafkaDistribution:
    """Resolve the Kafka classpath to use (see the module docstring for the order of choice).

    ``version`` (or ``$AKR_KAFKA_VERSION`` when ``None``) pins a version. The choice and its
    reason are logged (the CLI sends logs to stderr). ``zookeeper``: a ZooKeeper-mode classpath (a 3.x release,
    :data:`ZOOKEEPER_DEFAULT_VERSION` unless pinned) that holds the ZooKeeper server's jar.
    """
    root = root or cache_root()
    version = version or os.environ.get(VERSION_ENV) or None
    if zookeeper:
        if version is None:
            log.info("Kafka %s: the default of ZooKeeper mode (pin another 3.x with --kafka-version/%s)",
                     ZOOKEEPER_DEFAULT_VERSION, VERSION_ENV)
        version = check_pinned_version(version or ZOOKEEPER_DEFAULT_VERSION, zookeeper=True)
        dist = fetch(version, root, timeout)
        if jar_version(os.listdir(dist.libs_dir), ZOOKEEPER_ARTIFACT) is None:
            raise KafkaFetchError(f"Kafka {version}'s classpath in {dist.libs_dir} holds no {ZOOKEEPER_ARTIFACT}-*.jar: "
                                  "it cannot run a ZooKeeper server")
        return dist
    if version:
        version = check_pinned_version(version)
        log.info("Kafka %s: pinned by --kafka-version/%s", version, VERSION_ENV)
        return fetch(version, root, timeout)

    recorded = read_default_version(root)
    if recorded and (dist := cached_distribution(recorded, root)):
        log.info(
            "Kafka %s: default recorded in %s (delete it to look for a newer release)",
            recorded, root / DEFAULT_VERSION_FILE,
        )  # fmt: skip
        return dist

    try:
        listed = fetch_metadata_versions(metadata_url)
    except KafkaFetchError as exc:
        fallback = newest(cached_versions(root))
        if fallback is None:
            raise KafkaFetchError(
                f"{exc}; no Kafka is cached in {root} either: connect to Maven Central once "
                f"or pin a cached version with {VERSION_ENV}"
            ) from exc
        log.warning("Kafka %s: Maven Central unreachable (%s); newest cached version", fallback, exc)
        return cached_distribution(fallback, root)  # type: ignore[return-value]

    candidates = default_candidates(listed)
    if not candidates:
        raise KafkaFetchError(f"{metadata_url} lists no Kafka 4.x release >= 4.1")
    failures: list[str] = []
    for candidate in candidates:
        try:
            dist = fetch(candidate, root, timeout)
        except KafkaFetchError as exc:
            first_line = str(exc).splitlines()[0]
            log.warning("Kafka %s is listed but does not resolve (%s); trying the next", candidate,
                        first_line)  # fmt: skip
            failures.append(f"{candidate}: {first_line}")
            continue
        skipped = f" (newer but unresolvable: {', '.join(failures)})" if failures else ""
        log.info("Kafka %s: newest resolvable 4.x release on Maven Central%s", candidate, skipped)
        _write_atomic(root / DEFAULT_VERSION_FILE, candidate + "\n")
        return dist
    raise KafkaFetchError("no listed Kafka release resolved:\n" + "\n".join(failures))
