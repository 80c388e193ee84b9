"""Bandwidth sharing in container mode: one manager per node, peers found in DNS.

The cores a manager owns are those of its node's containers, which come,
go, restart and move: every period the run hands over the cores it has now
(`ManagerSharing.own`), so the metadata bus speaks for exactly those.

Compose (one host, no bootstrapper): one manager, `aeron:ipc` only, the
media driver in the manager's own namespace (the host's).

Swarm: the managers of the nodes talk `aeron:udp` over the experiment's
overlay.  The manager runs on the host network, where overlay addresses do
not route, so its media driver runs inside the bootstrapper's network
namespace (a container of the same stack on the same node, on the overlay by
design): it listens on the bootstrapper's overlay address, and the peers are
the other bootstrapper tasks, `tasks.STACK_collapsar-bootstrap` in the
overlay's DNS.  No broadcast, no node count: a node that joins later is
found at the next rescan.  The metadata never crosses a shaped interface:
only the experiment's instances are shaped, and bootstrappers are not
instances.

The run's metadata key (sharing/key.py): on Swarm, the secret the stack grants
the bootstrapper, read through /proc/PID/root of the bootstrapper's main
process (this manager runs in the host's PID namespace), so the key is in
no environment and no container other than the bootstrapper holds it; a
bootstrapper without it (a stack from an older `collapsar generate`) leaves
this node's managers to share among their own instances, and says so.  Compose
has one manager, which makes a key in memory.
"""

from __future__ import annotations

from collections.abc import Callable

from collapsar.deploy.naming import BOOTSTRAP_SERVICE, METADATA_KEY_SECRET, NETWORK
from collapsar.manager.container.dnsaddr import DnsAddresses
from collapsar.manager.sharing.bus import METADATA_PORT
from collapsar.manager.sharing.key import KeyFileError, new_key, read_key_file
from collapsar.manager.sharing.local import ManagerSharing

# Where a node's manager finds the key: the bootstrapper's secret mount.
SECRET_PATH = "/proc/{pid}/root/run/secrets/" + METADATA_KEY_SECRET


class SwarmPeers:
    """The other nodes' managers, ip:port, from the overlay's DNS."""

    def __init__(self, dns: DnsAddresses, own_ip: str, port: int = METADATA_PORT):
        self.dns, self.own_ip, self.port = dns, own_ip, port

    def __call__(self) -> list[str]:
        return [f"{ip}:{self.port}" for ip in self.dns.task_addresses(BOOTSTRAP_SERVICE) if ip != self.own_ip]


def container_sharing(
    run, say: Callable[[str], None], *, bootstrapper: dict | None = None, dns: DnsAddresses | None = None
) -> tuple[ManagerSharing, SwarmPeers | None]:
    """The sharing of `run` (a ContainerRun); on Swarm `bootstrapper` is the
    engine's inspection of this node's bootstrapper container and `dns` asks
    in its namespace.  Returns it and, on Swarm, what finds the peers."""
    listen, peers, key = None, None, None
    prefix: tuple[str, ...] = ()
    if bootstrapper is not None and dns is not None:
        own_ip = overlay_address(bootstrapper)
        key = swarm_key(bootstrapper, say)
        if own_ip is None:
            say(
                "warning: sharing: the bootstrapper has no address on the overlay; "
                "this node's managers hear only each other"
            )
        elif key is not None:
            listen = f"{own_ip}:{METADATA_PORT}"
            prefix = ("nsenter", f"--net=/proc/{bootstrapper['State']['Pid']}/ns/net", "--")
            peers = SwarmPeers(dns, own_ip)
    sharing = ManagerSharing(
        source=run.experiment.source,
        instances=run.instances,
        cores={},
        netem=run.netem,
        timeline=run.timeline,
        key=key or new_key(),
        lock=run.lock,
        aeron_dir=f"/dev/shm/collapsar-{run.options.experiment_id}-aeron",
        log_path=None,
        say=say,
        listen=listen,
        driver_prefix=prefix,
    )
    return sharing, peers


def swarm_key(bootstrapper: dict, say: Callable[[str], None]) -> bytes | None:
    """The run's key from the bootstrapper's secret, or None (said why)."""
    try:
        return read_key_file(SECRET_PATH.format(pid=bootstrapper["State"]["Pid"]))
    except KeyFileError as error:
        say(
            f"warning: sharing: {error}; the stack grants no key to its bootstrapper (regenerate it with "
            f"`collapsar generate --swarm`): this node's managers share among their own instances only"
        )
        return None


def overlay_address(inspection: dict) -> str | None:
    """The container's address on its stack's experiment overlay (the
    generated files put the bootstrapper on it and on nothing else)."""
    networks = inspection.get("NetworkSettings", {}).get("Networks") or {}
    for name, network in sorted(networks.items()):
        if name.endswith(f"_{NETWORK}") and network.get("IPAddress"):
            return network["IPAddress"]
    return None
