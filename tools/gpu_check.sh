#!/usr/bin/env bash
# `make gpu-check`, on a machine with a GPU whose Python already has JAX for it: install in
# place, the GPU benchmark, the suite with "auto" on the GPU, the CPU-behaviour tests with
# JAX on the CPU, the CSR tile sweep if GPU_CHECK_SWEEP=1, the tridiagonal solve on the
# device against the host route, preconditioned CG (ILU(0) on the GPU); the benchmark's
# summary table prints last. The benchmark runs first because its figures are what a short
# lease is for. Every phase runs even when one before it failed, and each has a time limit
# (an interrupt, after which the benchmark keeps the cases it timed and pytest prints its
# summary) so that the whole check ends within GPU_CHECK_BUDGET_S seconds (480: a 15-minute
# lease's start, one check and a rerun). The exit status says whether all passed. Logs and
# the benchmark's JSON go to $GPU_CHECK_LOGS.
set -uo pipefail
cd "$(dirname "$0")/.."
python=${GPU_PYTHON:-python3}
logs=${GPU_CHECK_LOGS:-benchmarks/results/gpu-check}
workers=${GPU_CHECK_WORKERS:-12}
budget=${GPU_CHECK_BUDGET_S:-480}
mkdir -p "$logs"
status=0
export PYTHONUNBUFFERED=1  # a phase stopped at its limit still leaves its log

# phase NAME LIMIT_S COMMAND...: runs COMMAND into $logs/NAME.log, interrupted after
# LIMIT_S seconds (killed 15 s later), and prints the log's tail.
phase() {
    local name=$1 limit=$2 start=$SECONDS
    shift 2
    echo "=== $name (limit ${limit} s)"
    timeout --signal=INT --kill-after=15 "$limit" "$@" >"$logs/$name.log" 2>&1
    local rc=$?
    tail -n 15 "$logs/$name.log"
    echo "=== $name: exit $rc after $((SECONDS - start)) s"
    [[ $rc -eq 0 ]] || status=1
}

# The seconds left of the budget, keeping `reserve` for the phases after this one.
left() { echo $((budget - SECONDS - $1 > 30 ? budget - SECONDS - $1 : 30)); }

# No index: the GPU machines reach no network, and pip would wait for it.
phase install 180 "$python" -m pip install --quiet --no-index --disable-pip-version-check \
    --no-deps --no-build-isolation -e .
phase benchmark "${GPU_CHECK_BENCHMARK_S:-200}" \
    "$python" benchmarks/gpu.py --out "$logs/gpu.json"
# The fast suite: the `slow` sweeps repeat its code paths, and CI runs them on CPUs.
phase gpu-tests "$(left 150)" env XLA_PYTHON_CLIENT_PREALLOCATE=false \
    "$python" -m pytest -q -n "$workers" -p no:cacheprovider -m "not on_cpu and not slow"
phase cpu-tests "$(left 100)" env JAX_PLATFORMS=cpu \
    "$python" -m pytest -q -n "$workers" -p no:cacheprovider -m "on_cpu and not slow"
if [[ ${GPU_CHECK_SWEEP:-0} == 1 ]]; then
    phase csr-tiles 120 "$python" benchmarks/gpu_csr_tiles.py
fi
# Tridiagonal spsolve on the device (cuSPARSE) against the host route and scipy, 10^6 rows.
phase solve 60 "$python" benchmarks/solve.py --sections host
# ILU(0)'s level-scheduled sweeps on the GPU against plain and Jacobi CG and the host
# fallback (float64, 64^3 unknowns: a size that fits the budget).
phase linalg "$(left 0)" "$python" benchmarks/eigen.py --only cg --cg-side 64
echo "=== total $SECONDS s"
sed -n '/^== summary/,$p' "$logs/benchmark.log"
exit $status
