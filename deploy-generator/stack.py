"""Topology -> a Swarm stack file or a Compose file, as plain dicts.

One Docker service per topology service, never restarted by the engine
(leave and crash belong to the timeline), labelled with the experiment, on
one experiment network.  Instances that join later: Compose makes a
container for every instance the experiment ever has, and the manager holds
the late ones stopped until their join; a Swarm service starts with the
instances present at t=0, and the manager scales it up at each join (Swarm
numbers the new task's slot like the joined instance).  Then the emulation manager:

- Compose: a `collapsar-manager` service with the capabilities it needs, with the host's PID
  namespace and network, the Docker socket, /sys and /sys/fs/bpf;
- Swarm cannot run privileged services, so a global `collapsar-bootstrap`
  service starts that same privileged manager container on each node through
  the Docker API (manager_spec.py holds the one description of it).  The
  managers of a Swarm run authenticate their flow metadata with a key that
  the stack declares as a secret, from a file beside it
  (`naming.key_file_name`, written by `collapsar generate`), granted to the
  bootstrapper service and to no instance.

Services without an image run in the workload image, whose tools write
their traces to COLLAPSAR_TRACE_DIR: a directory beside the Compose file,
a named volume per node on Swarm (TRACE_DIR_IN_CONTAINER below).

The topology travels in the environment (base64 of the file's text), so the
generated file is self-contained.  Managers do not need a node count: each
one serves the experiment's containers on its own node, and peers are the
bootstrapper tasks, listed by the overlay's DNS as `tasks.collapsar-bootstrap`
(no UDP broadcast).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

from collapsar.cpuspeed import cpu_bandwidth, slowed
from collapsar.deploy.manager_spec import MANAGER_SPEC, manager_environment
from collapsar.deploy.naming import (
    BOOTSTRAP_SERVICE,
    IMAGE_MANAGER,
    IMAGE_NODE,
    LABEL_EXPERIMENT,
    LABEL_ROLE,
    LABEL_SERVICE,
    MANAGER_SERVICE,
    METADATA_KEY_SECRET,
    NETWORK,
    SHAPED_MARK,
    TRACE_VOLUME,
    check_service_name,
    key_file_name,
    trace_dir_name,
)
from collapsar.model import Experiment, Service, service_of
from collapsar.resources import check_mode, format_cpu_list

SWARM_FILE_VERSION = "3.8"
# Compose cannot give each replica its instance name (Swarm's template does,
# below), and the workload tools name their trace files by it: once shaped,
# the container's /etc/hosts holds the manager's block of instance names,
# where this container's address (Docker's own line, under its hostname)
# is listed under its instance name.
INSTANCE_FROM_HOSTS = (
    '[ -n "$COLLAPSAR_INSTANCE" ] || { h=$(cat /etc/hostname); '
    "ip=$(awk -v h=\"$h\" '$2 == h {print $1; exit}' /etc/hosts); "
    'COLLAPSAR_INSTANCE=$(awk -v ip="$ip" -v h="$h" \'$1 == ip && $2 != h {print $2; exit}\' /etc/hosts); '
    "export COLLAPSAR_INSTANCE; }; "
)
# Run by the workload image's containers before their command: wait for the
# manager's mark (container/hostsfile.py), removing one left by an earlier
# start of the same container first.  Says so after 10 s of waiting.
WAIT_FOR_SHAPING = (
    f"rm -f {SHAPED_MARK}; i=0; while [ ! -e {SHAPED_MARK} ]; do i=$((i+1)); "
    f'[ $i -eq 100 ] && echo "collapsar: waiting for the emulation manager to shape this container" >&2; '
    f'sleep 0.1; done; {INSTANCE_FROM_HOSTS}exec "$@"'
)
# Where the workload image's commands write their traces (COLLAPSAR_TRACE_DIR,
# see collapsar.manager.measure.workload), mounted from the host: Compose binds
# a directory beside the generated file, Swarm mounts a named volume, which
# each node creates for its own tasks (a bind needs the directory on every
# node beforehand); files are named by instance, so the nodes' never clash.
TRACE_DIR_IN_CONTAINER = "/collapsar/workload"
_KIB, _MIB = 1024, 1024 * 1024
SECRET_MODE = 0o400  # root in the bootstrapper reads it; nobody else there needs to


@dataclass(frozen=True)
class DeployOptions:
    experiment_id: str
    subnet: str
    topology_text: str
    manager_image: str = IMAGE_MANAGER
    node_image: str = IMAGE_NODE


def replicas_by_service(experiment: Experiment, instances: list[str]) -> dict[str, int]:
    """service -> the highest replica number any instance of it ever has
    (`instances`: every instance of the run, joins included)."""
    counts = {service.name: 0 for service in experiment.services}
    for instance in instances:
        service = service_of(experiment, instance)
        suffix = instance[len(service) + 1 :]
        counts[service] = max(counts[service], int(suffix) if suffix else 1)
    return counts


def _memory(n_bytes: int) -> str:
    """Docker's size syntax, exact: 512M, 1536k, 1000b."""
    if n_bytes % _MIB == 0:
        return f"{n_bytes // _MIB}M"
    if n_bytes % _KIB == 0:
        return f"{n_bytes // _KIB}k"
    return f"{n_bytes}b"


