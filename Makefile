# Two commands on a fresh machine: `make demo` and `make test` (each sets up .venv first).
# PYTHON picks the interpreter the virtual environment is made from; VENV where it lives.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.jaxsparse-installed

.PHONY: demo test bench lint clean gpu-check gpu-compile

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
# network, so no venv): tools/gpu_check.sh runs the suite on the GPU, the CPU-behaviour
# tests (marked `on_cpu`) with JAX on the CPU alone, and the GPU benchmark.
GPU_PYTHON ?= python3
gpu-check:
	GPU_PYTHON=$(GPU_PYTHON) tools/gpu_check.sh

lint: $(STAMP)
	$(BIN)/ruff check jaxsparse tests examples benchmarks tools
	$(BIN)/ruff format --check jaxsparse tests examples benchmarks tools

# Not one of the two commands: compiles every GPU kernel to sm_90a machine code without a
# GPU, in its own environment with the CUDA plugin (about 1.3 GB), on the newest Python
# 3.12+ that pyenv offers (or GPU_COMPILE_PYTHON=...). See tools/gpu_compile.py; its
# options go in GPU_COMPILE_ARGS (e.g. --plant-oversized-block).
GPU_COMPILE_PYTHON ?= $(shell .ci/newest-python)
GPU_COMPILE_VENV := .venv-gpu-compile
GPU_COMPILE_STAMP := $(GPU_COMPILE_VENV)/.jaxsparse-installed

$(GPU_COMPILE_STAMP): pyproject.toml setup.py $(wildcard jaxsparse/kernels/native/*)
	@test -n "$(GPU_COMPILE_PYTHON)" || { echo "gpu-compile needs Python 3.12+: pyenv has none; set GPU_COMPILE_PYTHON"; exit 1; }
	$(GPU_COMPILE_PYTHON) -m venv $(GPU_COMPILE_VENV)
	$(GPU_COMPILE_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(GPU_COMPILE_VENV)/bin/python -m pip install --quiet -e '.[gpu-compile]'
	touch $(GPU_COMPILE_STAMP)

gpu-compile: $(GPU_COMPILE_STAMP)
	JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1 $(GPU_COMPILE_VENV)/bin/python tools/gpu_compile.py $(GPU_COMPILE_ARGS)

clean:
	rm -rf $(VENV) .venv-* .pytest_cache
