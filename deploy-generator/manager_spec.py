"""The one description of the manager container (privileged in effect).

Compose runs it as a service (stack.compose_file); on Swarm, which cannot run
privileged services, the bootstrapper starts it through the Docker API
(collapsar.manager.container.bootstrap) from this same description, so the two modes
cannot drift apart.

Why each setting:
- capabilities, not `privileged`: NET_ADMIN for tc, SYS_ADMIN for setns, the
  /run/netns bind mounts and the counters' bpf() (Debian 12's Docker 20.10
  does not know CAP_BPF; the kernel accepts SYS_ADMIN for it), SYS_PTRACE to
  open other processes' /proc/PID/ns/net, SYS_NICE for the timeline thread's
  real-time priority.  `privileged` asks for every capability the runtime
  knows, and fails on hosts whose bounding set lacks one (this project's CI
  machines lack CAP_SYS_RESOURCE); the default seccomp and AppArmor profiles
  forbid mount/setns/bpf, hence `unconfined`;
- host PID namespace: a container's network namespace is reached through its
  main process, /proc/PID/ns/net, and the engine reports host PIDs;
- host network: the status API and (with sharing) Aeron's UDP between hosts
  use the node's own address, never the emulated network;
- the Docker socket: the events stream, container addresses, and the
  timeline's join/leave/crash;
- /sys/fs/bpf: where BPF objects would be pinned (the counters pin none today);
- shm_size: Aeron's media driver keeps its log buffers in /dev/shm.
"""

from __future__ import annotations

DOCKER_SOCKET = "/var/run/docker.sock"

MANAGER_SPEC: dict = {
    "cap_add": ("NET_ADMIN", "SYS_ADMIN", "SYS_PTRACE", "SYS_NICE"),
    "security_opt": ("seccomp=unconfined", "apparmor=unconfined"),
    "pid_mode": "host",
    "network_mode": "host",
    "shm_size": "512m",
    "volumes": (f"{DOCKER_SOCKET}:{DOCKER_SOCKET}", "/sys/fs/bpf:/sys/fs/bpf"),
}


def manager_environment(experiment_id: str, topology_b64: str) -> dict[str, str]:
    return {"COLLAPSAR_EXPERIMENT": experiment_id, "COLLAPSAR_TOPOLOGY_B64": topology_b64}


def sdk_run_kwargs(image: str, name: str, environment: dict[str, str], labels: dict[str, str]) -> dict:
    """Keyword arguments of docker-py's `containers.run` for the manager."""
    volumes = {}
    for volume in MANAGER_SPEC["volumes"]:
        host, container = volume.split(":")
        volumes[host] = {"bind": container, "mode": "rw"}
    return {
        "image": image,
        "name": name,
        "command": ["collapsar", "manager", "--docker"],
        "environment": environment,
        "labels": labels,
        "detach": True,
        "cap_add": list(MANAGER_SPEC["cap_add"]),
        "security_opt": list(MANAGER_SPEC["security_opt"]),
        "pid_mode": MANAGER_SPEC["pid_mode"],
        "network_mode": MANAGER_SPEC["network_mode"],
        "shm_size": MANAGER_SPEC["shm_size"],
        "volumes": volumes,
        "restart_policy": {"Name": "on-failure", "MaximumRetryCount": 3},
    }
