"""Sharded matrices over two processes (2 x 4 CPU devices on 127.0.0.1, `jax.distributed`,
gloo collectives): each process builds its rows only and checks products, gradients and a
CG solve against scipy (`sharding_processes.py`); a killed process makes its peer end
with an error naming the cause, within a bound, instead of hanging; and the sharded
Poisson example runs as two processes by its one command.

Every process is started here and killed here if it outlives its bound.
"""

import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
WORKER = REPO / "tests" / "sharding_processes.py"
# Both processes' checks, compilation included, on a 2-core machine.
CHECKS_BOUND_S = 120
# The peer of a killed process must end within this (the bound; the worker's
# heartbeat timeout is 10 s).
DEAD_PEER_BOUND_S = 60


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(mode: str, tmp_path) -> list[tuple[subprocess.Popen, pathlib.Path, pathlib.Path]]:
    """Both processes of `sharding_processes.py` in `mode`, their output in files."""
    env = {key: value for key, value in os.environ.items() if key != "XLA_FLAGS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    port = free_port()
    processes = []
    for process_id in (0, 1):
        out, err = tmp_path / f"{process_id}.out", tmp_path / f"{process_id}.err"
        with out.open("w") as stdout, err.open("w") as stderr:
            command = [sys.executable, str(WORKER), str(process_id), str(port), mode]
            popen = subprocess.Popen(command, stdout=stdout, stderr=stderr, cwd=REPO, env=env)
        processes.append((popen, out, err))
    return processes


def stop(processes) -> None:
    for popen, _, _ in processes:
        if popen.poll() is None:
            popen.kill()
            popen.wait()


def report(processes) -> str:
    return "\n".join(
        f"--- process {i} (rc {popen.returncode}):\n"
        + out.read_text()[-3000:]
        + err.read_text()[-3000:]
        for i, (popen, out, err) in enumerate(processes)
    )


@pytest.mark.slow  # two processes; the one-process sharded runs are in tests/test_sharding.py
def test_two_processes_load_their_rows_and_match_scipy(tmp_path):
    processes = start("checks", tmp_path)
    deadline = time.monotonic() + CHECKS_BOUND_S
    try:
        for popen, _, _ in processes:
            popen.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        stop(processes)
        raise AssertionError(f"not done in {CHECKS_BOUND_S} s\n" + report(processes)) from None
    for process_id, (popen, out, _) in enumerate(processes):
        text = out.read_text()
        assert popen.returncode == 0 and f"PROCESS {process_id} PASSED" in text, report(processes)
        for check in ("loaded rows", "equal js.shard's", "= the one-process plan's", "CG solve"):
            assert text.count(check) == 2, (check, report(processes))


# A peer in a collective when the other dies gets gloo's error at once (reset or closed,
# depending on where the socket was); one that is not communicating learns it from the
# coordination service's missed heartbeats.
CAUSES = {
    "busy": ("Connection reset by peer", "Connection closed by peer", "stopped sending heartbeats")
}
CAUSES["idle"] = ("stopped sending heartbeats",)


# Two processes and a wait for the survivor's failure per case (idle: the 10 s heartbeat
# timeout): `slow`, beside the two-process test of the fast suite.
@pytest.mark.slow
@pytest.mark.parametrize("mode", sorted(CAUSES))
def test_a_killed_process_makes_its_peer_fail_fast(tmp_path, mode):
    processes = start(mode, tmp_path)
    try:
        deadline = time.monotonic() + CHECKS_BOUND_S
        while not all("READY" in out.read_text() for _, out, _ in processes):
            assert all(popen.poll() is None for popen, _, _ in processes), report(processes)
            assert time.monotonic() < deadline, "not ready in time\n" + report(processes)
            time.sleep(0.2)
        survivor, victim = processes[0][0], processes[1][0]
        victim.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        try:
            survivor.wait(timeout=DEAD_PEER_BOUND_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the peer of a killed process still runs after {DEAD_PEER_BOUND_S} s"
            ) from None
        elapsed = time.monotonic() - killed
    finally:
        stop(processes)
    message = processes[0][2].read_text()
    assert survivor.returncode != 0, report(processes)
    assert any(cause in message for cause in CAUSES[mode]), report(processes)
    assert elapsed < DEAD_PEER_BOUND_S
    print(f"the survivor ended {elapsed:.1f} s after its peer was killed")


# The two-process checks above cover the same path; the example runs in `make test-slow`.
@pytest.mark.slow
def test_sharded_poisson_example_as_two_processes():
    env = {key: value for key, value in os.environ.items() if key != "XLA_FLAGS"}
    result = subprocess.run(
        [sys.executable, "examples/sharded_poisson.py", "--processes", "2", "--N", "10"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=CHECKS_BOUND_S,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "8 devices" in result.stdout and "in 2 process(es)" in result.stdout, result.stdout
    errors = re.findall(r"sharded (?:DIA|CSR): ([\d.e+-]+)\n", result.stdout)
    assert len(errors) == 2 and all(float(error) < 1e-4 for error in errors), result.stdout
    assert re.search(r"sharded DIA (\d+), sharded CSR \1\n", result.stdout), result.stdout
