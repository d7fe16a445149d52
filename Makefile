# Two commands on a fresh machine: `make demo` and `make test` (each sets up .venv first).
# PYTHON picks the interpreter the virtual environment is made from; VENV where it lives.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.jaxsparse-installed

.PHONY: demo test test-slow test-all bench lint docs clean gpu-check gpu-compile gpu-native

# The build requirements go into the venv first and the package builds there
# (--no-build-isolation), so pip does not set up a second environment with its own copy of
# jaxlib for the build, and the kernels compile against the headers of the jaxlib they run
# with. The kernels compile in place (`build_ext --inplace`, where an editable install
# puts them) while pip installs the package and its dependencies, which then builds
# nothing itself (JAXSPARSE_BUILD_NATIVE=0): pip's unpacking no longer waits for the
# compiler. JAXSPARSE_BUILD_NATIVE=1: a C++ error fails the setup instead of leaving an
# older build (or none) in place. NATIVE_VARIANTS=host compiles only the kernel build this
# CPU loads (setup.py), half the compile; CI's newest-Python venv builds both (`all`),
# where the baseline build is checked against the one this CPU loads.
NATIVE_VARIANTS ?= host
$(STAMP): pyproject.toml setup.py $(wildcard jaxsparse/kernels/native/*)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip 'setuptools>=77' 'jaxlib>=0.10.2'
	JAXSPARSE_BUILD_NATIVE=1 JAXSPARSE_NATIVE_VARIANTS=$(NATIVE_VARIANTS) \
		$(BIN)/python setup.py --quiet build_ext --inplace & native=$$!; \
	JAXSPARSE_BUILD_NATIVE=0 $(BIN)/python -m pip install --quiet --no-build-isolation \
		-e '.[test,examples,bench]'; installed=$$?; \
	wait $$native && test $$installed -eq 0
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/quickstart.py

# The suite is mostly single-threaded XLA compilation: one pytest worker per core, and
# XLA's LLVM passes at -O0 (the tests check results, which no LLVM optimization may
# change, not the speed of XLA's code; the native kernels are built as always). The
# exhaustive sweeps (marked `slow`) repeat paths the suite already covers: CI runs them
# once, on the newest Python (`make test-slow`). JAX 0.10's XLA also keeps its older CPU
# loop emitters, which compile the suite's small programs about 2.5 times as fast as its
# fusion emitters; later XLA has only the fusion emitters and stops at a flag it does not
# know, so that flag goes to JAX 0.10 alone.
OLD_CPU_EMITTERS = $(BIN)/python -c "import jaxlib.version as v; \
	print('--xla_cpu_use_fusion_emitters=false' if v.__version__.startswith('0.10.') else '')"
TEST_XLA_FLAGS = XLA_FLAGS="--xla_backend_optimization_level=0 $$($(OLD_CPU_EMITTERS)) $(XLA_FLAGS)"
test: $(STAMP)
	$(TEST_XLA_FLAGS) $(BIN)/python -m pytest -q -n auto --dist worksteal -m "not slow" --durations=15

test-slow: $(STAMP)
	$(TEST_XLA_FLAGS) $(BIN)/python -m pytest -q -n auto --dist worksteal -m slow

# Both at once (CI on the newest Python): one pytest run, whose workers stay busy to its end.
test-all: $(STAMP)
	$(TEST_XLA_FLAGS) $(BIN)/python -m pytest -q -n auto --dist worksteal --durations=15

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

# On a machine with a GPU whose Python already has JAX for it (GPU machines here have no
# network, so no venv): tools/gpu_check.sh runs the GPU benchmark and the suite on the GPU
# within a budget (more phases by GPU_CHECK_PHASES).
GPU_PYTHON ?= python3
gpu-check:
	GPU_PYTHON=$(GPU_PYTHON) tools/gpu_check.sh

# Not one of the two commands: the native CPU kernels built in place here for the GPU
# machine's Python and jaxlib (GPU_NATIVE_PYTHON, GPU_NATIVE_JAXLIB), to carry there with
# the tree and install with GPU_CHECK_NATIVE=prebuilt instead of compiling in the lease.
GPU_NATIVE_PYTHON ?= $(shell ls -d $$HOME/.pyenv/versions/3.12.*/bin/python 2>/dev/null | tail -n 1)
GPU_NATIVE_JAXLIB ?= 0.11.2
GPU_NATIVE_VENV := .venv-gpu-native

