"""A real S3-compatible object store for the sandbox: S3Proxy, from Maven Central, on 127.0.0.1.

S3Proxy (``org.gaul:s3proxy`` 4.x) serves the S3 API (signature v4, conditional writes: 412 on
``If-None-Match: *`` over an existing object or a stale ``If-Match``) from a local directory
through jclouds' ``filesystem-nio2`` backend: each bucket is a folder of ``<dir>/data``.
It is fetched like Kafka (a pom, ``mvn dependency:copy-dependencies``, cached under
``~/.cache/airflow-kafka-reassign/s3proxy/<V>/libs``) and started as one JVM::

    python -m airflow_kafka_reassign.sandbox object-store-up --dir /tmp/s3-sandbox
    # {"endpoint_url": "http://127.0.0.1:PORT", "bucket": "kafka-plans", "credentials_file": ".../credentials.json", ...}
    python -m airflow_kafka_reassign.sandbox object-store-down --dir /tmp/s3-sandbox

The access key and secret are made at random for each store and kept in ``credentials.json``
(mode 600) and the JVM's properties file (mode 600): never on a command line, never printed.
:meth:`ObjectStoreSandbox.airflow_connection` gives the amazon provider's ``aws`` connection
(``endpoint_url`` in its extra) as a JSON document, for ``AIRFLOW_CONN_<ID>``.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from airflow_kafka_reassign.sandbox import maven
from airflow_kafka_reassign.sandbox.errors import SandboxError
from airflow_kafka_reassign.sandbox.processes import free_ports, java, process_matches, tail_file, write_private

log = logging.getLogger(__name__)

#: 4.x: the first line that enforces conditional writes (If-None-Match / If-Match: 412), which the
#: plan's lease relies on; 2.6 accepted them and overwrote.
S3PROXY_VERSION = "4.1.0"
DEFAULT_BUCKET = "kafka-plans"
STATE_FILE = "objectstore.json"
CREDENTIALS_FILE = "credentials.json"
MAIN_CLASS = "org.gaul.s3proxy.Main"

_POM = """<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by airflow_kafka_reassign.sandbox.objectstore: the classpath of S3Proxy. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>airflow-kafka-reassign.sandbox</groupId>
  <artifactId>s3proxy-classpath</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.gaul</groupId><artifactId>s3proxy</artifactId><version>{version}</version></dependency>
    <!-- S3Proxy 4.x runs on Jackson 3, which needs jackson-annotations 2.2x; Maven's nearest-wins
         resolution picks an older one otherwise and it fails at start (NoClassDefFoundError) -->
    <dependency>
      <groupId>com.fasterxml.jackson.core</groupId><artifactId>jackson-annotations</artifactId><version>2.22</version>
    </dependency>
  </dependencies>
</project>
"""

_LOGBACK = """<configuration>
  <appender name="OUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{HH:mm:ss.SSS} %-5level %logger{30} - %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="OUT"/></root>
</configuration>
"""


def cache_root() -> Path:
    return maven.cache_root().parent / "s3proxy"


def fetch(version: str = S3PROXY_VERSION, root: Path | None = None, timeout: float = 600.0) -> Path:
    """The directory of S3Proxy's runtime jars (fetched with Maven once, then cached)."""
    vdir = (root or cache_root()) / version
    libs = vdir / "libs"
    if (libs / maven.COMPLETE_MARKER).is_file():
        return libs
    with maven.file_lock(vdir / ".lock"):
        if (libs / maven.COMPLETE_MARKER).is_file():
            return libs
        shutil.rmtree(libs, ignore_errors=True)
        pom = vdir / "pom.xml"
        pom.write_text(_POM.format(version=version))
        tmp = Path(tempfile.mkdtemp(dir=vdir, prefix="libs.tmp-"))
        started = time.monotonic()
        log.info("fetching S3Proxy %s jars with Maven into %s", version, libs)
        try:
            proc = maven._run_mvn(["-Dstyle.color=never", "-f", str(pom), "dependency:copy-dependencies",
                                   "-DincludeScope=runtime", f"-DoutputDirectory={tmp}"], timeout)
            if proc.returncode != 0:
                raise SandboxError(f"mvn could not resolve S3Proxy {version} "
                                   f"({maven.mvn_error_summary(proc.stdout + proc.stderr)})")
            if not (tmp / f"s3proxy-{version}.jar").is_file():
                raise SandboxError(f"s3proxy-{version}.jar missing after resolving S3Proxy {version}")
            (tmp / maven.COMPLETE_MARKER).write_text(json.dumps({"s3proxy_version": version}) + "\n")
            os.rename(tmp, libs)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        log.info("fetched S3Proxy %s in %.1f s", version, time.monotonic() - started)
    return libs


