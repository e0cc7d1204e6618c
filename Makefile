# Set-up is part of every target: a fresh clone needs nothing but python3 (3.11+).
# Every package comes from requirements.lock (exact versions, sha256 hashes); `make lock` refreshes it.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
EXTRAS := train,dev,plot,gaussian,sympy,report,dataframe,spark,parquet,opendp,postgres

.PHONY: demo test test-slow check-lock install lock clean

$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --require-hashes --no-deps -r requirements.lock
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	$(BIN)/pip check
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/pure-dp-mf reproduce --quick --out reproduce_out

test: $(STAMP)
	$(BIN)/ruff check pure_dp_mf tests benchmarks tools
	$(BIN)/ruff format --check pure_dp_mf tests benchmarks tools
	$(BIN)/mypy
	$(BIN)/python -m pytest -n 2 -q -m "not slow" --durations=30

# Long integration runs (the wheel in a fresh venv, Spark restarts, the reproduce report): CI runs them too.
test-slow: $(STAMP)
	$(BIN)/python -m pytest -n 2 -q -m slow --durations=15

# Every installed package is pinned in the lock (and nothing else is installed).
check-lock: $(STAMP)
	$(BIN)/python tools/check_lock.py requirements.lock

# Re-resolve the newest versions the ranges in pyproject.toml allow, with hashes (needs the registry).
lock:
	$(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet "pip-tools==7.7.0"
	.lock-venv/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url \
	    --no-emit-find-links --extra $(EXTRAS) --output-file requirements.lock pyproject.toml
	rm -rf .lock-venv

clean:
	rm -rf $(VENV) reproduce_out
