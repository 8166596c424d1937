"""Plan storage: the snapshot, the plan, its report and its run state, on local disk or object storage.

One storage layer for every task of a plan (plan, execute, the sensor and its trigger, cancel,
heal) and the CLI. A plan lives at a **plan URI**, whatever its scheme:

* a plain path or ``file://`` URI: a :class:`~airflow_kafka_reassign.core.records.store.LocalStore`
  (fine on one machine, or on a disk every worker and the triggerer mount);
* ``s3://bucket/prefix/plan`` (and ``gs://``, ``abfs://``, any scheme an installed Airflow
  provider registers for ``ObjectStoragePath``): an :class:`ObjectStore` over that provider's
  fsspec file system, with the connection ``storage_conn_id`` (the amazon provider's ``aws``
  connection for S3; ``endpoint_url`` in its extra for an S3-compatible store).

Everything a retry or another worker needs is read from there and from the cluster, never from
a worker's disk: ``plan.json``, ``rollback.json``, ``metrics.json``, the report, and ``run/``
(the throttle backup, the lease, the journal). Objects are written whole in one PUT (S3 never
shows half an object); the lease uses conditional writes (``If-None-Match: *`` to create,
``If-Match: <ETag>`` to replace) where the store has them, see core/records/lease.py.

Example::

    from airflow_kafka_reassign.plan_storage import open_plan
    from airflow_kafka_reassign.core.records.plan_io import read_plan

    plan_store = open_plan("s3://kafka-plans/decommission/run-1/plan", conn_id="aws_plans")
    plan = read_plan(plan_store)           # validated ReassignmentPlan
    state = plan_store.child("run")        # the run state (throttle backup, lease, journal)

Errors (:class:`~airflow_kafka_reassign.core.records.store.StoreError`) name the URI and what to fix, never
a credential, and come within ``timeout_s`` (connect and read timeouts, few retries).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from airflow_kafka_reassign.core.records.plan_io import METRICS_FILE, PLAN_FILE
from airflow_kafka_reassign.core.records.store import LocalStore, Store, StoreError, _check_name

#: The run-state folder of a plan (the default ``state_dir``).
RUN_DIR = "run"
#: Bound on each request to object storage when none is given.
DEFAULT_TIMEOUT_S = 30.0


def safe_name(part: str) -> str:
    """``part`` as one safe path segment (a DAG id, a run id, a task id)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", part).strip("_") or "_"


def default_output_root() -> Path:
    """Where tasks write on this machine when no object-storage location is given:
    ``$AKR_OUTPUT_DIR``, else ``$AIRFLOW_HOME/kafka_reassign``."""
    home = os.environ.get("AIRFLOW_HOME") or str(Path.home() / "airflow")
    return Path(os.environ.get("AKR_OUTPUT_DIR", str(Path(home) / "kafka_reassign")))


def is_local(uri: str | os.PathLike[str]) -> bool:
    text = os.fspath(uri)
    scheme = urlparse(text).scheme
    return scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt")


def local_path(uri: str | os.PathLike[str]) -> Path:
    """The local path of a local path or ``file://`` URI."""
    text = os.fspath(uri)
    return Path(urlparse(text).path) if text.startswith("file://") else Path(text)


def _s3_options(timeout_s: float) -> dict[str, Any]:
    """botocore settings (merged into the connection's ``config_kwargs``) that bound every request:
    connect and read timeouts, and two sends at most (``total_max_attempts`` counts the first)."""
    return {"connect_timeout": min(timeout_s, 10.0), "read_timeout": timeout_s,
            "retries": {"total_max_attempts": 2, "mode": "standard"}}


#: Stores (scheme, endpoint, bucket) already found to enforce conditional writes, in this process.
_CONDITIONAL_OK: set[tuple[str, str, str]] = set()


def _filesystem(scheme: str, conn_id: str | None, timeout_s: float) -> Any:
    """The fsspec file system Airflow's ObjectStoragePath uses for ``scheme`` (from the installed providers)."""
    try:
        from airflow.sdk.io import get_fs
    except ImportError:  # pragma: no cover - older Task SDKs
        from airflow.io import get_fs  # type: ignore[no-redef]
    try:
        if scheme in ("s3", "s3a", "s3n"):
            return get_fs(scheme, conn_id, _s3_options(timeout_s))
        return get_fs(scheme, conn_id)
    except ValueError as e:
        raise StoreError(
            f"no file system is registered for {scheme}://: install the Airflow provider of that storage "
            f"(for S3: pip install 'airflow-kafka-reassign[s3]', which brings apache-airflow-providers-amazon[s3fs]) ({e})"
        ) from None
    except ImportError as e:
        raise StoreError(f"{scheme}:// storage needs a package that is not installed: {e}") from None


