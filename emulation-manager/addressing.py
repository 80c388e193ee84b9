"""Names and addresses of one local run: pure, no system calls.

Every kernel object a run makes carries the run id, so two runs (or a run and
its leftovers after a SIGKILL) never share a name, and cleanup can be told
exactly which objects are whose.  Interface names must fit IFNAMSIZ (15
characters), namespace names are file names under /run/netns.
"""

from __future__ import annotations

import ipaddress
import re
import secrets
from dataclasses import dataclass

from collapsar.deploy.subnet import parse_subnet
from collapsar.errors import CollapsarError

IFNAMSIZ = 15
INSTANCE_IFNAME = "eth0"  # the instance's end of its veth, inside its namespace
DEFAULT_SUBNET = "10.77.0.0/16"
_RUN_ID = re.compile(r"^[0-9a-f]{6}$")


def new_run_id() -> str:
    """Six hex digits: short enough to leave room in a 15-character ifname."""
    return secrets.token_hex(3)


def check_run_id(run_id: str) -> str:
    if not _RUN_ID.match(run_id):
        raise CollapsarError(f"run id {run_id!r}: expected six hex digits such as 3fa2c1")
    return run_id


@dataclass(frozen=True)
class InstanceNet:
    """Where one instance lives on this host."""

    instance: str
    index: int  # 1-based position in the run, stable for the whole run
    netns: str
    host_veth: str  # bridge side, in the host namespace
    ifname: str  # instance side, inside `netns`
    ip: str
    prefixlen: int


@dataclass(frozen=True)
class NetworkPlan:
    run_id: str
    subnet: str
    bridge: str
    instances: tuple[InstanceNet, ...]

    def by_instance(self) -> dict[str, InstanceNet]:
        return {net.instance: net for net in self.instances}

    def ip_of(self) -> dict[str, str]:
        return {net.instance: net.ip for net in self.instances}

    def hosts_text(self) -> str:
        """The /etc/hosts every namespace of the run sees: instance names only,
        so `server` resolves to the emulated address and nothing else leaks in."""
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        lines += [f"{net.ip}\t{net.instance}" for net in self.instances]
        return "\n".join(lines) + "\n"


def netns_name(run_id: str, instance: str) -> str:
    # A namespace name is a file name under /run/netns: keep it readable but
    # bounded; the run id prefix alone keeps it unique per run.
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", instance)
    return f"cx-{run_id}-{safe}"[:200]


def plan_network(run_id: str, instances: list[str], subnet: str = DEFAULT_SUBNET) -> NetworkPlan:
    """Give every instance a namespace, a veth and an address from `subnet`.

    Host addresses start at the subnet's second host (the first, e.g.
    10.77.0.1, stays free for a gateway should one ever be needed); the bridge
    itself has no address, so instances cannot reach the host through it.
    """
    check_run_id(run_id)
    network = parse_subnet(subnet, DEFAULT_SUBNET)
    room = network.num_addresses - 3  # network, broadcast, reserved first host
    if len(instances) > room:
        raise CollapsarError(
            f"--subnet {subnet}: room for {max(room, 0)} instances, the experiment "
            f"has {len(instances)}; expected a larger subnet such as {DEFAULT_SUBNET}"
        )
    if len(set(instances)) != len(instances):
        raise CollapsarError("instance names must be unique within a run")
    if len(instances) > 999_999:
        raise CollapsarError(f"{len(instances)} instances: at most 999999 fit the interface names")
    base = int(network.network_address) + 2
    nets = tuple(
        InstanceNet(
            instance=name,
            index=i,
            netns=netns_name(run_id, name),
            host_veth=f"cx{run_id}v{i}",
            ifname=INSTANCE_IFNAME,
            ip=str(ipaddress.IPv4Address(base + i - 1)),
            prefixlen=network.prefixlen,
        )
        for i, name in enumerate(instances, start=1)
    )
    return NetworkPlan(run_id=run_id, subnet=str(network), bridge=f"cx{run_id}br", instances=nets)
