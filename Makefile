# Every target sets up what it needs: a clean clone needs only python3, Java 17 and Maven.
SHELL := /bin/bash
PY_BOOT ?= python3
UV_VERSION := 0.13.9
UV := .tools/uv/bin/uv
VENV := .venv
PY := $(VENV)/bin/python
export AIRFLOW_HOME ?= $(CURDIR)/.airflow
export PYSPARK_PYTHON := $(CURDIR)/$(PY)
export SPARK_LOCAL_IP := 127.0.0.1

.PHONY: acceptance acceptance-slice setup chromium stack-deps stack stack-down stack-status demo ui ui-stop screenshots test unit integration test-times bench lint docs clean compat compat-spark compat-airflow compat-matrix compat-slice

# the tests on both cores, a whole file per worker (module fixtures set up once). The unit tests: two workers. The
# integration tests: three, each with its own sandbox (they wait on Kafka, Airflow and Spark about half the time:
# both cores were 47% busy with two), in the order of tests/integration/conftest.py FIRST, longest first
# (--no-loadscope-reorder: xdist would otherwise start the files with the most tests first); docs/testing.md
XDIST := -n 2 --dist loadfile
XDIST_INTEGRATION := -n 3 --dist loadfile --no-loadscope-reorder
XDIST_ACCEPTANCE := -n 2 --dist loadfile --no-loadscope-reorder

$(UV):
	$(PY_BOOT) -m pip install --disable-pip-version-check -q --target .tools/uv uv==$(UV_VERSION)

# --compile-bytecode: the installed packages' bytecode is written once here, as pip does by
# default (uv does not). Without it, where PYTHONDONTWRITEBYTECODE is set (this machine), every
# Python process compiles PySpark, pydantic, Airflow, ... again: each Spark job's Python
# workers took 0.5 s longer to start (docs/performance.md).
$(VENV)/.synced: $(UV) pyproject.toml packages/sandbox/pyproject.toml uv.lock
	$(UV) sync --frozen --extra dev --compile-bytecode
	touch $@

setup: $(VENV)/.synced  ## the environment in .venv, from uv.lock (and this package's bytecode)
	@$(PY) -m compileall -q airflow_kafka_reassign

demo: setup  ## the main job end to end on a local sandbox Kafka cluster
	$(PY) -m airflow_kafka_reassign.demo

ui: setup  ## airflow standalone (http://127.0.0.1:8080) with the example DAGs and kafka_default -> a sandbox; Ctrl-C stops
	$(PY) -m airflow_kafka_reassign.demo ui

ui-stop: setup  ## stop what 'make ui' started (when its terminal is gone)
	$(PY) -m airflow_kafka_reassign.demo ui-stop

screenshots: setup chromium  ## docs/img/first-decommission-*.png, from the Chromium UI test (a sandbox + airflow standalone)
	AKR_SCREENSHOTS_DIR=$(CURDIR)/docs/img $(VENV)/bin/pytest tests/integration/test_airflow_ui.py

chromium:  ## Debian's chromium for the plan report's browser test (apt-get install when missing)
	@command -v chromium >/dev/null || [ -x /usr/bin/chromium ] || { \
	  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  echo "installing Debian's chromium (the plan report's browser test)"; \
	  $$SUDO apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }

stack-deps:  ## Debian's postgresql and redis-server for the stack (apt-get install when missing)
	@{ ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && command -v redis-server >/dev/null; } || { \
	  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  echo "installing Debian's postgresql and redis-server (the stack's metadata database and Celery broker)"; \
	  $$SUDO apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq postgresql redis-server >/dev/null; }

STACK_DIR ?= $(CURDIR)/.stack

stack: setup stack-deps  ## a real deployment (PostgreSQL, Redis, CeleryExecutor with 2 workers, triggerer, Kafka, S3Proxy) in .stack; prints the UI's URL
	$(PY) -m airflow_kafka_reassign.sandbox.stack up --dir $(STACK_DIR)

