"""The experiment network's subnet, sized for the topology.

A fixed /24 (Kollaps's default) breaks past ~250 containers.  The subnet
here holds every instance the experiment ever has (joins included), plus,
per Swarm node, the bootstrapper's address and the overlay's own endpoint;
the node count is not known when the file is written, so `node_headroom`
nodes are reserved (it sizes the subnet only; nothing else depends on it).
"""

from __future__ import annotations

import ipaddress

from collapsar.errors import CollapsarError

DEFAULT_BASE = "10.201.0.0"
DEFAULT_NODE_HEADROOM = 32
_RESERVED = 3  # network address, gateway, broadcast


def parse_subnet(subnet: str, example: str) -> ipaddress.IPv4Network:
    """A user's --subnet as an IPv4 network, or one line naming what was expected."""
    try:
        network = ipaddress.ip_network(subnet, strict=True)
    except ValueError as error:
        raise CollapsarError(f"--subnet {subnet}: expected an IPv4 network such as {example} ({error})") from None
    if network.version != 4:
        raise CollapsarError(f"--subnet {subnet}: expected an IPv4 network such as {example}")
    return network


def addresses_needed(instances: int, node_headroom: int = DEFAULT_NODE_HEADROOM) -> int:
    return instances + 2 * node_headroom + _RESERVED


def size_subnet(instances: int, node_headroom: int = DEFAULT_NODE_HEADROOM, base: str = DEFAULT_BASE) -> str:
    """The smallest network at `base` that holds the experiment: /25 for a
    few instances, /22 for 900, ..."""
    need = addresses_needed(instances, node_headroom)
    prefixlen = 32 - max(need - 1, 1).bit_length()
    if prefixlen < 8:
        raise CollapsarError(f"{instances} instances need {need} addresses: more than a /8 holds")
    return str(ipaddress.ip_network(f"{base}/{prefixlen}", strict=False))


def check_subnet(subnet: str, instances: int, node_headroom: int = DEFAULT_NODE_HEADROOM) -> str:
    """A user's --subnet, checked to be IPv4 and big enough."""
    network = parse_subnet(subnet, f"{DEFAULT_BASE}/16")
    need = addresses_needed(instances, node_headroom)
    if network.num_addresses < need:
        raise CollapsarError(
            f"--subnet {subnet}: holds {network.num_addresses} addresses, the experiment "
            f"needs {need} ({instances} instances + {node_headroom} nodes x 2 + "
            f"{_RESERVED}); expected at least a "
            f"/{32 - max(need - 1, 1).bit_length()}"
        )
    return str(network)
