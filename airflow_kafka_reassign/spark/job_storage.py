"""The plan job's own access to object storage: read the snapshot, write the plan (pyarrow only).

When PlanReassignmentOperator's ``output_uri`` is on object storage, the job is given
``--snapshot s3://bucket/prefix/snapshot --out s3://bucket/prefix/plan``: the driver downloads
the snapshot's few files (2 MB per million replicas) into a temporary directory, the executors
get ``partitions.parquet``'s bytes by broadcast as on any cluster (they need no access to the
store, nor credentials), and the driver uploads the plan files, ``metrics.json`` last, so a
reader that finds ``metrics.json`` finds the whole plan. Each file is one PUT (or one multipart
upload past 10 MB), never a partial object.

No Airflow import: the job runs on the Spark driver, which may be a machine with only PySpark,
pyarrow and this package. The file systems are pyarrow's own (``s3://``, ``gs://``,
``abfs://``, ``hdfs://``), so no Hadoop jar is needed either.

Credentials (never on a command line): the driver's environment. For S3 the standard AWS
variables: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
``AWS_REGION``/``AWS_DEFAULT_REGION``, and ``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL`` for an
S3-compatible store; without keys, the AWS default chain (instance profile, web identity, ...).
The operator sets them from its ``storage_conn_id`` in the environment of ``spark-submit``
(client deploy mode: the driver is that process); a driver in cluster deploy mode uses the
cluster's own credentials (docs/storage.md). ``AKR_STORAGE_TIMEOUT_S`` bounds each request.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from airflow_kafka_reassign.core.planner.log_dirs import LOG_DIRS_FILE

#: The files of a snapshot directory the job reads (``snapshot.json`` is optional).
SNAPSHOT_FILES = ("brokers.parquet", "topics.parquet", "partitions.parquet")
SNAPSHOT_META = "snapshot.json"
METRICS_FILE = "metrics.json"


class JobStorageError(ValueError):
    """The snapshot cannot be read, or the plan cannot be written, at a URI (bad input: exit 2)."""


def is_remote(uri: str) -> bool:
    """A URI with a scheme other than ``file://`` (and not a Windows drive letter)."""
    scheme = urlparse(uri).scheme
    return scheme not in ("", "file") and len(scheme) > 1


def _timeout_s() -> float:
    try:
        return float(os.environ.get("AKR_STORAGE_TIMEOUT_S", "30"))
    except ValueError:
        return 30.0


def _s3(env: dict[str, str]) -> Any:
    from pyarrow import fs

    kwargs: dict[str, Any] = {
        "connect_timeout": min(_timeout_s(), 10.0),
        "request_timeout": _timeout_s(),
        "retry_strategy": fs.AwsStandardS3RetryStrategy(max_attempts=2),
    }
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        kwargs["region"] = region
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        parsed = urlparse(endpoint)
        kwargs["endpoint_override"] = parsed.netloc or parsed.path
        kwargs["scheme"] = parsed.scheme or "https"
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        kwargs["access_key"] = env["AWS_ACCESS_KEY_ID"]
        kwargs["secret_key"] = env["AWS_SECRET_ACCESS_KEY"]
        if env.get("AWS_SESSION_TOKEN"):
            kwargs["session_token"] = env["AWS_SESSION_TOKEN"]
    return fs.S3FileSystem(**kwargs)


def filesystem(uri: str, env: dict[str, str] | None = None) -> tuple[Any, str]:
    """pyarrow's file system for ``uri`` and the path in it (``bucket/prefix`` for S3)."""
    from pyarrow import fs

    parsed = urlparse(uri)
    if parsed.scheme in ("s3", "s3a", "s3n"):
        return _s3(dict(os.environ) if env is None else env), f"{parsed.netloc}{parsed.path}".rstrip("/")
    try:
        return fs.FileSystem.from_uri(uri)
    except Exception as e:  # noqa: BLE001 (pyarrow raises ArrowInvalid/NotImplemented/OSError per scheme)
        raise JobStorageError(f"{uri}: the plan job cannot open {parsed.scheme}:// storage ({_short(e)})") from None