def _describe(e: BaseException) -> str:
    """A short, credential-free account of a storage error, with the kind of fix."""
    text = f"{type(e).__name__}: {e}"
    code = ""
    response = getattr(e, "response", None)
    if isinstance(response, dict):
        code = str(response.get("Error", {}).get("Code", ""))
    cause = e.__cause__ or e.__context__
    if cause is not None and not code:
        inner = getattr(cause, "response", None)
        if isinstance(inner, dict):
            code = str(inner.get("Error", {}).get("Code", ""))
    low = (text + " " + code + " " + (f"{type(cause).__name__}: {cause}" if cause else "")).lower()
    if any(k in low for k in ("invalidaccesskeyid", "signaturedoesnotmatch", "accessdenied", "forbidden", "403",
                              "permissionerror", "invalidtoken", "expiredtoken", "unable to locate credentials",
                              "nocredentials")):
        return (f"access denied ({code or type(e).__name__}): check the credentials of the storage connection "
                "(its login/password or the keys in its extra) and their permissions on the bucket")
    if "nosuchbucket" in low or "bucket does not exist" in low or "specified bucket does not exist" in low:
        return "the bucket does not exist: create it, or fix the bucket in the URI"
    if any(k in low for k in ("endpointconnectionerror", "connecttimeout", "connection refused", "could not connect",
                              "name or service not known", "timed out", "timeout", "connectionerror",
                              "cannot connect")):
        return ("the object store did not answer: check the endpoint (endpoint_url in the storage connection's "
                "extra), that it is up and reachable from this worker")
    return text.splitlines()[0][:300]


