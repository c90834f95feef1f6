# The two commands in README.md: `make run` and `make test`. Each sets up what it needs first (jobs/setup.sh).
VENV ?= .venv
PY := $(VENV)/bin/python
# Extra Hydra overrides for `make run`, e.g. make run ARGS="spec=suffix max_samples=4". The recipe's shell strips one
# layer of quotes, so Hydra's own quotes go in escaped double quotes: ARGS="... \"dataset.template='{question}'\""
ARGS ?=
# Extra pytest arguments for `make test`, e.g. make test PYTEST_ARGS="-k config"
PYTEST_ARGS ?=

.PHONY: setup run test lint ui gpu-check

setup:
	bash jobs/setup.sh

run: setup
	$(PY) jobs/generate.py $(ARGS)

# jobs/test.sh sets up (jobs/setup.sh; then the Slurm tests' single-node cluster and the UI test's chromium, their
# Debian packages installed when missing) and runs the tests, with llama-server built (once per machine) beside both.
test:
	VENV=$(VENV) bash jobs/test.sh $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check src tests jobs
	$(VENV)/bin/ruff format --check src tests jobs

# The MLflow UI on the default store: open http://127.0.0.1:5000
ui: setup
	$(VENV)/bin/mlflow ui --backend-store-uri sqlite:///outputs/mlflow.db --host 127.0.0.1 --port 5000

# The first thing to run on a GPU machine: every GPU preset on a few prompts, one table (jobs/gpu_check.py).
# Pass its flags with ARGS, e.g. make gpu-check ARGS=--force-cpu (CPU stand-ins, to see the table's shape).
gpu-check: setup
	$(PY) jobs/gpu_check.py $(ARGS)