def _short(e: BaseException) -> str:
    """pyarrow's message, first line only (it names the operation and the AWS error, never a key)."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    low = text.lower()
    if "access_denied" in low or "accessdenied" in low or "forbidden" in low or "signature" in low:
        return (f"access denied ({text[:200]}): check the credentials the Spark driver gets (the storage "
                "connection in client mode, the cluster's own in cluster mode)")
    if "nosuchbucket" in low or "bucket does not exist" in low:
        return f"the bucket does not exist ({text[:200]})"
    if "curl" in low or "connect" in low or "timeout" in low or "timed out" in low:
        return f"the object store did not answer ({text[:200]}): check the endpoint and that the driver reaches it"
    return text[:300]


def check_local_snapshot(path: str) -> None:
    """Refuse (:class:`JobStorageError`, naming the folder) a local snapshot folder without its files."""
    folder = Path(urlparse(path).path if path.startswith("file://") else path)
    missing = [name for name in SNAPSHOT_FILES if not (folder / name).is_file()]
    if missing:
        what = "does not exist" if not folder.is_dir() else f"has no {', '.join(missing)}"
        raise JobStorageError(
            f"{path}: no snapshot there ({folder} {what}): give the snapshot folder that "
            "PlanReassignmentOperator or `airflow-kafka-reassign snapshot` wrote"
        )


def stage_snapshot(uri: str, local: Path) -> Path:
    """Download the snapshot folder ``uri`` into ``local``; returns ``local``.

    Refuses (:class:`JobStorageError`, naming the URI) a folder without the three Parquet files."""
    from pyarrow import fs as pafs

    filesystem_, base = filesystem(uri)
    local.mkdir(parents=True, exist_ok=True)
    for name in (*SNAPSHOT_FILES, SNAPSHOT_META, LOG_DIRS_FILE):
        path = f"{base}/{name}"
        try:
            info = filesystem_.get_file_info(path)
            if info.type != pafs.FileType.File:
                if name in (SNAPSHOT_META, LOG_DIRS_FILE):  # optional: older snapshots, goals without log dirs
                    continue
                raise JobStorageError(
                    f"{uri}: no snapshot there ({name} is missing): give the snapshot folder that "
                    "PlanReassignmentOperator or `airflow-kafka-reassign snapshot` wrote"
                )
            with filesystem_.open_input_stream(path) as src:
                (local / name).write_bytes(src.read())
        except JobStorageError:
            raise
        except Exception as e:  # noqa: BLE001 (pyarrow's OSError family)
            raise JobStorageError(f"{uri}: reading {name} failed: {_short(e)}") from None
    return local


def read_file(uri: str) -> bytes:
    """The content of the file at ``uri`` (the plan request the operator uploads next to the snapshot)."""
    filesystem_, path = filesystem(uri)
    try:
        with filesystem_.open_input_stream(path) as src:
            return bytes(src.read())
    except Exception as e:  # noqa: BLE001
        raise JobStorageError(f"{uri}: reading it failed: {_short(e)}") from None


def publish(local: Path, uri: str, env: dict[str, str] | None = None) -> None:
    """Upload the files of ``local`` (recursively) to the folder ``uri``, ``metrics.json`` last
    (``env``: the variables to take the credentials from, default this process's environment)."""
    filesystem_, base = filesystem(uri, env)
    files = sorted((p for p in local.rglob("*") if p.is_file()), key=lambda p: (p.name == METRICS_FILE, str(p)))
    for src in files:
        name = src.relative_to(local).as_posix()
        try:
            with filesystem_.open_output_stream(f"{base}/{name}") as out:
                out.write(src.read_bytes())
        except Exception as e:  # noqa: BLE001
            raise JobStorageError(f"{uri}: writing {name} failed: {_short(e)}") from None