def literal(text: str) -> str:
    """`text` as the container must see it: Compose and `docker stack deploy`
    read `$` in the file as interpolation from the deploying shell (and reject
    `$((`), so a command's own `$VAR` and `$((i+1))` are written `$$`."""
    return text.replace("$", "$$")


def _labels(options: DeployOptions, role: str, service: str | None = None) -> dict[str, str]:
    labels = {LABEL_EXPERIMENT: options.experiment_id, LABEL_ROLE: role}
    if service is not None:
        labels[LABEL_SERVICE] = service
    return labels


def _instance_base(service: Service, options: DeployOptions, congestion_control: str | None) -> dict:
    where = f"{service.where}: " if service.where else ""
    check_service_name(service.name, where)
    spec: dict = {"image": service.image or options.node_image}
    if service.command:
        # The workload image has no entrypoint, so its command can wait for
        # the manager to shape the container, as local mode starts commands
        # only on shaped paths.  An image of the user's own may have an
        # entrypoint that takes the command as its arguments: left as is.
        command = (
            list(service.command)
            if service.image
            else ["sh", "-c", WAIT_FOR_SHAPING, "collapsar-wait", *service.command]
        )
        spec["command"] = [literal(arg) for arg in command]
    spec["environment"] = {
        **{name: literal(value) for name, value in service.env.items()},
        "COLLAPSAR_SERVICE": service.name,
        "COLLAPSAR_EXPERIMENT": options.experiment_id,
    }
    if not service.image:  # the workload image: its tools write traces there
        spec["environment"]["COLLAPSAR_TRACE_DIR"] = TRACE_DIR_IN_CONTAINER
    if service.workdir:
        spec["working_dir"] = literal(service.workdir)
    spec["labels"] = _labels(options, "instance", service.name)
    spec["networks"] = [NETWORK]
    if congestion_control is not None:  # per network namespace: Docker sets it in the container's
        spec["sysctls"] = {"net.ipv4.tcp_congestion_control": congestion_control}
    return spec


def _topology_env(options: DeployOptions) -> dict[str, str]:
    return manager_environment(options.experiment_id, base64.b64encode(options.topology_text.encode()).decode())


