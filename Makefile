# Two commands on a fresh machine: `make demo` and `make test` (each sets up .venv first).
# PYTHON picks the interpreter the virtual environment is made from; VENV where it lives.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.jaxsparse-installed

.PHONY: demo test bench lint clean

$(STAMP): pyproject.toml setup.py $(wildcard jaxsparse/kernels/native/*)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,examples,bench]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/quickstart.py

# The suite is mostly single-threaded XLA compilation: one pytest worker per core.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --dist worksteal

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

lint: $(STAMP)
	$(BIN)/ruff check jaxsparse tests examples benchmarks
	$(BIN)/ruff format --check jaxsparse tests examples benchmarks

clean:
	rm -rf $(VENV) .venv-* .pytest_cache
