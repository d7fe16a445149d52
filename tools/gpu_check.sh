#!/usr/bin/env bash
# `make gpu-check`, on a machine with a GPU whose Python already has JAX for it: install in
# place, then the phases named in GPU_CHECK_PHASES, in its order (by default the first
# two, which is what fits the budget):
#   benchmark  the GPU benchmark (benchmarks/gpu.py; its summary table prints last)
#   gpu-tests  the suite with "auto" on the GPU
#   cpu-tests  the CPU-behaviour tests with JAX on the CPU (this jaxlib's CPU path)
#   csr-tiles  the CSR tile sweep (benchmarks/gpu_csr_tiles.py)
#   kernels    each kernel's time in our products, gradient steps and cuSPARSE's, by
#              Nsight Compute (benchmarks/gpu_kernel_times.py)
#   transposed the CSR transposed product by atomics, by a carried transposed structure
#              and by a sort per call (benchmarks/gpu_transposed.py)
#   solve      the tridiagonal solve on the device against the host route
#   linalg     preconditioned CG (ILU(0) on the GPU) against the host sweeps
# The benchmark runs first because its figures are what a short lease is for. Every phase
# runs even when one before it failed, and each has a time limit (an interrupt, after
# which the benchmark and the sweep keep the cases they timed and pytest prints its
# summary) so that the whole check ends within GPU_CHECK_BUDGET_S seconds (480: a 15-minute
# lease's start, one check and a rerun); a phase left under 30 s of it is skipped. The exit
# status says whether all ran and passed. Logs and the JSON results go to $GPU_CHECK_LOGS.
#
# GPU_CHECK_BENCHMARK_ARGS, GPU_CHECK_SWEEP_ARGS and GPU_CHECK_PYTEST_ARGS pass more
# arguments to the benchmark (`--formats csr --ks 1`), the sweep (`--ks 1,8`) and both
# suites (`-vv`, whose per-test lines survive a cut: the suites run with `-q`).
# GPU_CHECK_NATIVE=prebuilt installs without compiling the native CPU kernels, using the
# in-place build that `make gpu-native` made for the GPU machine's Python and jaxlib
# (carried with the tree); the compile there takes about two minutes of the lease.
set -uo pipefail
cd "$(dirname "$0")/.."
python=${GPU_PYTHON:-python3}
logs=${GPU_CHECK_LOGS:-benchmarks/results/gpu-check}
workers=${GPU_CHECK_WORKERS:-14}
budget=${GPU_CHECK_BUDGET_S:-480}
phases=${GPU_CHECK_PHASES:-benchmark gpu-tests}
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

# A phase's limit: its own, or what is left of the budget if less.
limit() {
    local left=$((budget - SECONDS))
    echo $((left < $1 ? left : $1))
}

# No index: the GPU machines reach no network, and pip would wait for it.
build_native=1
if [[ ${GPU_CHECK_NATIVE:-build} == prebuilt ]]; then
    build_native=0
fi
phase install 180 env JAXSPARSE_BUILD_NATIVE=$build_native "$python" -m pip install --quiet \
    --no-index --disable-pip-version-check --no-deps --no-build-isolation -e .
"$python" -c "from jaxsparse.kernels import _native_library as n
print('native CPU kernels:', n.INSTRUCTION_SET or n.UNAVAILABLE_REASON)" 2>&1 | tail -n 1
# Each phase's own limit, cut to what is left of the budget.
run_phase() {
    case $1 in
        benchmark)
            phase benchmark "$(limit "${GPU_CHECK_BENCHMARK_S:-200}")" \
                "$python" benchmarks/gpu.py --out "$logs/gpu.json" ${GPU_CHECK_BENCHMARK_ARGS:-} ;;
        # The fast suite: the `slow` sweeps repeat its code paths, and CI runs them on CPUs.
        # The slowest tests are listed, to keep the phase within its limit.
        gpu-tests)
            phase gpu-tests "$(limit 270)" env XLA_PYTHON_CLIENT_PREALLOCATE=false \
                "$python" -m pytest -q -rfE -n "$workers" -p no:cacheprovider --durations=25 \
                -m "not on_cpu and not slow" ${GPU_CHECK_PYTEST_ARGS:-} ;;
        cpu-tests)
            phase cpu-tests "$(limit 100)" env JAX_PLATFORMS=cpu \
                "$python" -m pytest -q -rfE -n "$workers" -p no:cacheprovider \
                -m "on_cpu and not slow" ${GPU_CHECK_PYTEST_ARGS:-} ;;
        csr-tiles)
            phase csr-tiles "$(limit "${GPU_CHECK_SWEEP_S:-150}")" \
                "$python" benchmarks/gpu_csr_tiles.py --out "$logs/csr-tiles.json" \
                ${GPU_CHECK_SWEEP_ARGS:-} ;;
        kernels)
            local ncu metrics
            ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -n 1)
            metrics=gpu__time_duration.sum,dram__bytes.sum,launch__registers_per_thread
            metrics+=,sm__warps_active.avg.pct_of_peak_sustained_active,lts__t_sector_hit_rate.pct
            phase kernels "$(limit "${GPU_CHECK_KERNELS_S:-90}")" bash -c "$ncu --csv \
                --clock-control none --profile-from-start off --print-units base \
                --metrics $metrics --log-file $logs/ncu.csv \
                $python benchmarks/gpu_kernel_times.py run $logs/calls.txt \
                && $python benchmarks/gpu_kernel_times.py report $logs/ncu.csv $logs/calls.txt" ;;
        transposed)
            phase transposed "$(limit "${GPU_CHECK_TRANSPOSED_S:-120}")" \
                "$python" benchmarks/gpu_transposed.py --out "$logs/transposed.json" ;;
        # Tridiagonal spsolve on the device (cuSPARSE) against the host route and scipy.
        solve) phase solve "$(limit 60)" "$python" benchmarks/solve.py --sections host ;;
        # ILU(0)'s level-scheduled sweeps on the GPU against plain and Jacobi CG and the host
        # fallback (float64, 64^3 unknowns: a size that fits the budget).
        linalg)
            phase linalg "$(limit 90)" "$python" benchmarks/eigen.py --only cg --cg-side 64 ;;
        *) echo "=== unknown phase $1"; status=1 ;;
    esac
}
# A phase that would have under 30 s of the budget is skipped, so the check ends in time.
for name in $phases; do
    if ((budget - SECONDS < 30)); then
        echo "=== $name: skipped, $((budget - SECONDS)) s of the ${budget} s budget left"
        status=1
        continue
    fi
    run_phase "$name"
done
echo "=== total $SECONDS s"
[[ -f $logs/benchmark.log ]] && sed -n '/^== summary/,$p' "$logs/benchmark.log"
exit $status
