"""Plan and snapshot directories on local disk or in Airflow's object storage.

Operators work on local directories (Spark's driver writes the plan locally; execution reads
it locally) and copy to or from object storage when the location is a URI such as
``s3://bucket/plans/...`` (Airflow's :class:`~airflow.sdk.ObjectStoragePath`, with the
provider of that storage installed and its connection in ``conn_id``). Local paths and
``file://`` URIs are used in place.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from urllib.parse import urlparse


def is_local(uri: str | os.PathLike[str]) -> bool:
    text = os.fspath(uri)
    scheme = urlparse(text).scheme
    return scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt")


def local_path(uri: str | os.PathLike[str]) -> Path:
    """The local path of a local path or ``file://`` URI."""
    text = os.fspath(uri)
    return Path(urlparse(text).path) if text.startswith("file://") else Path(text)


def upload_dir(local: Path, uri: str, *, conn_id: str | None = None) -> str:
    """Copy the files of ``local`` (recursively) to ``uri``; returns ``uri``."""
    from airflow.sdk import ObjectStoragePath

    dest = ObjectStoragePath(uri, conn_id=conn_id)
    for src in sorted(local.rglob("*")):
        if src.is_file():
            target = dest / src.relative_to(local).as_posix()
            target.parent.mkdir(parents=True, exist_ok=True)
            with src.open("rb") as fin, target.open("wb") as fout:
                while chunk := fin.read(1 << 20):
                    fout.write(chunk)
    return uri


def fetch_dir(uri: str | os.PathLike[str], *, conn_id: str | None = None, cache: Path | None = None) -> Path:
    """A local directory with the content of ``uri`` (downloaded once into ``cache`` when remote)."""
    if is_local(uri):
        return local_path(uri)
    from airflow.sdk import ObjectStoragePath

    text = os.fspath(uri)
    root = cache or Path(tempfile.gettempdir()) / "airflow-kafka-reassign"
    dest = root / hashlib.sha256(text.encode()).hexdigest()[:16]
    src = ObjectStoragePath(text, conn_id=conn_id)
    for item in src.rglob("*"):
        if item.is_file():
            rel = item.relative_to(src)
            target = dest / str(rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            with item.open("rb") as fin, target.open("wb") as fout:
                while chunk := fin.read(1 << 20):
                    fout.write(chunk)
    return dest
