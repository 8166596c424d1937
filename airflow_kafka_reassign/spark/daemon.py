"""PySpark's Python worker daemon (``spark.python.daemon.module``) that imports PySpark from
its installed package when the copy Spark puts first on the workers' path is that package's
own zip.

Spark starts its Python workers with ``$SPARK_HOME/python/lib/pyspark.zip`` first on the path.
With PySpark installed by pip, ``SPARK_HOME`` is the installed package, and the zip holds the
same modules as source only: Python cannot cache bytecode for a zip, so every job's daemon
compiled PySpark's modules again before its first task could start (about 0.2 s of the first
stage, see docs/performance.md). Where the zip lies inside the installed package (the same
release by construction), this daemon takes it off the path, so PySpark comes from the
package with its cached bytecode. Any other zip (a Spark distribution's ``SPARK_HOME`` on a
cluster) stays first, as Spark means it. Nothing else is imported before the daemon forks
its workers.
"""

from __future__ import annotations

import os
import sys
from importlib.util import find_spec


def redundant_pyspark_zips(path: list[str]) -> list[str]:
    """The entries of ``path`` that are a ``pyspark.zip`` inside the PySpark package found
    without them (the pip-installed package's own copy)."""
    zips = [p for p in path if os.path.basename(p) == "pyspark.zip"]
    if not zips:
        return []
    saved = path[:]
    try:
        path[:] = [p for p in path if p not in zips]
        spec = find_spec("pyspark")
    finally:
        path[:] = saved
    if spec is None or not spec.origin:
        return []
    package = os.path.dirname(os.path.realpath(spec.origin)) + os.sep
    return [p for p in zips if os.path.realpath(p).startswith(package)]


def main() -> None:
    for entry in redundant_pyspark_zips(sys.path):
        sys.path.remove(entry)
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
