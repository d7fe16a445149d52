#!/usr/bin/env bash
# `make gpu-check`, on a machine with a GPU whose Python already has JAX for it: install in
# place, the suite with "auto" on the GPU, the CPU-behaviour tests with JAX on the CPU, the
# CSR tile sweep if GPU_CHECK_SWEEP=1, preconditioned CG (ILU(0) on the GPU), then the GPU
# benchmark, whose summary table prints last. Every phase runs even when one before it
# failed (a short GPU lease should bring back all it can); the exit status says whether
# all passed. Logs and the benchmark's JSON go to $GPU_CHECK_LOGS.
set -uo pipefail
cd "$(dirname "$0")/.."
python=${GPU_PYTHON:-python3}
logs=${GPU_CHECK_LOGS:-benchmarks/results/gpu-check}
workers=${GPU_CHECK_WORKERS:-12}
mkdir -p "$logs"
status=0

phase() {
    local name=$1 start=$SECONDS
    shift
    echo "=== $name"
    "$@" >"$logs/$name.log" 2>&1
    local rc=$?
    tail -n 15 "$logs/$name.log"
    echo "=== $name: exit $rc after $((SECONDS - start)) s"
    [[ $rc -eq 0 ]] || status=1
}

phase install "$python" -m pip install --quiet --no-deps --no-build-isolation -e .
phase gpu-tests env XLA_PYTHON_CLIENT_PREALLOCATE=false \
    "$python" -m pytest -q -n "$workers" -p no:cacheprovider -m "not on_cpu"
phase cpu-tests env JAX_PLATFORMS=cpu \
    "$python" -m pytest -q -n "$workers" -p no:cacheprovider -m on_cpu
if [[ ${GPU_CHECK_SWEEP:-0} == 1 ]]; then
    phase csr-tiles "$python" benchmarks/gpu_csr_tiles.py
fi
# ILU(0)'s level-scheduled sweeps on the GPU against plain and Jacobi CG and the host
# fallback (float64, 64^3 unknowns: a size that keeps the whole check within 8 minutes).
phase linalg "$python" benchmarks/eigen.py --only cg --cg-side 64
phase benchmark "$python" benchmarks/gpu.py --out "$logs/gpu.json"
echo "=== total $SECONDS s"
sed -n '/^== summary/,$p' "$logs/benchmark.log"
exit $status
