# Quick start (fresh machine):  make run   |   make test
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
INPUT   ?= ../shared/corpus/policy_docs.csv
DATA    ?= data
PROFILE ?= cpu-small

.PHONY: setup system run serve test test-fast bench clean

setup: system $(VENV)/.setup-stamp

system:
	bash scripts/setup-system.sh

# idempotent: reinstalls only when pyproject.toml changes
$(VENV)/.setup-stamp: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $@

run: setup
	$(BIN)/python -m flows.pipeline --input $(INPUT) --data-dir $(DATA) --profile $(PROFILE)

# the answer page over the main job's data dir (after make run): http://127.0.0.1:8000
serve: setup
	$(BIN)/python -m flows.serve --data-dir $(DATA)

test: setup
	$(BIN)/python -m pytest -q

# the inner loop: every test not marked slow, on two pytest-xdist workers (one per core)
test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow" -n 2

bench: setup
	$(BIN)/python bench/pipeline_bench.py --input $(INPUT)

clean:
	rm -rf $(DATA)
