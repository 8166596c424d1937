"""Class Data Sharing archives: make the sandbox's JVMs start about twice as fast.

A Kafka broker spends most of its start-up CPU loading and verifying ~5000 classes; with
2 cores and 5 brokers starting at once that dominates ``up``. A *dynamic* CDS archive
(``-XX:ArchiveClassesAtExit``, Java 13+) taken once from a throwaway one-node sandbox holds
those classes pre-parsed and pre-verified; later JVMs map it with ``-XX:SharedArchiveFile``.

Archives live next to the jars, per JVM build (an archive only fits the JVM that wrote it)::

    <cache>/kafka/<V>/cds/<jvm-key>/broker.jsa   for brokers and kafka-storage format
    <cache>/kafka/<V>/cds/<jvm-key>/tools.jsa    for kafka-reassign-partitions
    <cache>/kafka/<V>/cds/<jvm-key>/failed       why training failed (retried after a day)

Everything here is best effort: with a missing, stale or foreign archive the JVM silently
runs without it (``-Xshare:auto``, CDS logging off). ``AKR_SANDBOX_CDS=0`` disables it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from airflow_kafka_reassign.sandbox.maven import KafkaDistribution, file_lock

log = logging.getLogger(__name__)

ENV_SWITCH = "AKR_SANDBOX_CDS"
BROKER_ARCHIVE = "broker.jsa"
TOOLS_ARCHIVE = "tools.jsa"
FAILED_MARKER = "failed"
RETRY_AFTER_S = 24 * 3600
#: keep the JVM quiet about CDS (a stale archive must not print on a tool's stdout)
QUIET = "-Xlog:cds*=off"


def enabled() -> bool:
    """Whether CDS is wanted (``AKR_SANDBOX_CDS`` is not ``0``/``false``/``no``)."""
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def jvm_key(java: str) -> str:
    """A short key of the JVM build at ``java`` (its real path, size and mtime)."""
    real = os.path.realpath(java)
    try:
        st = os.stat(real)
        ident = f"{real}:{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        ident = real
    return hashlib.sha256(ident.encode()).hexdigest()[:12]


def archive_dir(dist: KafkaDistribution, java: str) -> Path:
    """Directory of the archives of ``dist`` for the JVM ``java``."""
    return dist.libs_dir.parent / "cds" / jvm_key(java)


def use_opts(archive: Path | None) -> list[str]:
    """JVM options mapping ``archive`` (none when it is ``None`` or missing)."""
    if archive is None or not archive.is_file():
        return []
    return [f"-XX:SharedArchiveFile={archive}", QUIET]


def dump_opts(target: Path) -> list[str]:
    """JVM options writing a dynamic archive of the loaded classes to ``target`` at exit."""
    return [f"-XX:ArchiveClassesAtExit={target}", QUIET]




def ensure_archives(
    dist: KafkaDistribution,
    java: str,
    train: Callable[[Path, Path, Path], None],
) -> tuple[Path | None, Path | None]:
    """Return ``(broker_archive, tools_archive)``, training them first if needed.

    ``train(work_dir, broker_target, tools_target)`` must run a broker dumping to
    ``broker_target`` and a tool dumping to ``tools_target``, and stop both. A training
    failure is logged and remembered (no retry for a day); ``(None, None)`` is returned then.
    """
    if not enabled():
        return None, None
    directory = archive_dir(dist, java)
    broker, tools = directory / BROKER_ARCHIVE, directory / TOOLS_ARCHIVE
    if broker.is_file() and tools.is_file():
        return broker, tools
    failed = directory / FAILED_MARKER
    with file_lock(directory / ".lock"):
        if broker.is_file() and tools.is_file():
            return broker, tools
        if failed.is_file() and time.time() - failed.stat().st_mtime < RETRY_AFTER_S:
            log.debug("CDS training failed recently (%s): not retrying", failed)
            return _existing(broker), _existing(tools)
        started = time.monotonic()
        log.info("training class-data-sharing archives for Kafka %s (once per version and JVM)",
                 dist.version)  # fmt: skip
        work = directory / f"train-{os.getpid()}"
        broker_tmp = directory / f".{BROKER_ARCHIVE}.{os.getpid()}.tmp"
        tools_tmp = directory / f".{TOOLS_ARCHIVE}.{os.getpid()}.tmp"
        try:
            train(work, broker_tmp, tools_tmp)
            for tmp, final in ((broker_tmp, broker), (tools_tmp, tools)):
                if not tmp.is_file() or tmp.stat().st_size == 0:
                    raise RuntimeError(f"the JVM wrote no archive {tmp.name}")
                os.replace(tmp, final)
        except Exception as exc:  # noqa: BLE001 (best effort: the sandbox works without CDS)
            log.warning("CDS training failed, JVMs start without it: %s", str(exc).splitlines()[0])
            failed.write_text(f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')} {exc}\n")
        finally:
            for tmp in (broker_tmp, tools_tmp):
                tmp.unlink(missing_ok=True)
            shutil.rmtree(work, ignore_errors=True)
        log.info("CDS training took %.1f s", time.monotonic() - started)
    return _existing(broker), _existing(tools)


def _existing(path: Path) -> Path | None:
    return path if path.is_file() else None