class ObjectStore:
    """A :class:`~airflow_kafka_reassign.core.records.store.Store` on object storage (see the module docstring).

    :param uri: ``scheme://bucket/prefix`` of the folder.
    :param conn_id: the Airflow connection of that storage (``None``: the file system's defaults,
        for example the AWS environment variables).
    :param timeout_s: bound on each request (S3: connect and read timeouts, two attempts).
    """

    def __init__(self, uri: str, *, conn_id: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 fs: Any = None) -> None:
        parsed = urlparse(uri)
        if not parsed.scheme or not parsed.netloc:
            raise StoreError(f"{uri!r} is not a storage URI such as s3://bucket/prefix")
        if parsed.username or parsed.password:
            raise StoreError("a storage URI must not carry credentials: put them in the storage connection "
                             f"(storage_conn_id), not in {parsed.scheme}://{parsed.hostname}/...")
        self.scheme = parsed.scheme
        self._uri = uri.rstrip("/")
        self._root = f"{parsed.netloc}{parsed.path}".rstrip("/")
        self.conn_id = conn_id
        self.timeout_s = timeout_s
        self._fs = fs

    def __repr__(self) -> str:
        return f"ObjectStore({self._uri!r}, conn_id={self.conn_id!r})"

    @property
    def uri(self) -> str:
        return self._uri

    @property
    def bucket(self) -> str:
        return self._root.split("/", 1)[0]

    @property
    def fs(self) -> Any:
        if self._fs is None:
            fs = _filesystem(self.scheme, self.conn_id, self.timeout_s)
            if hasattr(fs, "retries"):  # s3fs retries on its own too (5 by default): keep the bound
                fs.retries = min(int(fs.retries), 2)
            self._fs = fs
        return self._fs

    @property
    def _s3(self) -> bool:
        return self.scheme in ("s3", "s3a", "s3n") and hasattr(self.fs, "call_s3")

    def _key(self, name: str) -> str:
        return f"{self._root}/{_check_name(name)}"

    def _fail(self, what: str, name: str, e: BaseException) -> StoreError:
        where = f"{self._uri}/{name}" if name else self._uri
        via = f" (connection {self.conn_id!r})" if self.conn_id else ""
        return StoreError(f"could not {what} {where}{via}: {_describe(e)}")

    def _bucket_missing(self) -> bool:
        try:
            self.check()
        except StoreError as e:
            return "does not exist" in str(e)
        return False

    def _absent(self, name: str, e: BaseException) -> None:
        """A failed read of ``name``: ``None`` when the object does not exist, else a
        :class:`StoreError` (the bucket is missing, access denied, the store not answering)."""
        if isinstance(e, FileNotFoundError):
            if self._bucket_missing():
                raise StoreError(f"could not read {self._uri}/{name}: the bucket {self.bucket!r} does not exist: "
                                 "create it, or fix the bucket in the URI") from None
            return None
        if "nosuchkey" in f"{type(e).__name__} {e}".lower():
            return None
        raise self._fail("read", name, e) from None

    def read(self, name: str) -> bytes | None:
        if not self._s3:
            got = self.read_versioned(name)
            return None if got is None else got[0]
        key = self._key(name)
        try:
            return bytes(self.fs.cat_file(key))  # one GET (read_versioned adds a HEAD for the ETag)
        except Exception as e:
            return self._absent(name, e)

    def read_versioned(self, name: str) -> tuple[bytes, str] | None:
        key = self._key(name)
        try:
            if self._s3:
                # The ETag first, then the bytes: if the object changes in between, the version is the
                # older one and a write_if with it fails (never the other way round).
                self.fs.invalidate_cache(key)
                etag = str(self.fs.info(key).get("ETag", ""))
                return bytes(self.fs.cat_file(key)), etag
            with self.fs.open(key, "rb") as f:
                data = f.read()
            return data, hashlib.sha256(data).hexdigest()
        except Exception as e:
            return self._absent(name, e)

    def write(self, name: str, data: bytes) -> None:
        try:
            self.fs.pipe_file(self._key(name), bytes(data))
        except Exception as e:
            raise self._fail("write", name, e) from None

    def _put_if(self, key: str, data: bytes, version: str | None) -> bool:
        condition = {"IfNoneMatch": "*"} if version is None else {"IfMatch": version}
        try:
            self.fs.pipe_file(key, bytes(data), **condition)
        except Exception as e:
            low = f"{type(e).__name__} {e} {e.__cause__!r} {getattr(e, 'response', '')}".lower()
            if any(k in low for k in ("precondition", "412", "conditionalrequestconflict", "409", "nosuchkey")):
                return False
            raise self._fail("write", key[len(self._root) + 1:], e) from None
        return True

    def _check_conditional_writes(self) -> None:
        """Once per store and process: refuse a store that accepts a conditional write it must refuse.

        The lease is only as safe as the store's compare-and-set; a store that ignores
        ``If-None-Match`` (S3Proxy before 4.0, some S3-compatible servers) would let two workers
        both take it. Fail closed, with the reason."""
        ident = (self.scheme, str(getattr(self.fs, "endpoint_url", "") or ""), self.bucket)
        if ident in _CONDITIONAL_OK:
            return
        probe = f"{self._root}/.akr-conditional-write-probe"
        self._put_if(probe, b"1", None)
        try:
            refused = not self._put_if(probe, b"2", None)
        finally:
            with contextlib.suppress(Exception):  # a leftover probe object is harmless
                self.fs.rm_file(probe)
        if not refused:
            raise StoreError(
                f"the object store of {self._uri} ignores conditional writes (a PUT with If-None-Match: * over an "
                "existing object succeeded): the plan's lease could be taken by two workers at once, so it is not "
                "used. Put plans on a store with conditional writes (AWS S3, Google Cloud Storage, Azure Blob, "
                "MinIO, S3Proxy 4.x), or on a disk that every worker mounts"
            )
        _CONDITIONAL_OK.add(ident)

    def write_if(self, name: str, data: bytes, version: str | None) -> bool:
        key = self._key(name)
        if self._s3:
            self._check_conditional_writes()
            return self._put_if(key, data, version)
        # Other stores (gs://, abfs://, ...) through fsspec, which has no portable conditional write:
        # check, write, check again. A narrow race remains; docs/storage.md says so.
        current = self.read_versioned(name)
        if (current[1] if current else None) != version:
            return False
        self.write(name, data)
        return self.read(name) == bytes(data)

    def delete(self, name: str) -> None:
        try:
            self.fs.rm_file(self._key(name))
        except FileNotFoundError:
            return
        except Exception as e:
            if "nosuchkey" in f"{type(e).__name__} {e}".lower():
                return
            raise self._fail("delete", name, e) from None

    def list(self, prefix: str = "") -> list[str]:
        base = self._key(prefix) if prefix else self._root
        try:
            found = self.fs.find(base)
        except FileNotFoundError:
            return []
        except Exception as e:
            raise self._fail("list", prefix, e) from None
        root = self._root + "/"
        return sorted(p[len(root):] for p in found if p.startswith(root))

    def child(self, name: str) -> ObjectStore:
        return ObjectStore(f"{self._uri}/{_check_name(name)}", conn_id=self.conn_id, timeout_s=self.timeout_s,
                           fs=self._fs)

    def check(self) -> None:
        """Fail now, with the fix named, when the store cannot be reached, refuses the credentials or
        has no such bucket."""
        try:
            if self._s3:
                self.fs.call_s3("head_bucket", Bucket=self.bucket)
            else:
                self.fs.ls(self.bucket)
        except FileNotFoundError:
            raise StoreError(f"could not use {self._uri}: the bucket {self.bucket!r} does not exist (or this "
                             "connection may not see it): create it, or fix the bucket in the URI") from None
        except Exception as e:
            raise self._fail("reach", "", e) from None