def swarm_stack(experiment: Experiment, replicas: dict[str, int], options: DeployOptions) -> dict:
    check_mode(experiment, "swarm")  # no cpuset nor cpu-speed: a Swarm service has neither
    services: dict[str, dict] = {}
    for service in experiment.services:
        spec = _instance_base(service, options, experiment.settings.congestion_control)
        deploy: dict = {
            "mode": "replicated",
            "replicas": replicas[service.name],
            "endpoint_mode": "dnsrr",
            "labels": _labels(options, "instance", service.name),
            "restart_policy": {"condition": "none"},
        }
        # Docker gives a container as much swap again as its memory limit when
        # the node has swap; a 3.8 stack file cannot say otherwise.
        limits = {}
        if service.cpus is not None:
            limits["cpus"] = f"{service.cpus:g}"
        if service.memory_bytes is not None:
            limits["memory"] = _memory(service.memory_bytes)
        if limits:
            deploy["resources"] = {"limits": limits}
        spec["deploy"] = deploy
        # Each task learns its instance name as in local mode (replica 1 is
        # `client`, replica N `client-N`): Swarm expands Go templates in
        # environment values per task.  Compose cannot (its replicas are
        # identical containers): there only COLLAPSAR_SERVICE is set.
        spec["environment"]["COLLAPSAR_INSTANCE"] = (
            f'{{{{if eq .Task.Slot "1"}}}}{service.name}{{{{else}}}}{service.name}-{{{{.Task.Slot}}}}{{{{end}}}}'
        )
        if not service.image:
            spec["volumes"] = [f"{TRACE_VOLUME}:{TRACE_DIR_IN_CONTAINER}"]
        services[service.name] = spec
    services[BOOTSTRAP_SERVICE] = {
        "image": options.manager_image,
        "command": ["collapsar", "manager", "--bootstrap"],
        "environment": {**_topology_env(options), "COLLAPSAR_MANAGER_IMAGE": options.manager_image},
        "volumes": ["/var/run/docker.sock:/var/run/docker.sock"],
        "labels": _labels(options, "bootstrapper"),
        # On the overlay so that `tasks.collapsar-bootstrap` lists one address
        # per node: how managers find their peers.
        "networks": [NETWORK],
        # Mounted at /run/secrets/NAME in the bootstrapper, where its node's
        # manager reads it (container/sharing.py); instances have no secrets.
        "secrets": [{"source": METADATA_KEY_SECRET, "target": METADATA_KEY_SECRET, "mode": SECRET_MODE}],
        "deploy": {
            "mode": "global",
            "endpoint_mode": "dnsrr",
            "labels": _labels(options, "bootstrapper"),
            "restart_policy": {"condition": "on-failure"},
        },
    }
    stack = {
        "version": SWARM_FILE_VERSION,
        "services": services,
        "networks": {
            NETWORK: {
                "driver": "overlay",
                "attachable": True,
                "labels": {LABEL_EXPERIMENT: options.experiment_id},
                "ipam": {"config": [{"subnet": options.subnet}]},
            }
        },
        # `docker stack deploy` reads the file relative to the stack file's
        # directory (stdin's: the current one) and creates the secret.
        "secrets": {METADATA_KEY_SECRET: {"file": f"./{key_file_name(options.experiment_id)}"}},
    }
    if any(not service.image for service in experiment.services):
        # Left behind by `docker stack rm`, with the traces: STACK_collapsar-workload on each node.
        stack["volumes"] = {TRACE_VOLUME: {"labels": {LABEL_EXPERIMENT: options.experiment_id}}}
    return stack


def compose_file(experiment: Experiment, replicas: dict[str, int], options: DeployOptions) -> dict:
    check_mode(experiment, "compose")
    services: dict[str, dict] = {}
    for service in experiment.services:
        spec = _instance_base(service, options, experiment.settings.congestion_control)
        spec["scale"] = replicas[service.name]
        spec["restart"] = "no"
        if slowed(service):
            # One quota for cpus and cpu-speed, as local mode writes it
            # (Docker refuses cpus together with a period).
            bandwidth = cpu_bandwidth(service)
            assert bandwidth is not None
            spec["cpu_period"], spec["cpu_quota"] = bandwidth.period_us, bandwidth.quota_us
        elif service.cpus is not None:
            spec["cpus"] = service.cpus
        if service.cpuset is not None:
            spec["cpuset"] = format_cpu_list(service.cpuset)
        if service.memory_bytes is not None:
            # No swap beyond the limit, as in local mode (Docker's default
            # would allow as much swap again).
            spec["mem_limit"] = spec["memswap_limit"] = _memory(service.memory_bytes)
        if not service.image:  # relative to the Compose file's directory
            spec["volumes"] = [f"./{trace_dir_name(options.experiment_id)}:{TRACE_DIR_IN_CONTAINER}"]
        services[service.name] = spec
    services[MANAGER_SERVICE] = {
        "image": options.manager_image,
        "command": ["collapsar", "manager", "--docker"],
        "environment": _topology_env(options),
        "labels": _labels(options, "manager"),
        "cap_add": list(MANAGER_SPEC["cap_add"]),
        "security_opt": list(MANAGER_SPEC["security_opt"]),
        "pid": MANAGER_SPEC["pid_mode"],
        "network_mode": MANAGER_SPEC["network_mode"],
        "shm_size": MANAGER_SPEC["shm_size"],
        "volumes": list(MANAGER_SPEC["volumes"]),
    }
    # No top-level `name:`: docker-compose v1 (Debian 12's) rejects it; the
    # project name comes from `-p` or the directory.
    return {
        "services": services,
        "networks": {
            NETWORK: {
                "driver": "bridge",
                "labels": {LABEL_EXPERIMENT: options.experiment_id},
                "ipam": {"config": [{"subnet": options.subnet}]},
            }
        },
    }
