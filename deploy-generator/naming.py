"""Names and labels shared by the generated files and the container-mode manager.

Every container of an experiment carries `org.collapsar.experiment` (the
experiment id) and `org.collapsar.service` (the topology service).  Which
replica a container is comes from the engine's own labels: Swarm's task
name `STACK_SERVICE.SLOT.TASKID`, or Compose's container number; replica N
of service `web` is the topology's instance `web-N` (`web` for N = 1).
"""

from __future__ import annotations

import hashlib
import re

from collapsar import __version__
from collapsar.errors import CollapsarError
from collapsar.model import Experiment, instance_name

LABEL_EXPERIMENT = "org.collapsar.experiment"
LABEL_SERVICE = "org.collapsar.service"
LABEL_ROLE = "org.collapsar.role"  # instance | bootstrapper | manager
SWARM_TASK_LABEL = "com.docker.swarm.task.name"
COMPOSE_NUMBER_LABEL = "com.docker.compose.container-number"

IMAGE_MANAGER = f"collapsar/manager:{__version__}"
IMAGE_NODE = f"collapsar/node:{__version__}"  # workload node, iperf3, ping: services without an image
IMAGE_DASHBOARD = f"collapsar/dashboard:{__version__}"

# Written into a container once the manager has shaped and named it: the
# generated files make the workload image's commands wait for it (stack.py,
# collapsar.manager.container.hostsfile).
SHAPED_MARK = "/tmp/collapsar-shaped"
BOOTSTRAP_SERVICE = "collapsar-bootstrap"
MANAGER_SERVICE = "collapsar-manager"
NETWORK = "collapsar"
# The Swarm secret that holds the run's flow-metadata key
# (collapsar.manager.sharing.key): granted to the bootstrapper service alone,
# read there by its node's manager, never given to an instance.
METADATA_KEY_SECRET = "collapsar-metadata-key"
# Docker accepts service names of letters, digits, `_`, `.`, `-`, first a
# letter or digit; stacks prefix them, so keep them short of the 63 limit.
_DOCKER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,47}$")


def experiment_id(experiment: Experiment, text: str) -> str:
    """`NAME-HASH`: the name for people, a hash of the file's text so two
    versions of one experiment never claim each other's containers."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    name = re.sub(r"[^a-z0-9-]", "-", experiment.settings.name.lower()).strip("-") or "experiment"
    return f"{name[:40]}-{digest}"


def key_file_name(experiment: str) -> str:
    """The key file `collapsar generate --swarm` writes beside the stack file."""
    return f"{experiment}.metadata-key"


# The workload image's traces: Swarm's named volume (one per node, prefixed
# with the stack's name), Compose's directory beside the file.
TRACE_VOLUME = "collapsar-workload"


def trace_dir_name(experiment: str) -> str:
    return f"{experiment}.workload"


def check_service_name(name: str, where: str) -> str:
    if not _DOCKER_NAME.match(name) or name in (BOOTSTRAP_SERVICE, MANAGER_SERVICE):
        raise CollapsarError(
            f"{where}service {name}: Docker needs a service name of letters, digits, "
            f"`_`, `.` and `-`, starting with a letter or digit, at most 48 "
            f"characters, other than {BOOTSTRAP_SERVICE} and {MANAGER_SERVICE}"
        )
    return name


def replica_of(labels: dict[str, str]) -> int | None:
    """The replica number (1-based) a container is, from the engine's labels."""
    task = labels.get(SWARM_TASK_LABEL)
    if task:
        # STACK_SERVICE.SLOT.TASKID; a global service's task has the node id
        # where the slot would be, and is never an instance.
        parts = task.rsplit(".", 2)
        return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None
    number = labels.get(COMPOSE_NUMBER_LABEL)
    return int(number) if number and number.isdigit() else None


def instance_of(labels: dict[str, str], experiment: str) -> str | None:
    """The topology instance a container is, or None when it is not one of
    this experiment's instances."""
    if labels.get(LABEL_EXPERIMENT) != experiment or labels.get(LABEL_ROLE) != "instance":
        return None
    service = labels.get(LABEL_SERVICE)
    replica = replica_of(labels)
    if not service or replica is None:
        return None
    return instance_name(service, replica)
