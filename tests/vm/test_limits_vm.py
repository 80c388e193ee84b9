"""Host limits of a real local run on the stock kernel's control groups:
cgroup v2 here (one cgroup2 mount offering cpu, cpuset and memory), where
the kernel tier's host has v1 (tests/kernel/test_local_limits.py, the same
checks, from tests/limits_support.py).  Every group goes at the end of the
run, and with `collapsar cleanup` after a SIGKILL of the manager."""

from __future__ import annotations

import pytest
from limits_support import killed_and_cleaned, launch, measure

from collapsar.manager.local.cgroups import CONTROLLERS, detect

CPU_SHARE = 0.5
TOLERANCE = 0.05  # of the share: the "within 5%"


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    run = launch(tmp_path_factory.mktemp("limits"))
    try:
        return measure(run)
    finally:
        run.abandon()


def test_the_stock_kernel_offers_the_controllers_on_cgroup_v2(record_property):
    layout = detect()
    record_property("cgroups", layout.describe([c for c in CONTROLLERS if layout.has(c)]))
    assert {c: layout.version(c) for c in CONTROLLERS if layout.has(c)} == dict.fromkeys(CONTROLLERS, 2)


def test_cpus_caps_a_spinning_instance_at_its_share(measured, record_property):
    # From the run the other checks read (a run takes half a minute to start
    # here; the kernel tier measures it in a run of its own, for its reruns).
    share, groups = measured.share, measured.busy_groups
    record_property("cpu_share", f"{share:.4f}")
    assert abs(share - CPU_SHARE) <= CPU_SHARE * TOLERANCE, share
    (line,) = groups
    assert line.startswith("0::/collapsar-") and line.endswith("/busy")  # the one v2 group


def test_cpuset_pins_an_instance_and_its_children(measured):
    assert measured.pinned_allowed == ["1", "1"]


def test_memory_limit_ends_in_oom_killed_named_in_the_verdict(measured):
    assert measured.code == 6, measured.stderr
    assert measured.instances["hog"]["status"] == "oom-killed" and measured.instances["hog"]["failed"]
    assert (
        "collapsar: instance hog: was killed by the kernel's OOM killer at its memory limit (memory: 64 MiB)"
        in measured.stderr
    )


def test_the_runs_groups_exist_while_it_runs_and_none_after(measured):
    assert measured.groups_during and not measured.groups_after


def test_cleanup_after_a_sigkill_removes_the_runs_groups(tmp_path):
    during, after_kill, after_cleanup, said = killed_and_cleaned(tmp_path)
    assert during and after_kill == during and after_cleanup == []
    assert said.count("removed control group") == len(during) + 3, said
