"""Keep a virtual machine's CPUs from halting while a run needs its timers.

A CPU with nothing to run halts, and on a virtual machine a halted CPU
runs again only when the hypervisor gets round to it after its timer fires.
On an oversubscribed host that is late: measured on this project's
development VM (2 vCPUs) with cyclictest, a SCHED_FIFO thread waking every
1 ms at idle was late by up to 24-670 ms within 4 s, and by under 0.1 ms on
average with at most 1-19 ms with a busy loop on each CPU.  Timeline steps,
htb's release of the next packet and the workload's paced sends all wait on
such timers.

So for a run on a virtual machine each CPU gets a busy process under
SCHED_IDLE: the scheduler runs it only when nothing else wants that CPU, so
it takes (almost) nothing from the experiment, but the CPU never halts.
On bare metal a halted core wakes in microseconds and this is off; so it is
inside the VM `collapsar run --vm` boots (collapsar.vm), where the CPUs are
emulated by the host's own threads and a busy guest CPU would take a host
core from the emulator's timer thread.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

from collapsar.vm import IN_VM_VAR

# The spinner, gone when its parent is (start() pins it and lowers its priority).
_SPIN = """\
import ctypes, os, sys
ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
parent = int(sys.argv[1])
while os.getppid() == parent:  # it died before the prctl
    for _ in range(200_000):
        pass
"""


def on_virtual_machine() -> bool:
    """The CPU says it runs under a hypervisor (the `hypervisor` flag), and
    that is not our own software-emulated VM."""
    if os.environ.get(IN_VM_VAR) == "1":
        return False
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return any(line.startswith("flags") and " hypervisor" in line for line in cpuinfo)
    except OSError:
        return False


def _lowest_autogroup(pid: int) -> None:
    """With the kernel's autogroups (sched_autogroup_enabled), CPU time is
    shared between sessions first and by policy only inside one: a
    SCHED_IDLE spinner in a session of its own would get half a busy CPU
    (measured: a CPU-bound loop beside it took 2x as long).  Its session's
    group at nice 19 weighs 15 against 1024 for a normal one."""
    with contextlib.suppress(FileNotFoundError):  # a kernel without autogroups
        with open(f"/proc/{pid}/autogroup", "w") as group:
            group.write("19")


class KeepAwake:
    """One idle-priority busy process per CPU this process may run on."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    @classmethod
    def for_mode(cls, mode: str) -> KeepAwake:
        """mode: "on", "off" or "auto" (on where on_virtual_machine())."""
        awake = cls()
        if mode == "on" or (mode == "auto" and on_virtual_machine()):
            awake.start()
        return awake

    def start(self) -> None:
        for cpu in sorted(os.sched_getaffinity(0)):
            proc = subprocess.Popen(
                [sys.executable, "-c", _SPIN, str(os.getpid())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            self.procs.append(proc)
            os.sched_setscheduler(proc.pid, os.SCHED_IDLE, os.sched_param(0))
            os.sched_setaffinity(proc.pid, {cpu})
            _lowest_autogroup(proc.pid)

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()  # Popen ignores a process already gone
            proc.wait()
        self.procs = []

    def __enter__(self) -> KeepAwake:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
