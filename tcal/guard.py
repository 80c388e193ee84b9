"""Guards: every path *to* an instance cut with one netlink message.

An instance that disconnects, crashes or leaves is unreachable from all the
others.  Cutting it in each of their trees costs one netlink batch per
namespace, about 10 us of kernel time each with the rtnl lock held: 4 ms at
400 instances, the floor under a timeline step's lateness (issue 20).  A
guard cuts it once, where every packet to the instance passes: at clsact
egress of its veth's host side (its bridge port, in the host's namespace), a
direct-action eBPF program that drops whatever it sees (bpf/guard.c),
filtered to IPv4 as the trees' cuts are (ARP still answers across a cut, as
it does across a cut path).  All guards share one socket in the host's
namespace: a step that isolates or brings back any number of instances is
one batch.

What differs from cutting in the senders' trees: a packet to a guarded
instance is dropped after its sender's shaping, not before, so it spends its
path's rate and its sender's egress bucket on the way, as a packet sent
towards a failed link does.  The senders' trees keep their classes (each
destination still pointing at its own), so bringing the instance back is one
message too when its paths come back as they were.

The program is loaded once per `Guards` (its descriptor is what each filter
is created with); a clsact is added to an interface the first time it is
guarded and left there until `close` (an idle clsact costs a branch per
packet).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Mapping

from collapsar.errors import KernelError
from collapsar.tcal import nlmsg as m
from collapsar.tcal.counters import library_error, load_library, need_btf
from collapsar.tcal.nlsock import KernelFailure, RouteSocket, interface_index

GUARD_PRIO = 1
GUARD_HANDLE = 1
PROGRAM_NAME = "cx_guard"


def load_program() -> int:
    """The drop program's descriptor (EnvironmentProblem or KernelError if it
    cannot load: no eBPF, not root, the library not built)."""
    need_btf("the guard's program")
    lib = load_library()
    fd = lib.cx_guard_load()
    if fd < 0:
        raise library_error(lib, "the guard's program", "-", None, "load")
    return fd


class Guards:
    """The guards of one run's instances.  `host_ifnames`: instance -> the
    host-side name of its veth, in `netns` (None: the one this process runs
    in, where a local run's bridge is)."""

    def __init__(self, host_ifnames: Mapping[str, str], netns: str | None = None):
        self._ifnames = dict(host_ifnames)
        self._netns = netns
        self._fd = load_program()
        self._sock = RouteSocket(netns)
        self._ifindex: dict[str, int] = {}
        self._clsact: set[str] = set()  # instances whose interface has our clsact
        self._foreign: set[str] = set()  # ... someone else's (used, never deleted)
        self.on: set[str] = set()  # guarded now (or from the step being prepared on)

    def set(self, on: Iterable[str] = (), off: Iterable[str] = ()) -> None:
        """Guard `on`, unguard `off`, in one batch (queued on a step being
        prepared, like every tree's requests).  A refusal leaves the refused
        instances as they were and is raised."""
        reqs: list[m.Request] = []
        turned_on: set[str] = set()
        for instance in on:
            if instance in self.on:
                continue
            index = self._index(instance)
            if instance not in self._clsact and instance not in self._foreign:
                reqs.append(m.Request(m.RTM_NEWQDISC, m.CREATE, m.clsact(index), f"{instance}: add clsact", instance))
                self._clsact.add(instance)
            body = m.bpf_filter(index, m.CLSACT_EGRESS, GUARD_PRIO, GUARD_HANDLE, self._fd, PROGRAM_NAME)
            what = f"{instance}: guard (cut every path to it)"
            reqs.append(m.Request(m.RTM_NEWTFILTER, m.CREATE, body, what, instance))
            turned_on.add(instance)
            self.on.add(instance)
        for instance in off:
            if instance not in self.on:
                continue
            body = m.filter_prio_delete(self._index(instance), m.CLSACT_EGRESS, GUARD_PRIO)
            reqs.append(m.Request(m.RTM_DELTFILTER, 0, body, f"{instance}: lift its guard", instance))
            self.on.discard(instance)
        if not reqs:
            return

        def then(failures: list[KernelFailure]) -> None:
            real = []
            for failure in failures:
                instance = failure.request.key or ""  # every request here names its instance
                if failure.request.msg_type == m.RTM_NEWQDISC:
                    self._clsact.discard(instance)  # not made: not ours to delete
                    if failure.errno == errno.EEXIST:  # someone's clsact: the guard goes on it
                        self._foreign.add(instance)
                        continue
                elif instance in turned_on:
                    self.on.discard(instance)
                else:
                    self.on.add(instance)
                real.append(failure)
            if real:
                raise KernelError("guards: " + "; ".join(map(str, real)))

        self._sock.submit(reqs, then)

    def close(self) -> None:
        """Remove every guard and our clsacts; an interface gone already is
        what we wanted.  A second call does nothing."""
        if self._fd < 0:
            return
        reqs = [
            m.Request(
                m.RTM_DELTFILTER,
                0,
                m.filter_prio_delete(self._ifindex[i], m.CLSACT_EGRESS, GUARD_PRIO),
                f"{i}: lift its guard",
                i,
            )
            for i in sorted(self.on - self._clsact)  # on our clsacts they go with them
        ]
        reqs += [
            m.Request(m.RTM_DELQDISC, 0, m.clsact(self._ifindex[i]), f"{i}: delete clsact", i)
            for i in sorted(self._clsact)
        ]
        failures = self._sock.execute(reqs) if reqs else []
        self._sock.close()
        os.close(self._fd)
        self._fd = -1
        self._clsact.clear()
        self.on.clear()
        real = [f for f in failures if f.errno not in (errno.ENOENT, errno.EINVAL, errno.ENODEV)]
        if real:
            raise KernelError("guards: " + "; ".join(map(str, real)))

    def _index(self, instance: str) -> int:
        index = self._ifindex.get(instance)
        if index is None:
            index = self._ifindex[instance] = interface_index(self._netns, self._ifnames[instance])
        return index
