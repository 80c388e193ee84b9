"""CPU speed of real local runs on the stock kernel's cgroup v2 (cpu.max),
where the kernel tier's host has v1 (tests/kernel/test_local_cpu_speed.py,
the same checks, from tests/cpu_speed_support.py): a CPU-bound program
achieves the configured speed within the issue's 5%, on one core and
shared by the threads of two; wl-node calibrates its loop at full speed
inside the limit, and its COMPUTE takes twice as long at speed 0.5 in its
default and loop modes."""

from __future__ import annotations

import pytest
from cpu_speed_support import compute_latencies, spin_shares

from collapsar.manager.local.cgroups import detect

TOLERANCE = 0.05  # of the speed: the "within 5%"
CALIBRATION_TOLERANCE = 0.05  # of the loop's rate at speed 1
STRETCH = {"cpu": (1.8, 2.2), "loop": (1.7, 2.3)}  # 40 ms of COMPUTE at speed 0.5: about 80 ms
# The loop is wider: the VM's CPU is emulated, and a loop of fixed length runs
# 10-25% off its calibration even at speed 1 (measured 44.7-49.9 ms for 40 ms).


def test_the_quota_goes_to_cpu_max_on_cgroup_v2():
    assert detect().version("cpu") == 2


def test_a_cpu_bound_program_runs_at_the_configured_speed_on_one_core(tmp_path, record_property):
    (share,) = spin_shares(tmp_path, 'cpuset: "1", cpu-speed: 0.5', 1)
    record_property("cpu_speed_share", f"{share:.4f}")
    assert abs(share - 0.5) <= 0.5 * TOLERANCE, share


def test_two_threads_on_two_cores_each_run_at_the_configured_speed(tmp_path, record_property):
    """In a run of its own: beside another instance on one of its cores,
    that core's thread waits its turn and the other thread takes the
    instance's quota meanwhile (measured here: 0.226 and 0.275 beside a
    spinner at 0.5; docs/language.md, "CPU speed")."""
    shares = spin_shares(tmp_path, 'cpuset: "0-1", cpu-speed: 0.25', 2)
    record_property("cpu_speed_shares", ", ".join(f"{s:.4f}" for s in shares))
    assert abs(sum(shares) - 0.5) <= 0.5 * TOLERANCE, shares
    assert all(abs(s - 0.25) <= 0.25 * 2 * TOLERANCE for s in shares), shares


@pytest.fixture(scope="module")
def compute_run(tmp_path_factory):
    records = {}
    return (*compute_latencies(tmp_path_factory.mktemp("compute"), records), records)


@pytest.fixture
def latencies(compute_run):
    return compute_run[0]


def test_wl_node_calibrates_its_loop_at_full_speed_inside_the_limit(compute_run, record_property):
    calibrated = compute_run[1]
    record_property("loop_iterations_per_us", str(calibrated))
    for node in ("slow", "crawl"):  # speed 0.5 and 0.25
        assert abs(calibrated[node] / calibrated["fast"] - 1) <= CALIBRATION_TOLERANCE, calibrated


@pytest.mark.parametrize("mode", ["cpu", "loop"])
def test_wl_node_compute_takes_twice_as_long_at_half_speed(latencies, compute_run, mode, record_property):
    fast, slow = latencies[("fast", mode)], latencies[("slow", mode)]
    record_property(f"compute_{mode}_ms", f"{fast:.1f} at speed 1, {slow:.1f} at 0.5")
    for node in ("fast", "slow"):  # each request, to tell a slow window from a slow quota
        sent = compute_run[2][(node, mode)]
        record_property(f"{node}_{mode}_requests", " ".join(f"{at:.2f}s:{ms:.1f}" for at, ms in sent))
    low, high = STRETCH[mode]
    assert low <= slow / fast <= high, (fast, slow)
