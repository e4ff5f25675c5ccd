# One entry point for set-up, the main job and the tests. `make demo` needs no root and no
# hardware; `make test` also installs the Debian packages the tests use when run as root.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
OUT ?= out/demo
TEST_WORKERS ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: setup system-packages system-deps demo test lint docs bench clean

$(BIN)/kvwear: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,cluster,docs]'
	touch $@

setup: $(BIN)/kvwear

# Debian packages first: on a fresh Debian `python3 -m venv` needs python3-venv, which they include.
system-packages:
	bash scripts/install-system-deps.sh

system-deps: system-packages setup
	bash scripts/setup-bcc.sh $(VENV)

# The main job: a synthetic multi-round workload on Kimi-K3 through five policies, replayed on the
# embedded FTL emulator; the report is $(OUT)/report/report.html. Rerunning resumes.
demo: setup
	$(BIN)/kvwear run -o $(OUT) --resume
	@echo "kvwear is installed in $(VENV): 'source $(VENV)/bin/activate' puts it on your PATH"

# Each phase prints its wall time (scripts/phase.sh); the tests run on one worker per core
# (pytest-xdist) and list the ten slowest. Workers take one test at a time (--maxschedchunk 1),
# the slow modules first (tests/conftest.py): by default each worker is handed a quarter of its
# share up front, and the one handed the slow tests finished minutes after the other.
test: system-deps
	bash scripts/phase.sh ruff $(BIN)/ruff check .
	bash scripts/phase.sh mypy $(BIN)/mypy
	NO_MKDOCS_2_WARNING=1 bash scripts/phase.sh docs $(BIN)/mkdocs build --strict --quiet
	bash scripts/phase.sh pytest $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --maxschedchunk 1 --durations=10

lint: setup
	$(BIN)/ruff check . && $(BIN)/mypy

# bench/frontier.py's default is its whole form (every workload, both models: ~50 min on 2 cores);
# make bench runs its quick Mooncake x Kimi-K3 case so that the whole target stays <= 20 min.
FRONTIER_BENCH_ARGS ?= --quick --models kimi-k3 --only mooncake

# The docs site into site/ (the reference pages are generated from the code as it builds).
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: setup
	for b in bench/[!_]*.py; do \
	  case $$b in bench/frontier.py) args="$(FRONTIER_BENCH_ARGS)";; *) args="";; esac; \
	  echo "== $$b $$args"; $(BIN)/python $$b $$args || exit 1; done

clean:
	rm -rf $(VENV) out site
