# One entry point for set-up, the main job and the tests. `make demo` needs no root and no
# hardware; `make test` also installs the Debian packages the tests use when run as root.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
OUT ?= out/demo

.PHONY: setup system-packages system-deps demo test lint docs bench clean

$(BIN)/kvwear: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,cluster,smart,docs]'
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

test: system-deps
	$(BIN)/ruff check .
	$(BIN)/mypy
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check . && $(BIN)/mypy

# The docs site into site/ (the reference pages are generated from the code as it builds).
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: setup
	for b in bench/*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) out site
