"""A container's network namespace, made reachable by name for the TCAL.

TcTree and Counters take a namespace *name* (/run/netns/NAME, iproute2's
convention).  A container's namespace has none: it is reached through its
main process, /proc/PID/ns/net (the manager shares the host's PID
namespace), and bound under /run/netns for as long as the manager shapes
it.  The bind keeps the namespace alive, so it is released as soon as the
container stops: a stopped container's namespace must not outlive it.  The
name carries the pid, so a restarted container (a new namespace) never
reuses the binding of its previous run.
"""

from __future__ import annotations

import os

from pyroute2 import IPRoute

from collapsar.errors import CollapsarError
from collapsar.manager.nsexec import MS_BIND, InNetns, check, mount, netns_path, prepare_run_dir, remove_netns


def binding_name(container_id: str, pid: int) -> str:
    return f"cxd-{container_id[:12]}-{pid}"


def bind(container_id: str, pid: int) -> str:
    """Bind the namespace of `pid` as /run/netns/NAME; return NAME."""
    name = binding_name(container_id, pid)
    prepare_run_dir()  # /run/netns shared, as create_netns makes it
    path = netns_path(name)
    if os.path.exists(path):
        return name  # bound by an earlier scan of this same container run
    os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0))
    try:
        check(mount(f"/proc/{pid}/ns/net", path, None, MS_BIND), f"bind the netns of pid {pid} to {path}")
    except OSError as error:
        os.unlink(path)
        raise CollapsarError(
            f"container {container_id[:12]} (pid {pid}): cannot reach its network "
            f"namespace ({error.strerror}); the manager needs the host's PID "
            f"namespace and CAP_SYS_ADMIN (pid: host, privileged)"
        ) from None
    return name


def release(name: str) -> None:
    remove_netns(name)


def ifname_with(name: str, ip: str) -> str:
    """The interface that holds `ip` inside namespace `name` (eth0 on Compose;
    on Swarm the overlay's, next to docker_gwbridge's)."""
    with InNetns(name):
        ipr = IPRoute()
    try:
        for addr in ipr.get_addr(family=2):
            if addr.get_attr("IFA_ADDRESS") == ip:
                return ipr.get_links(addr["index"])[0].get_attr("IFLA_IFNAME")
    finally:
        ipr.close()
    raise CollapsarError(
        f"namespace {name}: no interface holds {ip}, the container's address on the experiment network"
    )