gpu-native:
	@test -n "$(GPU_NATIVE_PYTHON)" || { echo "gpu-native needs Python 3.12: set GPU_NATIVE_PYTHON"; exit 1; }
	test -x $(GPU_NATIVE_VENV)/bin/python || $(GPU_NATIVE_PYTHON) -m venv $(GPU_NATIVE_VENV)
	$(GPU_NATIVE_VENV)/bin/python -m pip install --quiet jaxlib==$(GPU_NATIVE_JAXLIB) setuptools
	JAXSPARSE_BUILD_NATIVE=1 $(GPU_NATIVE_VENV)/bin/python setup.py build_ext --inplace \
		--build-temp build/gpu-native

NATIVE_SOURCES := $(wildcard jaxsparse/kernels/native/*.cc jaxsparse/kernels/native/*.h)

lint: $(STAMP)
	$(BIN)/ruff check jaxsparse tests examples benchmarks tools docs/hooks
	$(BIN)/ruff format --check jaxsparse tests examples benchmarks tools docs/hooks
	$(BIN)/clang-format --dry-run --Werror $(NATIVE_SOURCES)

# The documentation site (mkdocs.yml) in its own environment: the package without its
# native kernels (the site only reads it) and the `docs` extra. `--strict` fails on a
# broken link or a missing reference.
DOCS_VENV := .venv-docs
DOCS_STAMP := $(DOCS_VENV)/.jaxsparse-installed

$(DOCS_STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/python -m pip install --quiet --upgrade pip
	JAXSPARSE_BUILD_NATIVE=0 $(DOCS_VENV)/bin/python -m pip install --quiet -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict

# Not one of the two commands: compiles every GPU kernel to sm_90a machine code without a
# GPU, in its own environment with the CUDA plugin (about 1.3 GB), on the newest Python
# 3.12+ that pyenv offers (or GPU_COMPILE_PYTHON=...). See tools/gpu_compile.py; its
# options go in GPU_COMPILE_ARGS (e.g. --plant-oversized-block).
GPU_COMPILE_PYTHON ?= $(shell .ci/newest-python)
GPU_COMPILE_VENV := .venv-gpu-compile
GPU_COMPILE_STAMP := $(GPU_COMPILE_VENV)/.jaxsparse-installed

$(GPU_COMPILE_STAMP): pyproject.toml setup.py
	@test -n "$(GPU_COMPILE_PYTHON)" || { echo "gpu-compile needs Python 3.12+: pyenv has none; set GPU_COMPILE_PYTHON"; exit 1; }
	$(GPU_COMPILE_PYTHON) -m venv $(GPU_COMPILE_VENV)
	$(GPU_COMPILE_VENV)/bin/python -m pip install --quiet --upgrade pip
	JAXSPARSE_BUILD_NATIVE=0 $(GPU_COMPILE_VENV)/bin/python -m pip install --quiet -e '.[gpu-compile]'
	touch $(GPU_COMPILE_STAMP)

# The native CPU kernels are not built there (GPU programs only), so their warning that
# CPU products take the XLA path is silenced.
gpu-compile: $(GPU_COMPILE_STAMP)
	JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1 $(GPU_COMPILE_VENV)/bin/python \
		-W "ignore:jaxsparse:RuntimeWarning" tools/gpu_compile.py $(GPU_COMPILE_ARGS)

clean:
	rm -rf $(VENV) .venv-* .pytest_cache site
