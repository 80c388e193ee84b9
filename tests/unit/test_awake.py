"""KeepAwake: one idle-priority busy process per CPU, gone with its parent."""

import os
import subprocess
import sys
import time

from collapsar.manager.run.awake import KeepAwake


def _wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_one_idle_priority_spinner_pinned_to_each_cpu():
    awake = KeepAwake()
    awake.start()
    try:
        cpus = sorted(os.sched_getaffinity(0))
        assert len(awake.procs) == len(cpus)
        for proc, cpu in zip(awake.procs, cpus):
            assert proc.poll() is None
            assert os.sched_getscheduler(proc.pid) == os.SCHED_IDLE
            assert os.sched_getaffinity(proc.pid) == {cpu}
            # Its session's group weighs least (autogroups share CPU time between sessions first).
            if os.path.exists(f"/proc/{proc.pid}/autogroup"):
                with open(f"/proc/{proc.pid}/autogroup") as group:
                    assert group.read().rstrip().endswith(" nice 19")
    finally:
        pids = [proc.pid for proc in awake.procs]
        awake.stop()
    assert awake.procs == [] and all(_wait_gone(pid, 1.0) for pid in pids)


def test_modes():
    for mode, expected in (("off", 0), ("on", len(os.sched_getaffinity(0)))):
        awake = KeepAwake.for_mode(mode)
        try:
            assert len(awake.procs) == expected
        finally:
            awake.stop()


def test_spinners_end_when_their_parent_is_killed():
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import time\nfrom collapsar.manager.run.awake import KeepAwake\n"
                "a = KeepAwake(); a.start(); print(' '.join(str(p.pid) for p in a.procs), flush=True); time.sleep(60)"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    pids = [int(pid) for pid in parent.stdout.readline().split()]
    assert pids
    parent.kill()
    parent.wait()
    assert all(_wait_gone(pid) for pid in pids)
