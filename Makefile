# episodic — `make help` lists the targets.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: help install up demo test test-fast lint fmt bench eval clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first, the CPU build: a plain resolve would pull the multi-GB CUDA build
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP) ## create ./.venv with the `episodic` command
	@echo "installed: $(BIN)/episodic"

up: $(STAMP) ## run the whole embedded stack in the foreground (Ctrl-C stops it)
	$(BIN)/episodic up

demo: $(STAMP) ## produce the sample journal to a running stack and recall from it
	$(BIN)/episodic produce infra/samples/journal.jsonl
	$(BIN)/episodic recall "checkout OOM" --workspace acme --agent planner

TEST_WORKERS ?= 2
test: $(STAMP) ## run the test suite (unit, contract, integration, e2e) on $(TEST_WORKERS) workers
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist worksteal

test-fast: $(STAMP) ## unit tests only
	$(BIN)/pytest -q tests/unit

lint: $(STAMP) ## ruff (lint + format check), mypy and the import layers (lint-imports)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy schemas episodic streams consumers recall infra stack
	$(BIN)/mypy bench eval
	$(BIN)/lint-imports --no-cache

fmt: $(STAMP) ## format the code
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP) ## benchmarks (each prints its figure next to a same-run baseline)
	$(BIN)/python -m bench.run_all

eval: $(STAMP) ## retrieval quality on LongMemEval (../shared/datasets/longmemeval)
	$(BIN)/python -m eval.longmemeval

clean: ## remove the venv and local data
	rm -rf $(VENV) .episodic .pytest_cache .mypy_cache .ruff_cache
