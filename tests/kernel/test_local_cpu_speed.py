"""CPU speed of real local runs on this host's control groups (cgroup v1
here; the VM tier runs the same on a stock kernel's cgroup v2,
tests/vm/test_cpu_speed_vm.py).  The runs and their measurements:
tests/cpu_speed_support.py.  A CPU-bound program achieves the configured
speed (its share of a CPU) within the issue's 5%, on one core and shared
by the threads of two; wl-node calibrates its loop at full speed inside
the limit (at 0.5 and 0.25), and its COMPUTE takes twice as long at speed
0.5 in the default and the loop mode, and not in the wall-clock mode, which
the docs say a quota cannot stretch."""

from __future__ import annotations

import pytest
from cpu_speed_support import compute_latencies, spin_shares

TOLERANCE = 0.05  # of the speed: the "within 5%"
CALIBRATION_TOLERANCE = 0.05  # of the loop's rate at speed 1
# COMPUTE of 40 ms at speed 0.5 (a 5 ms quota per 10 ms period): 80 ms, give
# or take a period's phase and a scheduler tick at either end (x 2 +- 10%).
STRETCH_LOW, STRETCH_HIGH = 1.8, 2.2
WALL_HIGH = 1.2  # a wall-clock deadline passes while throttled: at most a period late


@pytest.mark.timing  # a starved host gives the spinning instance less than its quota
def test_a_cpu_bound_program_runs_at_the_configured_speed_on_one_core(tmp_path):
    (share,) = spin_shares(tmp_path, 'cpuset: "1", cpu-speed: 0.5', 1)
    print(f"one spinner at cpu-speed 0.5 on CPU 1: {share:.4f} of a CPU")
    assert abs(share - 0.5) <= 0.5 * TOLERANCE, share


@pytest.mark.timing
def test_two_threads_on_two_cores_each_run_at_the_configured_speed(tmp_path):
    shares = spin_shares(tmp_path, 'cpuset: "0-1", cpu-speed: 0.25', 2)
    print(f"two spinners at cpu-speed 0.25 on CPUs 0-1: {', '.join(f'{s:.4f}' for s in shares)} of a CPU each")
    assert abs(sum(shares) - 0.5) <= 0.5 * TOLERANCE, shares  # 0.25 x 2 cores of CPU time in all
    assert all(abs(s - 0.25) <= 0.25 * 2 * TOLERANCE for s in shares), shares  # and fairly split


@pytest.fixture(scope="module")
def compute_run(tmp_path_factory):
    return compute_latencies(tmp_path_factory.mktemp("compute"))


@pytest.fixture
def latencies(compute_run):
    return compute_run[0]


def test_wl_node_calibrates_its_loop_at_full_speed_inside_the_limit(compute_run):
    calibrated = compute_run[1]
    print(f"loop calibration, iterations/us: {calibrated}")
    for node in ("slow", "crawl"):  # speed 0.5 and 0.25
        assert abs(calibrated[node] / calibrated["fast"] - 1) <= CALIBRATION_TOLERANCE, calibrated


@pytest.mark.timing
@pytest.mark.parametrize("mode", ["cpu", "loop"])
def test_wl_node_compute_takes_twice_as_long_at_half_speed(latencies, mode):
    fast, slow = latencies[("fast", mode)], latencies[("slow", mode)]
    print(f"COMPUTE 40ms ({mode}): {fast:.1f} ms at speed 1, {slow:.1f} ms at 0.5: x{slow / fast:.3f}")
    assert STRETCH_LOW <= slow / fast <= STRETCH_HIGH, (fast, slow)


@pytest.mark.timing
def test_wl_node_compute_on_the_wall_clock_is_not_slowed(latencies):
    fast, slow = latencies[("fast", "wall")], latencies[("slow", "wall")]
    print(f"COMPUTE 40ms,wall: {fast:.1f} ms at speed 1, {slow:.1f} ms at 0.5")
    assert slow / fast <= WALL_HIGH, (fast, slow)
