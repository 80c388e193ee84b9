"""`collapsar manager --docker [FILE]` / `--bootstrap`: container mode.

--docker runs the emulation manager for this experiment's containers on this
node (collapsar.manager.container): it needs the host's PID namespace,
CAP_NET_ADMIN + CAP_SYS_ADMIN and the Docker socket, which is why it runs in
the privileged manager container the generated files describe.  The
experiment comes from FILE or, as the generated files pass it, from
COLLAPSAR_TOPOLOGY_B64; its id (the label on its containers) from
--experiment or COLLAPSAR_EXPERIMENT, else from the file's name and content
as `collapsar generate` computes it.

--bootstrap is the Swarm bootstrapper: it starts that manager container on
this node through the Docker API and removes it when stopped.
"""

from __future__ import annotations

import argparse
import base64
import os
import sys

from collapsar.commands.runopts import add_run_options, duration_us, run_options


def register(parser: argparse.ArgumentParser) -> None:
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--docker", action="store_true", help="Shape this node's containers of the experiment")
    mode.add_argument(
        "--bootstrap", action="store_true", help="Start the privileged manager container on this node (Swarm)"
    )
    parser.add_argument(
        "file", metavar="FILE", nargs="?", default=None, help="Experiment file (default: $COLLAPSAR_TOPOLOGY_B64)"
    )
    parser.add_argument(
        "--experiment",
        default=os.environ.get("COLLAPSAR_EXPERIMENT"),
        help="Experiment id on the containers' org.collapsar.experiment label "
        "(default: $COLLAPSAR_EXPERIMENT, else computed from FILE)",
    )
    add_run_options(parser, status_port=7077, duration_help="Stop after this long from t=0; default: when stopped")
    parser.add_argument(
        "--wait-up",
        default="120s",
        metavar="TIME",
        help="How long to wait for the containers present at t=0 before starting the timeline with those found",
    )


def _topology(args: argparse.Namespace) -> tuple[str, str]:
    from collapsar.errors import CollapsarError

    if args.file:
        try:
            with open(args.file) as handle:
                return handle.read(), args.file
        except OSError as error:
            raise CollapsarError(f"{args.file}: cannot read ({error.strerror})") from None
    encoded = os.environ.get("COLLAPSAR_TOPOLOGY_B64")
    if not encoded:
        raise CollapsarError(
            "no experiment: give FILE or set COLLAPSAR_TOPOLOGY_B64 (the files `collapsar generate` writes set it)"
        )
    return base64.b64decode(encoded).decode(), "<COLLAPSAR_TOPOLOGY_B64>"


def run(args: argparse.Namespace) -> int:
    from collapsar.deploy.naming import IMAGE_MANAGER, experiment_id
    from collapsar.manager.container.engine import connect
    from collapsar.parser import parse_text

    shared = run_options(args)
    wait_up_us = duration_us("--wait-up", args.wait_up)
    text, source = _topology(args)
    experiment = parse_text(text, source)
    if args.no_sharing:
        from collapsar.commands.run import require_sharing_off_allowed

        require_sharing_off_allowed(experiment)
    from collapsar.resources import check_mode

    # The engine applies the limits; a key Swarm cannot honour is refused on this path too.
    check_mode(experiment, "swarm" if args.bootstrap or os.environ.get("COLLAPSAR_BOOTSTRAPPER") else "compose")
    exp_id = args.experiment or experiment_id(experiment, text)
    say = lambda line: print(line, flush=True)  # noqa: E731
    client = connect()
    if args.bootstrap:
        from collapsar.manager.container.bootstrap import bootstrap

        image = os.environ.get("COLLAPSAR_MANAGER_IMAGE", IMAGE_MANAGER)
        return bootstrap(client, exp_id, base64.b64encode(text.encode()).decode(), image, say)
    if os.geteuid() != 0:
        from collapsar.errors import EnvironmentProblem

        raise EnvironmentProblem(
            "collapsar manager --docker needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN)",
            "run it in the privileged manager container the generated files describe",
        )
    from collapsar.manager.container.engine import DockerView
    from collapsar.manager.container.run import ContainerOptions, ContainerRun
    from collapsar.manager.core import real_tcal
    from collapsar.timeline import build_timeline

    options = ContainerOptions(
        **shared,
        experiment_id=exp_id,
        wait_up_s=wait_up_us / 1e6,
        bootstrapper=os.environ.get("COLLAPSAR_BOOTSTRAPPER") or None,
    )
    run_ = ContainerRun(
        experiment, build_timeline(experiment), options, DockerView(client, exp_id), real_tcal(), out=sys.stdout
    )
    if options.bootstrapper:  # Swarm: other nodes' instances through the overlay's DNS
        from collapsar.manager.container.dnsaddr import DnsAddresses

        bootstrapper = client.api.inspect_container(options.bootstrapper)
        stack = bootstrapper["Config"]["Labels"].get("com.docker.stack.namespace")
        if stack:
            run_.remote_addresses = DnsAddresses(
                bootstrapper["State"]["Pid"], stack, [service.name for service in experiment.services]
            )
    return run_.run()
