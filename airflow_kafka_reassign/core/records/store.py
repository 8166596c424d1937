"""Where a plan's files and its run state live: the :class:`Store` port and its local-disk adapter.

A plan directory (core/records/plan_io.py) and its run state (``run/``: the throttle backup, the lease, the
journal of what each try submitted) are a handful of whole objects, each written at once and read
at once. That is all :class:`Store` asks of a storage: read an object, write one whole (a reader
never sees half of it), delete one, list a prefix, and create or replace one only if it is as the
caller last saw it (the compare-and-set the lease needs, core/records/lease.py). The same code then runs
on a worker's disk, on a disk shared by every worker, and on object storage (S3, GCS, Azure Blob,
through Airflow's ``ObjectStoragePath``: ``airflow_kafka_reassign.plan_storage``).

:class:`LocalStore` is the adapter for a directory: atomic writes through a temporary file and a
rename, compare-and-set under an exclusive ``flock`` of a lock file beside the objects (one
machine, or a shared POSIX file system with working locks).

Pure: imports no Airflow, no Kafka client, no PySpark.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol, runtime_checkable

#: The lock file :class:`LocalStore` takes for a compare-and-set (never listed as an object).
LOCK_NAME = ".akr-lock"


class StoreError(OSError):
    """The storage could not be read or written (unreachable, access denied, no such bucket ...).

    The message names the location (never a credential) and what to check."""


@runtime_checkable
class Store(Protocol):
    """A folder of whole objects (see the module docstring). Names are ``/``-separated, relative."""

    @property
    def uri(self) -> str:
        """Where it is (a path or a URI, never a credential), for messages."""
        ...

    def read(self, name: str) -> bytes | None:
        """The object's bytes, or ``None`` when it does not exist."""
        ...

    def write(self, name: str, data: bytes) -> None:
        """Write the whole object at once: a reader sees the old bytes or the new, never a part."""
        ...

    def delete(self, name: str) -> None:
        """Delete the object (nothing when it does not exist)."""
        ...

    def list(self, prefix: str = "") -> list[str]:
        """The names of the objects under ``prefix`` (a folder name, or ``""`` for all), sorted."""
        ...

    def read_versioned(self, name: str) -> tuple[bytes, str] | None:
        """The object's bytes and a version tag for :meth:`write_if`, or ``None`` when it does not exist."""
        ...

    def write_if(self, name: str, data: bytes, version: str | None) -> bool:
        """Write the object only if it is still at ``version`` (``None``: only if it does not exist).

        Returns whether it was written; ``False`` means someone else wrote it in between."""
        ...

    def child(self, name: str) -> Store:
        """The store of the folder ``name`` inside this one."""
        ...


def _check_name(name: str) -> str:
    parts = name.split("/")
    if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"{name!r} is not a relative object name (no empty, '.' or '..' parts)")
    return name


def _tag(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _ContentVersions:
    """Version tags from the content (a SHA-256), and compare-and-set on them, for stores that
    serialise their own writers (:class:`LocalStore` under a lock, :class:`MemoryStore`)."""

    def read(self, name: str) -> bytes | None:
        raise NotImplementedError

    def write(self, name: str, data: bytes) -> None:
        raise NotImplementedError

    def read_versioned(self, name: str) -> tuple[bytes, str] | None:
        data = self.read(name)
        return None if data is None else (data, _tag(data))

    def _write_if_unchanged(self, name: str, data: bytes, version: str | None) -> bool:
        current = self.read_versioned(name)
        if (current[1] if current else None) != version:
            return False
        self.write(name, data)
        return True


class LocalStore(_ContentVersions):
    """A :class:`Store` in a local directory (created on first write)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LocalStore) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    @property
    def uri(self) -> str:
        return str(self.root)

    def path(self, name: str) -> Path:
        return self.root / _check_name(name)

    def read(self, name: str) -> bytes | None:
        try:
            return self.path(name).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def write(self, name: str, data: bytes) -> None:
        path = self.path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def delete(self, name: str) -> None:
        self.path(name).unlink(missing_ok=True)

    def list(self, prefix: str = "") -> list[str]:
        base = self.root / prefix if prefix else self.root
        if not base.is_dir():
            return []
        return sorted(
            p.relative_to(self.root).as_posix() for p in base.rglob("*")
            if p.is_file() and p.name != LOCK_NAME and not (p.name.startswith(".") and p.name.endswith(".tmp"))
        )

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / LOCK_NAME, "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def write_if(self, name: str, data: bytes, version: str | None) -> bool:
        with self._locked():
            return self._write_if_unchanged(name, data, version)

    def child(self, name: str) -> LocalStore:
        return LocalStore(self.root / _check_name(name))


def as_store(location: Store | str | os.PathLike[str]) -> Store:
    """A :class:`Store` as it is, a path as a :class:`LocalStore`."""
    if isinstance(location, str | os.PathLike):
        return LocalStore(location)
    return location


class MemoryStore(_ContentVersions):
    """A :class:`Store` in memory, for unit tests (and a model of the semantics every adapter keeps)."""

    def __init__(self, uri: str = "memory://", objects: dict[str, bytes] | None = None) -> None:
        self._uri = uri
        self.objects: dict[str, bytes] = objects if objects is not None else {}
        self._prefix = ""

    @property
    def uri(self) -> str:
        return self._uri

    def _key(self, name: str) -> str:
        return self._prefix + _check_name(name)

    def read(self, name: str) -> bytes | None:
        return self.objects.get(self._key(name))

    def write(self, name: str, data: bytes) -> None:
        self.objects[self._key(name)] = bytes(data)

    def delete(self, name: str) -> None:
        self.objects.pop(self._key(name), None)

    def list(self, prefix: str = "") -> list[str]:
        base = self._prefix + (prefix.rstrip("/") + "/" if prefix else "")
        return sorted(k[len(self._prefix):] for k in self.objects if k.startswith(base))

    def write_if(self, name: str, data: bytes, version: str | None) -> bool:
        return self._write_if_unchanged(name, data, version)

    def child(self, name: str) -> MemoryStore:
        out = MemoryStore(f"{self._uri.rstrip('/')}/{_check_name(name)}", self.objects)
        out._prefix = self._prefix + name.rstrip("/") + "/"
        return out
