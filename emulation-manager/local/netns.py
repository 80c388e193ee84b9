"""The host side of a local run: one network namespace per instance, a Linux
bridge joining them, one veth pair each, addresses and hosts files.

Everything goes through pyroute2 (netlink) and `nsexec` (namespaces): no `ip`
processes.  Each object is written to the run's journal before it is made
(see rundir), so a crash at any point leaves a journal that names all of it.
"""

from __future__ import annotations

import os
from pathlib import Path

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from collapsar.errors import KernelError
from collapsar.manager.addressing import InstanceNet, NetworkPlan
from collapsar.manager.local import firewall
from collapsar.manager.local.rundir import Journal
from collapsar.manager.nsexec import InNetns, create_netns
from collapsar.manager.run.stages import StageClock
from collapsar.model import HOST_CONGESTION_CONTROL

HOSTS_ROOT = Path("/etc/netns")  # where `ip netns exec` looks for per-namespace files
AVAILABLE_CONTROLS = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
MODULES = Path("/lib/modules")


def check_congestion_control(name: str) -> None:
    """Before anything is built: the kernel has `name`, or can load it (root
    loads tcp_<name> when a namespace asks for it)."""
    available = AVAILABLE_CONTROLS.read_text().split()
    if name in available:
        return
    release = os.uname().release
    module = MODULES / release / "kernel/net/ipv4"
    if not any(module.glob(f"tcp_{name}.ko*")):
        raise KernelError(
            f"experiment: congestion-control: {name}: this kernel ({release}) has no tcp_{name} "
            f"(available: {' '.join(available)}); fix: a kernel with CONFIG_TCP_CONG_{name.upper()}, "
            f"or leave the key out to use the host's default"
        )


def set_congestion_control(netns: str, name: str) -> None:
    """TCP in the namespace uses `name` (a new namespace starts with the host's default)."""
    with InNetns(netns):
        fd = os.open(HOST_CONGESTION_CONTROL, os.O_WRONLY)  # the entered namespace's own
    try:
        os.write(fd, name.encode())
    except OSError as error:
        raise KernelError(f"netns {netns}: cannot set tcp_congestion_control to {name}: {error}") from None
    finally:
        os.close(fd)


def hosts_file(netns: str) -> Path:
    return HOSTS_ROOT / netns / "hosts"


class HostNetwork:
    """Builds (and knows) the bridge and namespaces of one run."""

    def __init__(self, plan: NetworkPlan, journal: Journal, congestion_control: str | None = None):
        self.plan = plan
        self.journal = journal
        self.congestion_control = congestion_control
        self._ipr = IPRoute()
        self._bridge_index: int | None = None

    def close(self) -> None:
        self._ipr.close()

    def _index(self, ifname: str) -> int:
        # A targeted RTM_GETLINK: link_lookup() dumps every link of the host,
        # which makes a start of N instances cost O(N^2).
        (reply,) = self._ipr.link("get", ifname=ifname)
        return reply["index"]

    def build_bridge(self) -> None:
        name = self.plan.bridge
        self.journal.record("bridge", name=name)
        try:
            self._ipr.link("add", ifname=name, kind="bridge")
            index = self._index(name)
            self._ipr.link("set", index=index, state="up")
        except NetlinkError as error:
            raise KernelError(f"bridge {name}: cannot create it: {error.args[-1]}") from None
        self._bridge_index = index
        firewall.allow_bridge(name, f"collapsar {self.plan.run_id}", self.journal.record)

    def build_instance(self, net: InstanceNet, hosts_text: str, clock: StageClock) -> None:
        """Namespace, hosts file, veth pair on the bridge, address, links up
        (each part timed per instance on `clock`, docs/scale.md)."""
        self.journal.record("netns", name=net.netns, instance=net.instance)
        try:
            with clock.item("network: namespace"):
                inode = create_netns(net.netns)
        except OSError as error:
            raise KernelError(f"instance {net.instance}: cannot create netns {net.netns}: {error}") from None
        self.journal.record("netns_inode", name=net.netns, inode=inode)
        if self.congestion_control is not None:
            with clock.item("network: congestion control"):
                set_congestion_control(net.netns, self.congestion_control)
        with clock.item("network: hosts file"):
            self._write_hosts(net.netns, hosts_text)
        self.journal.record("veth", name=net.host_veth, instance=net.instance)
        try:
            with clock.item("network: veth"):
                self._ipr.link(
                    "add", ifname=net.host_veth, kind="veth", peer={"ifname": net.ifname, "net_ns_fd": net.netns}
                )
            with clock.item("network: bridge port"):
                index = self._index(net.host_veth)
                self._ipr.link("set", index=index, master=self._bridge_index, state="up")
            with clock.item("network: addresses"):
                self._configure_inside(net)
        except NetlinkError as error:
            raise KernelError(
                f"instance {net.instance}: cannot wire {net.host_veth} <-> "
                f"{net.netns}/{net.ifname} ({net.ip}): {error.args[-1]}"
            ) from None

    @staticmethod
    def _configure_inside(net: InstanceNet) -> None:
        """Inside the namespace: loopback up, the address, the interface up."""
        with InNetns(net.netns):
            inner = IPRoute()
        try:
            (lo,) = inner.link_lookup(ifname="lo")
            inner.link("set", index=lo, state="up")
            (eth,) = inner.link_lookup(ifname=net.ifname)
            inner.addr("add", index=eth, address=net.ip, prefixlen=net.prefixlen)
            inner.link("set", index=eth, state="up")
        finally:
            inner.close()

    def _write_hosts(self, netns: str, text: str) -> None:
        path = hosts_file(netns)
        self.journal.record("hosts", path=str(path))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)

    def build(self, clock: StageClock | None = None) -> None:
        """The bridge, then each instance (timed per instance on `clock`)."""
        clock = clock or StageClock()
        if self.congestion_control is not None:
            check_congestion_control(self.congestion_control)
        self.build_bridge()
        hosts_text = self.plan.hosts_text()
        for net in self.plan.instances:
            with clock.item("network"):
                self.build_instance(net, hosts_text, clock)
