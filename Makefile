# Interlock Runtime. `make prove` and `make test` bootstrap everything on a fresh machine:
# a virtualenv in .venv, the project installed from PyPI, the project's own Postgres.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: dist setup check test lint format docs prove tlc tlc-inductive conformance mutants matrix bench soak index refresh verify-results pg-start pg-stop pg-status clean browser console-shots

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[all]'
	@# the development packages (world, prove, baselines, conformance, models) are not in the
	@# wheel: the checkout goes on the virtualenv's path, and on no other
	$(BIN)/python -c 'import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()["purelib"], "interlock-dev.pth").write_text(str(pathlib.Path.cwd()) + "\n")'
	touch $(STAMP)

setup: $(STAMP)

# The product's sdist and wheel in dist/ (docs/install.md): what a project outside this
# repository installs. It needs no `make setup`: a small virtualenv holds the `build` tool, and
# the build itself is isolated (pip fetches the backend pyproject.toml names).
BUILD_VENV := .data/build-venv
dist:
	@test -x $(BUILD_VENV)/bin/python || $(PYTHON) -m venv $(BUILD_VENV)
	$(BUILD_VENV)/bin/python -m pip install -q --upgrade 'build>=1.2'
	rm -rf dist build
	$(BUILD_VENV)/bin/python -m build --sdist --wheel --outdir dist .
	@ls -1 dist

pg-start: setup
	$(BIN)/interlock pg start

pg-stop: setup
	$(BIN)/interlock pg stop

pg-status: setup
	$(BIN)/interlock pg status

lint: setup
	$(BIN)/ruff check --no-cache .  # no cache: first-party detection depends on files the cache key misses
	$(BIN)/ruff format --no-cache --check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy  # strict, the product only: [tool.mypy] in pyproject.toml
	$(BIN)/python docs/gen_api.py --check  # every public name documented, the reference current

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The quick tier (about 2 minutes here): lint, then every test that needs no Postgres (the
# tests marked `pg` are left out: a database fixture, exclusive, or marked by hand). The DSN
# reaches nothing, so a test that needs Postgres and is not marked fails here.
check: setup lint
	ILR_DSN="postgresql://nobody@127.0.0.1:9/none?connect_timeout=1" $(BIN)/python -m pytest -q -n 2 --dist worksteal -m "not pg"

# Everything, the bounded Hypothesis state machine included (3 examples of 10 steps; `make
# conformance LONG=1` runs 25 of 30), then the quick TLC checks, then the docs site (`make docs`).
# Two test processes share the cluster (each test has databases of its own; most of the time
# goes to waiting on leases, timers and workers), then the tests that crash the cluster run
# alone (`exclusive`).
test: setup pg-start lint browser
	$(BIN)/python -m pytest -n 2 --dist worksteal -m "not exclusive"
	$(BIN)/python -m pytest -m exclusive
	$(MAKE) --no-print-directory tlc-quick TLC_JOBS=1
	$(MAKE) --no-print-directory docs

# The inductive invariant of models/RuntimeInductive.tla at the spec's base sizes (about 20
# minutes here): results/runtime_inductive.md and .json (docs/verification.md).
tlc-inductive: setup
	$(BIN)/python -m models.inductive

# The documentation site (docs/, mkdocs.yml) into .data/site, warnings as errors; its tests
# first (docs/cli.md must match the CLI's parsers: `python docs/gen_cli.py` rewrites it).
docs: setup
	$(BIN)/python -m pytest -q docs/test_docs_site.py
	$(BIN)/mkdocs build --strict --site-dir .data/site

# The conformance suite alone; LONG=1 runs the Hypothesis state machine far longer.
conformance: setup pg-start
	ILR_LONG=$(if $(LONG),1,0) $(BIN)/python -m pytest conformance -q

# Every code mutant of the catalog (models/mutants/*.yaml) against the tests named to kill it,
# each on its own copy of the tree: results/mutants.md and .json. MUTANTS_ARGS passes options
# through (--only A,B; --jobs 2). Exits non-zero when a mutant survives.
mutants: setup pg-start
	$(BIN)/python -m conformance.mutants $(MUTANTS_ARGS)

# The default sweep (n >= 5 per cell, within an hour here); SWEEP=full runs the spec's sizes into its own
# runs directory and resumes: an interrupted full sweep continues where it stopped. The one
# writer of results/runtime_prove.*: --publish (refused with any selection); the quick sweep
# starts from an empty runs directory (--fresh). A working run (`python -m prove --scenarios
# S10 --seeds 1`) writes into .data/prove/scratch/ instead (scenarios/README.md).
prove: setup pg-start
	$(BIN)/python -m prove --publish $(if $(filter full,$(SWEEP)),--full --resume --runs-dir .data/prove/runs-full,--fresh)

# Every driven cell of the fault matrix (models/faults.yaml; docs/matrix.md): each feature under
# each fault in both modes, judged from ground truth, into results/matrix.md and .json.
# MATRIX_ARGS passes options through (--seed N; --only feature/fault/mode,...).
matrix: setup pg-start
	$(BIN)/python -m conformance.matrix $(MATRIX_ARGS)

# Every published number against the committed raw data it came from; runs nothing (seconds).
verify-results:
	$(BIN)/python -m prove.verify_results

# Runtime vs DBOS, Absurd and the Temporal dev server in one run: results/bench.md and .json.
bench: setup pg-start
	$(BIN)/python -m prove.bench

# Chaos soak (not in make test): refund workflows under random SIGKILLs, revokes, hand refunds
# and cancels; writes results/soak.md and results/soak.json. SOAK_ARGS passes options through:
# SOAK_ARGS="--failover --workflows 5000" runs it on a primary + synchronous standby with
# failovers and crash-restarts and writes results/failover.md and results/failover.json.
soak: setup pg-start
	$(BIN)/python -m prove.soak $(SOAK_ARGS)

# results/INDEX.md and .json: is each result current, stale, dirty (docs/results.md#current)?
# Also marks each stale result's Markdown with a banner under its heading.
index: setup
	$(BIN)/python -m prove.freshness

# Regenerate every result of prove/results_sources.yaml in turn (hours), then the index.
# Resumes after an interruption (.data/refresh/state.json): finished steps are skipped while
# the code they measure is unchanged. FRESH=1 starts over; STALE_ONLY=1 runs only the results
# the index says are not current; REFRESH_ARGS passes options (--only NAME, --list).
refresh: setup pg-start
	$(BIN)/python -m prove.refresh $(if $(FRESH),--fresh) $(if $(STALE_ONLY),--stale-only) $(REFRESH_ARGS)

# Debian's chromium for the console's browser tests (Playwright drives it by executable_path;
# nothing is downloaded by Playwright itself). Needs root when chromium is missing.
browser:
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)

# A screenshot of each console page under results/console/ (the console's browser tests).
console-shots: setup pg-start browser
	ILR_CONSOLE_SHOTS=results/console $(BIN)/python -m pytest runtime/tests/test_console.py -q

clean:
	-$(BIN)/interlock pg stop
	rm -rf .data $(VENV) .pytest_cache .ruff_cache .hypothesis

# `make tlc` and `make tlc-quick` (the model checker) live beside the models.
-include models/tlc.mk
