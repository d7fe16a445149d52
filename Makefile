# Two commands on a fresh machine: `make demo` and `make test` (each sets up .venv first).
# PYTHON picks the interpreter the virtual environment is made from; VENV where it lives.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.jaxsparse-installed

.PHONY: demo test bench lint clean gpu-check

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

# On a machine with a GPU whose Python already has JAX for it (GPU machines here have no
# network, so no venv): the suite with "auto" on the GPU, then the GPU benchmark.
GPU_PYTHON ?= python3
# Tests of CPU behaviour (marked `on_cpu`) run in a second pass with JAX on the CPU alone.
gpu-check:
	$(GPU_PYTHON) -m pip install --quiet --no-deps --no-build-isolation -e .
	XLA_PYTHON_CLIENT_PREALLOCATE=false $(GPU_PYTHON) -m pytest -q -n 8 -p no:cacheprovider -m "not on_cpu"
	JAX_PLATFORMS=cpu $(GPU_PYTHON) -m pytest -q -n 8 -p no:cacheprovider -m on_cpu
	$(GPU_PYTHON) benchmarks/gpu.py --out benchmarks/results/gpu.json

lint: $(STAMP)
	$(BIN)/ruff check jaxsparse tests examples benchmarks
	$(BIN)/ruff format --check jaxsparse tests examples benchmarks

clean:
	rm -rf $(VENV) .venv-* .pytest_cache
