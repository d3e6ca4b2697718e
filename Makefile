# The two commands: `make dev` runs the embedded stack, `make test` runs the checks (the long
# fault, load and benchmark runs: `make test-long`).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: dev demo test test-long chaos bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Runs in the foreground; Ctrl-C stops everything it started. ARGS=--demo adds a demo page.
# The Chromium that rendering targets need (installs Debian's as root with apt-get): without
# one, its line says what to install and the stack starts anyway.
dev: $(BIN)/python
	$(BIN)/python -m pip install --quiet --editable '.[dev,plot,render]'
	$(BIN)/python -m workers.chromium --ensure || true
	$(BIN)/pricewatch dev $(ARGS)

demo:
	$(MAKE) dev ARGS=--demo

# Lint, format check, types, then the test suite (unit, Postgres, time-skipping workflows,
# dev-server end to end, replay) but for the tests marked `long` (`make test-long`). Starts every service it needs itself. The
# browser tests are never skipped: without a Chromium (and no root and apt-get to install
# Debian's) it stops here with one line saying what to install.
test: $(BIN)/python
	$(BIN)/python -m pip install --quiet --editable '.[test]'
	$(BIN)/python -m workers.chromium --ensure
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest $(PYTEST_ARGS)

# The long fault, load and benchmark runs that `make test` leaves out to stay within ten
# minutes (the tests marked `long`: the one-minute chaos run, schemathesis against the API,
# workers killed, frozen or on a wrong clock, Postgres and Temporal away, resets, a 20 s page,
# a catastrophic regex, a killed pytest or dev, the benchmarks' own runs). Before a release.
test-long: $(BIN)/python
	$(BIN)/python -m pip install --quiet --editable '.[test]'
	$(BIN)/python -m workers.chromium --ensure
	$(BIN)/pytest -m long $(PYTEST_ARGS)

# The fault-injection run (`make test-long` runs a one-minute variant):
# make chaos ARGS="--targets 100 --minutes 5 --interval 10 --seed 1"
chaos: $(BIN)/python
	$(BIN)/python -m pip install --quiet --editable '.[test]'
	$(BIN)/python -m tests.chaos $(ARGS)

# The benchmark: pricewatch beside the bare Temporal loop, Temporal Schedules and a plain poller
# on one workload, on its own stack (docs/performance.md). E.g. ARGS="--targets 1000
# --interval 20 --seconds 60", with --cache N, --checks-per-run K, --aged K for the 1.1 regimes.
# The dashboard and HTTP API (`pricewatch serve`) with 10,000 targets under 20 concurrent
# clients, on a stack of its own: $(BIN)/python -m bench.web [--requests N] [--json].
bench: $(BIN)/python
	$(BIN)/python -m pip install --quiet --editable '.[test]'
	$(BIN)/python -m bench $(ARGS)

# Mutation testing, not part of `make test` (docs/testing.md#mutation-testing): mutmut changes
# the modules listed in pyproject.toml's [tool.mutmut] one small mistake at a time, in a copy
# (mutants/), and runs the tests that call each changed function; a mutant no test fails
# survived. Results are kept in mutants/: a rerun tests only new or changed functions, and
# MODULE=pricewatch/slots.py tests that module's mutants again (after a new test). JOBS
# mutants at a time, at low priority; the scores per module and the survivors are printed last.
# Every mutant's tests share one embedded Postgres that mutation/pg.py starts for the run and
# removes after (PRICEWATCH_TEST_DATABASE_URL, kept if already set).
.PHONY: mutants mutants-sql
JOBS ?= 2
mutants: $(BIN)/python
	$(BIN)/python -m pip install --quiet --editable '.[test]'
	# mutmut refreshes only the Python files of its copy: the SQL and the templates too.
	[ ! -d mutants ] || cp -r activities/sql mutants/activities/
	[ ! -d mutants ] || cp -r surfaces/templates surfaces/static mutants/surfaces/
	nice -n 10 $(BIN)/python mutation/pg.py \
		$(BIN)/mutmut run --max-children $(JOBS) $(if $(MODULE),'$(subst /,.,$(MODULE:.py=)).*')
	$(BIN)/python mutation/scores.py $(MODULE)

# The SQL that carries the promises (claim and commit, the next due slot, the calendar grid),
# which mutmut cannot change: mutation/sql.py makes one mutant at a time in a copy of the
# tree and runs the tests that reach that SQL against it. FILE=activities/sql/queries.sql
# for one file; ARGS for more (--cap N mutants per file, --timeout S per mutant, --list).
mutants-sql: $(BIN)/python
	$(BIN)/python -m pip install --quiet --editable '.[test]'
	nice -n 10 $(BIN)/python mutation/pg.py \
		$(BIN)/python mutation/sql.py --jobs $(JOBS) $(ARGS) $(FILE)