stack-down: setup  ## stop what 'make stack' started
	$(PY) -m airflow_kafka_reassign.sandbox.stack down --dir $(STACK_DIR)

stack-status: setup
	$(PY) -m airflow_kafka_reassign.sandbox.stack status --dir $(STACK_DIR)

# make test: the unit tests run beside the integration tests, at nice 10, in the CPU the integration tests leave idle
# (they wait on Kafka, Airflow and Spark: 16% of both cores on a clean clone of cc58f65); their output (and time
# table) goes to build/unit-tests.log, printed when both are done, and make test fails if either failed.
UNIT_LOG := build/unit-tests.log

test: setup chromium stack-deps  ## unit and integration tests (a real Kafka cluster per worker, and the PostgreSQL/Redis/Celery stack); each run ends with its time table
	@mkdir -p build; echo "the unit tests run beside the integration tests (nice 10): their output in $(UNIT_LOG), printed at the end"
	@AKR_TEST_TIMES=build/test-times-unit.json nice -n 10 $(VENV)/bin/pytest $(XDIST) -p no:cacheprovider tests/unit \
	    > $(UNIT_LOG) 2>&1 & unit=$$!; \
	$(VENV)/bin/pytest $(XDIST_INTEGRATION) tests/integration; integration=$$?; \
	wait $$unit; unit=$$?; echo "== the unit tests ($(UNIT_LOG))"; cat $(UNIT_LOG); \
	echo "make test: integration tests exit $$integration, unit tests exit $$unit"; \
	[ $$integration = 0 ] && [ $$unit = 0 ]

unit: setup  ## the unit tests (no Kafka), on both cores
	$(VENV)/bin/pytest $(XDIST) tests/unit

integration: setup chromium stack-deps
	$(VENV)/bin/pytest $(XDIST_INTEGRATION) tests/integration

test-times: setup  ## the last test run's time table again: slowest tests, time per file, fixed costs (tests/timings.py)
	$(PY) tests/timings.py

bench: setup  ## benchmarks: print numbers, assert nothing about time
	@for f in tests/benchmarks/bench_*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

compat-spark: setup  ## the plan job on PySpark 3.5 and this environment's 4.x: the same plan, byte for byte
	$(PY) tests/compat/spark_lines.py

compat-airflow: setup  ## the built wheel in a fresh environment with the oldest Airflow line (3.0) on this Python: unit tests, DagBag, one example DAG on a sandbox
	$(PY) tests/compat/airflow_line.py --unit

compat-matrix: setup  ## every cell of the matrix (python x Airflow line x Kafka: tests/compat/airflow_line.py CELLS; the unit tests in UNIT_CELL only), then a table
	$(PY) tests/compat/airflow_line.py --all

compat-slice: setup  ## the one matrix cell chosen from the commit hash (what CI runs): wheel, fresh env, DagBag, the example DAG; no unit tests
	$(PY) tests/compat/airflow_line.py --slice

acceptance: setup chromium stack-deps  ## the acceptance tests beyond make test, all of them (tests/integration/acceptance.py: the stack's faults, broker kills, ZooKeeper mode, self-healing on a stack of its own; ~40 min)
	AKR_ACCEPTANCE=all $(VENV)/bin/pytest $(XDIST_ACCEPTANCE) tests/integration

acceptance-slice: setup chromium stack-deps  ## the one slice of the acceptance tests chosen from the commit hash (what CI runs after make test)
	AKR_ACCEPTANCE=slice $(VENV)/bin/pytest $(XDIST_ACCEPTANCE) tests/integration

compat: compat-matrix compat-spark  ## the compatibility checks (docs/install.md: the supported matrix)

docs: setup  ## the docs site in site/ (mkdocs, warnings are errors)
	$(VENV)/bin/mkdocs build --strict -d site

lint: setup
	$(VENV)/bin/ruff check airflow_kafka_reassign tests packages
	$(VENV)/bin/mypy airflow_kafka_reassign/core

clean:
	rm -rf $(VENV) .tools .airflow
