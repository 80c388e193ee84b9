"""Host limits of a real local run on this host's control groups (cgroup v1
here: separate cpu, cpuset and memory hierarchies; the VM tier runs the
same checks on a stock kernel's cgroup v2, tests/vm/test_limits_vm.py).
The run and its measurements: tests/limits_support.py.  Every group goes
at the end of the run, and with `collapsar cleanup` after a SIGKILL of the
manager."""

from __future__ import annotations

import pytest
from limits_support import killed_and_cleaned, launch, measure, spin_share

from collapsar.manager.local.cgroups import detect

CPU_SHARE = 0.5
TOLERANCE = 0.05  # of the share: the "within 5%"


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    run = launch(tmp_path_factory.mktemp("limits"))
    try:
        return measure(run)
    finally:
        run.abandon()


@pytest.mark.timing  # a starved host gives the spinning instance less than its quota
def test_cpus_caps_a_spinning_instance_at_its_share(tmp_path):
    share, groups = spin_share(tmp_path)
    print(f"busy under cpus 0.5: {share:.4f} of a CPU")
    assert abs(share - CPU_SHARE) <= CPU_SHARE * TOLERANCE, share
    # Its one group: v1's cpu hierarchy (`N:cpu:/collapsar-RUNID/busy`), or v2's (`0::/...`).
    (line,) = groups
    _, controllers, group = line.split(":", 2)
    assert group.endswith("/busy") and group.startswith("/collapsar-")
    if detect().version("cpu") == 2:
        assert controllers == ""
    else:
        assert "cpu" in controllers.split(",")


def test_cpuset_pins_an_instance_and_its_children(measured):
    assert measured.pinned_allowed == ["1", "1"]


def test_memory_limit_ends_in_oom_killed_named_in_the_verdict(measured):
    assert measured.code == 6, measured.stderr
    assert measured.instances["hog"]["status"] == "oom-killed" and measured.instances["hog"]["failed"]
    assert (
        "collapsar: instance hog: was killed by the kernel's OOM killer at its memory limit (memory: 64 MiB)"
        in measured.stderr
    )
    assert "survived" not in measured.stdout
    assert "1 oom-killed" in measured.stdout


def test_the_runs_groups_exist_while_it_runs_and_none_after(measured):
    assert measured.groups_during and not measured.groups_after


def test_cleanup_after_a_sigkill_removes_the_runs_groups(tmp_path):
    during, after_kill, after_cleanup, said = killed_and_cleaned(tmp_path)
    assert during and after_kill == during  # the manager's death leaves them
    assert after_cleanup == []
    # Each instance has one limit, so one group each, besides the run's group per hierarchy.
    assert said.count("removed control group") == len(during) + 3, said