class ObjectStoreSandbox:
    """An S3Proxy living in ``dir`` (state in ``dir/objectstore.json``)."""

    def __init__(self, dir: str | os.PathLike[str]) -> None:
        self.dir = Path(dir).expanduser().resolve()

    @property
    def state_path(self) -> Path:
        return self.dir / STATE_FILE

    @property
    def state(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.state_path.read_text()))
        except FileNotFoundError:
            raise SandboxError(f"no object store in {self.dir} (missing {STATE_FILE})") from None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.state['port']}"

    @property
    def bucket(self) -> str:
        return str(self.state["bucket"])

    def credentials(self) -> tuple[str, str]:
        """``(access key, secret key)``: never print them."""
        data = json.loads((self.dir / CREDENTIALS_FILE).read_text())
        return data["aws_access_key_id"], data["aws_secret_access_key"]

    @property
    def info(self) -> dict[str, Any]:
        """Public description (no secrets), as printed by ``object-store-up``."""
        state = self.state
        return {"endpoint_url": self.endpoint_url, "bucket": state["bucket"], "pid": state["pid"],
                "data_dir": state["data_dir"], "credentials_file": str(self.dir / CREDENTIALS_FILE),
                "s3proxy_version": state["version"], "started_in_s": state.get("started_in_s")}

    def airflow_connection(self) -> str:
        """The ``aws`` connection (JSON for ``AIRFLOW_CONN_<ID>``) that reaches this store. Holds the secret."""
        key, secret = self.credentials()
        return json.dumps({
            "conn_type": "aws", "login": key, "password": secret,
            "extra": {"endpoint_url": self.endpoint_url, "region_name": "us-east-1",
                      "config_kwargs": {"s3": {"addressing_style": "path"}}},
        })

    def env(self) -> dict[str, str]:
        """The ``AWS_*`` variables that reach this store (for boto3, s3fs, pyarrow). Holds the secret."""
        key, secret = self.credentials()
        return {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret, "AWS_ENDPOINT_URL": self.endpoint_url,
                "AWS_DEFAULT_REGION": "us-east-1"}

    def is_alive(self) -> bool:
        try:
            state = self.state
        except SandboxError:
            return False
        return process_matches(state.get("pid"), MAIN_CLASS)

    def up(self, *, bucket: str = DEFAULT_BUCKET, version: str = S3PROXY_VERSION, timeout: float = 60.0) -> dict[str, Any]:
        """Start a fresh store with one empty ``bucket``; return :attr:`info` once it answers."""
        if self.is_alive():
            raise SandboxError(f"an object store already runs in {self.dir} (pid {self.state['pid']}): "
                               "object-store-down first")
        libs = fetch(version)
        self.dir.mkdir(parents=True, exist_ok=True)
        data = self.dir / "data"
        shutil.rmtree(data, ignore_errors=True)
        (data / bucket).mkdir(parents=True)  # the filesystem backend's buckets are folders
        key, secret = "akr" + secrets.token_hex(8), secrets.token_urlsafe(30)
        write_private(self.dir / CREDENTIALS_FILE,
                       json.dumps({"aws_access_key_id": key, "aws_secret_access_key": secret}) + "\n")
        port = free_ports(1)[0]
        props = self.dir / "s3proxy.properties"
        write_private(props, "\n".join([
            f"s3proxy.endpoint=http://127.0.0.1:{port}",
            "s3proxy.authorization=aws-v2-or-v4",
            f"s3proxy.identity={key}",
            f"s3proxy.credential={secret}",
            # boto3's default checksum headers on bulk deletes: accept them
            "s3proxy.ignore-unknown-headers=true",
            "jclouds.provider=filesystem-nio2",
            f"jclouds.filesystem.basedir={data}",
            "jclouds.identity=unused",
            "jclouds.credential=unused",
        ]) + "\n")
        (self.dir / "logback.xml").write_text(_LOGBACK)
        command = [java(), "-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                   f"-Dlogback.configurationFile={self.dir / 'logback.xml'}",
                   "-cp", f"{libs}/*", MAIN_CLASS, "--properties", str(props)]
        started = time.monotonic()
        with open(self.dir / "s3proxy.log", "ab") as out:
            proc = subprocess.Popen(command, cwd=self.dir, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        state = {"pid": proc.pid, "port": port, "bucket": bucket, "data_dir": str(data), "version": version}
        write_private(self.state_path, json.dumps(state, indent=1) + "\n")
        deadline = started + timeout
        while True:
            if proc.poll() is not None:
                raise SandboxError(f"S3Proxy exited during start-up (code {proc.returncode}):\n"
                                   + tail_file(self.dir / "s3proxy.log", 30))
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)  # noqa: S310 (loopback)
                break
            except urllib.error.HTTPError:
                break  # it answers (403 without a signature)
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                self.down()
                raise SandboxError(f"S3Proxy did not answer on port {port} within {timeout:.0f} s:\n"
                                   + tail_file(self.dir / "s3proxy.log", 30))
            time.sleep(0.1)
        state["started_in_s"] = round(time.monotonic() - started, 2)
        write_private(self.state_path, json.dumps(state, indent=1) + "\n")
        log.info("S3Proxy %s answers on %s (bucket %s) after %.1f s", version, self.endpoint_url, bucket,
                 state["started_in_s"])
        return self.info

    def down(self, timeout: float = 15.0) -> None:
        """Stop the store (idempotent); its data stays in ``dir/data``."""
        try:
            pid = self.state.get("pid")
        except SandboxError:
            return
        if not process_matches(pid, MAIN_CLASS):
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and process_matches(pid, MAIN_CLASS):
            time.sleep(0.1)
        if process_matches(pid, MAIN_CLASS):
            log.info("S3Proxy (pid %s) ignored SIGTERM for %.0f s: SIGKILL", pid, timeout)
            os.kill(pid, signal.SIGKILL)
