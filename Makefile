# Set-up is part of every target: a fresh clone needs nothing but python3 (3.11+).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "torch==2.13.0"
	$(BIN)/pip install --quiet -e ".[train,dev,spark,opendp]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/pure-dp-mf reproduce --quick --out reproduce_out

test: $(STAMP)
	$(BIN)/ruff check pure_dp_mf tests benchmarks
	$(BIN)/ruff format --check pure_dp_mf tests benchmarks
	$(BIN)/mypy
	$(BIN)/python -m pytest -n 2 -q --durations=30

clean:
	rm -rf $(VENV) reproduce_out
