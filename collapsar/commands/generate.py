"""`collapsar generate FILE (--swarm|--compose) -o OUT`: Docker deployment files.

--swarm writes a stack file for `docker stack deploy -c OUT NAME`; --compose
a file for `docker compose -f OUT up` (or `docker-compose` v1) on one host.
Both carry the topology.  --swarm also writes, beside OUT (in the current
directory for '-'), a fresh key file for the managers' flow metadata, which
the stack declares as a secret: copy it with OUT, keep it as private as the
cluster (see the README's trust model).
The experiment network's subnet is sized for the topology unless --subnet
gives one (which must be big enough).  A link that follows a trace file
goes to the managers as the `set` events its steps compile to (they see
the stack's text, not the files beside the experiment).  See collapsar.deploy.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

# The managers get the experiment in one environment variable, base64: the
# kernel takes at most 128 KiB per variable (MAX_ARG_STRLEN).
MAX_SHIPPED_BYTES = 96 * 1024
TRACED_HEADER = (
    "# {file} as Collapsar compiled it: each step of its link traces is a set\n"
    "# event below (the managers in the containers have no trace files).\n"
)


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="Experiment file (YAML)")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--swarm", action="store_true", help="Write a Docker Swarm stack file")
    mode.add_argument("--compose", action="store_true", help="Write a Docker Compose file (one host)")
    parser.add_argument("-o", "--output", metavar="OUT", required=True, help="Where to write it ('-': stdout)")
    parser.add_argument(
        "--subnet",
        default=None,
        help="IPv4 subnet of the experiment network (default: sized for the topology, from 10.201.0.0)",
    )
    parser.add_argument(
        "--node-headroom",
        type=int,
        default=32,
        metavar="N",
        help="Swarm nodes to reserve addresses for (sizes the subnet only)",
    )
    parser.add_argument("--manager-image", default=None, help="Image of the manager and bootstrapper")
    parser.add_argument("--node-image", default=None, help="Image of services that name none")


def generate_text(
    file: str,
    swarm: bool,
    subnet: str | None = None,
    node_headroom: int = 32,
    manager_image: str | None = None,
    node_image: str | None = None,
) -> str:
    return generate(file, swarm, subnet, node_headroom, manager_image, node_image)[1]


def generate(
    file: str,
    swarm: bool,
    subnet: str | None = None,
    node_headroom: int = 32,
    manager_image: str | None = None,
    node_image: str | None = None,
) -> tuple[str, str]:
    """(experiment id, the file's text)."""
    import yaml

    from collapsar.deploy.naming import IMAGE_MANAGER, IMAGE_NODE, experiment_id
    from collapsar.deploy.stack import DeployOptions, compose_file, replicas_by_service, swarm_stack
    from collapsar.deploy.subnet import check_subnet, size_subnet
    from collapsar.errors import CollapsarError
    from collapsar.manager.experiment import all_instances
    from collapsar.parser import parse_text
    from collapsar.timeline import build_timeline
    from collapsar.yamlout import to_yaml

    if node_headroom < 1:
        raise CollapsarError(f"--node-headroom {node_headroom}: expected at least 1")
    try:
        text = Path(file).read_text()
    except OSError as error:
        raise CollapsarError(f"{file}: cannot read ({error.strerror})") from None
    experiment = parse_text(text, file)
    shipped = text
    if experiment.traces:
        # The managers read the experiment from the stack's own text, with no
        # trace files beside it: it goes with every trace step written out as
        # the `set` event it compiled to (the same timeline, step for step).
        shipped = TRACED_HEADER.format(file=Path(file).name) + to_yaml(experiment)
        if len(shipped.encode()) > MAX_SHIPPED_BYTES:
            trace = experiment.traces[0]
            raise CollapsarError(
                f"{trace.where}: link {trace.a} -> {trace.b}: trace: with every step written out the experiment "
                f"is {len(shipped.encode())} bytes, more than the {MAX_SHIPPED_BYTES} a container's environment "
                "carries to the managers; make the step longer (step: 1s) or the trace shorter, or run it locally"
            )
    timeline = build_timeline(experiment)
    instances = all_instances(timeline)
    chosen = (
        check_subnet(subnet, len(instances), node_headroom) if subnet else size_subnet(len(instances), node_headroom)
    )
    options = DeployOptions(
        experiment_id=experiment_id(experiment, text),
        subnet=chosen,
        topology_text=shipped,
        manager_image=manager_image or IMAGE_MANAGER,
        node_image=node_image or IMAGE_NODE,
    )
    # Compose: a container for every instance ever (late joiners held stopped);
    # Swarm: the instances at t=0, scaled up at each join.
    deployed = timeline.steps[0].state.instances if swarm else instances
    replicas = replicas_by_service(experiment, list(deployed))
    build = swarm_stack if swarm else compose_file
    head = (
        f"# Generated by `collapsar generate {'--swarm' if swarm else '--compose'}` from {file}\n"
        f"# experiment {options.experiment_id}: {len(instances)} instances, subnet {chosen}\n"
    )
    return options.experiment_id, head + yaml.safe_dump(
        build(experiment, replicas, options), sort_keys=False, width=120
    )


def run(args: argparse.Namespace) -> int:
    experiment, text = generate(
        args.file, args.swarm, args.subnet, args.node_headroom, args.manager_image, args.node_image
    )
    if args.swarm:  # where `docker stack deploy` looks for the stack's relative paths
        from collapsar.deploy.naming import key_file_name
        from collapsar.manager.sharing.key import write_key_file

        where = Path.cwd() if args.output == "-" else Path(os.path.abspath(args.output)).parent
        write_key_file(where / key_file_name(experiment))
    if args.output == "-":
        print(text, end="")
    else:
        Path(args.output).write_text(text)
    return 0