def open_store(uri: str | os.PathLike[str], *, conn_id: str | None = None,
               timeout_s: float = DEFAULT_TIMEOUT_S) -> Store:
    """The store of a folder: a local path / ``file://`` URI, or an object-storage URI."""
    if is_local(uri):
        return LocalStore(local_path(uri))
    return ObjectStore(os.fspath(uri), conn_id=conn_id, timeout_s=timeout_s)


def plan_folder_uri(plan_uri: str) -> str:
    """The plan directory's URI from a plan URI (the directory itself, or its ``plan.json``)."""
    text = os.fspath(plan_uri).strip()
    if text.rstrip("/").endswith("/" + PLAN_FILE) or text == PLAN_FILE:
        text = text.rstrip("/")[: -len(PLAN_FILE)].rstrip("/") or "."
    return text.rstrip("/") or "/"


def open_plan(plan_uri: str, *, conn_id: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> Store:
    """The store of the plan directory at ``plan_uri``, checked to hold a complete plan.

    Raises :class:`~airflow_kafka_reassign.exceptions.ConfigurationError` (a wrong URI, no plan
    there) or :class:`~airflow_kafka_reassign.core.records.store.StoreError` (the storage cannot be used),
    each naming the URI and the fix, never a credential."""
    from airflow_kafka_reassign.exceptions import ConfigurationError

    if plan_uri is None or not str(plan_uri).strip():
        raise ConfigurationError("plan_uri is empty: give the plan_uri that PlanReassignment pushed to XCom")
    store = open_store(plan_folder_uri(str(plan_uri)), conn_id=conn_id, timeout_s=timeout_s)
    if isinstance(store, ObjectStore):
        store.check()
    elif not store.root.is_dir():
        raise ConfigurationError(
            f"plan_uri {plan_uri!r}: {store.root} is not a plan directory (it does not exist on this machine). "
            "A local path only works where every worker and the triggerer see the same disk: put plans on "
            "object storage (output_uri='s3://...', storage_conn_id=...) for distributed workers"
        )
    if store.read(METRICS_FILE) is None:
        raise ConfigurationError(
            f"plan_uri {plan_uri!r}: no plan there ({store.uri.rstrip('/')}/{METRICS_FILE} does not exist); give the "
            "plan_uri that PlanReassignment pushed to XCom, or plan again"
        )
    return store


def plan_store(plan_uri: str, *, conn_id: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> Store:
    """The plan directory of ``plan_uri`` (:func:`open_plan`) for a task: a storage failure becomes a
    :class:`~airflow_kafka_reassign.exceptions.ConfigurationError` naming the URI and the fix (retrying the task with
    the same settings would not help more than the bounded retries the store already made)."""
    from airflow_kafka_reassign.exceptions import ConfigurationError

    try:
        return open_plan(plan_uri, conn_id=conn_id, timeout_s=timeout_s)
    except StoreError as e:
        raise ConfigurationError(str(e)) from None


def snapshot_taken_at(plan: Store, *, conn_id: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> str | None:
    """``taken_at`` of the snapshot folder next to a plan directory (``<output>/snapshot``, where
    PlanReassignment writes it); ``None`` when there is none."""
    import json

    if isinstance(plan, LocalStore):
        base: str = str(plan.root.parent)
    else:
        base = plan.uri.rstrip("/").rsplit("/", 1)[0]
    try:
        data = open_store(f"{base}/snapshot", conn_id=conn_id, timeout_s=timeout_s).read("snapshot.json")
        return str(json.loads(data)["taken_at"]) if data is not None else None
    except (StoreError, ValueError, KeyError):
        return None


def run_state(plan: Store, state_dir: str | None = None, *, conn_id: str | None = None,
              timeout_s: float = DEFAULT_TIMEOUT_S) -> Store:
    """The run state of a plan: ``state_dir`` when given, else ``<plan>/run``."""
    if state_dir:
        return open_store(state_dir, conn_id=conn_id, timeout_s=timeout_s)
    return plan.child(RUN_DIR)


def upload_dir(local: Path, uri: str, *, conn_id: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
    """Copy the files of ``local`` (recursively) to the folder ``uri``, each in one PUT; returns ``uri``.

    ``metrics.json`` files go last, so a reader that finds a plan's ``metrics.json`` finds it whole."""
    dest = open_store(uri, conn_id=conn_id, timeout_s=timeout_s)
    files = sorted((p for p in local.rglob("*") if p.is_file()), key=lambda p: (p.name == METRICS_FILE, str(p)))
    for src in files:
        dest.write(src.relative_to(local).as_posix(), src.read_bytes())
    return uri


def fetch_dir(uri: str | os.PathLike[str], *, conn_id: str | None = None, cache: Path | None = None,
              timeout_s: float = DEFAULT_TIMEOUT_S) -> Path:
    """A local directory with the content of ``uri`` (downloaded into ``cache`` when remote)."""
    if is_local(uri):
        return local_path(uri)
    text = os.fspath(uri)
    src = open_store(text, conn_id=conn_id, timeout_s=timeout_s)
    root = cache or Path(tempfile.mkdtemp(prefix="akr-fetch-"))
    dest = root / hashlib.sha256(text.encode()).hexdigest()[:16]
    for name in src.list():
        data = src.read(name)
        if data is None:
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return dest


def job_environment(uri: str, *, conn_id: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, str]:
    """Environment variables that let the Spark plan job's driver read and write ``uri`` itself
    (spark/job_storage.py): for S3 with a connection, its credentials (resolved by the amazon
    provider: keys, an assumed role, ...), region and endpoint as the standard ``AWS_*``
    variables. Secrets: for a process environment only, never a command line or a log.

    ``{}`` plus the timeout for other schemes and without a connection: the driver then uses its own
    default credentials (the same environment in client deploy mode)."""
    env = {"AKR_STORAGE_TIMEOUT_S": f"{timeout_s:g}"}
    scheme = urlparse(os.fspath(uri)).scheme
    if scheme not in ("s3", "s3a", "s3n") or not conn_id:
        return env
    try:
        from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
    except ImportError as e:
        raise StoreError(f"s3:// storage needs the amazon provider: pip install 'airflow-kafka-reassign[s3]' ({e})") from None
    try:
        hook = AwsBaseHook(aws_conn_id=conn_id, client_type="s3")
        credentials = hook.get_credentials()
        config = hook.conn_config
    except Exception as e:
        raise StoreError(f"could not use {uri}: the credentials of connection {conn_id!r}: {_describe(e)}") from None
    if credentials is not None and credentials.access_key and credentials.secret_key:
        env["AWS_ACCESS_KEY_ID"] = credentials.access_key
        env["AWS_SECRET_ACCESS_KEY"] = credentials.secret_key
        if credentials.token:
            env["AWS_SESSION_TOKEN"] = credentials.token
    region = config.region_name
    if region:
        env["AWS_REGION"] = env["AWS_DEFAULT_REGION"] = str(region)
    service_endpoint = getattr(config, "get_service_endpoint_url", None)  # older providers: endpoint_url only
    endpoint = service_endpoint("s3") if service_endpoint else config.endpoint_url
    if endpoint:
        env["AWS_ENDPOINT_URL_S3"] = str(endpoint)
    return env


def heal_targets_file(uri: str | os.PathLike[str], *, conn_id: str | None = None,
                      timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[Store, str]:
    """The heal-targets file at ``uri`` (a path or an object-storage URI) as ``(store of its folder,
    file name)``, what ``core.maintenance.growth.read_heal_targets`` / ``update_heal_targets`` take: on
    distributed workers, GuardedCreatePartitions records there and PlanHeal reads it, from any worker."""
    from airflow_kafka_reassign.exceptions import ConfigurationError

    text = os.fspath(uri).strip()
    folder, _, name = text.rstrip("/").rpartition("/")
    if not name or not folder:
        if is_local(text):
            return LocalStore(Path(text).resolve().parent), Path(text).name
        raise ConfigurationError(f"heal_targets_path {text!r}: give a file, e.g. s3://bucket/kafka/heal-targets.json")
    return open_store(folder, conn_id=conn_id, timeout_s=timeout_s), name
