"""Which program each service's command starts, and whether its instances
will find it.

Local mode (and `--vm`, whose guest sees this host's files) starts a command
through `ip netns exec`, which execs argv[0] as execvp does: a name with a
`/` is a path (relative to the service's `workdir`), a bare name is looked
up along PATH.  An instance's PATH is this host's (or the service's own
`env: PATH`) with the built workload tools, workload-node/build, appended:
after, so that a wl-node or wl-client of the user's own, earlier on PATH, is
the one that runs; ours are found when there is none.

Only argv[0] is checked: `sh -c "..."` needs the shell, and what its script
runs is the script's business.  In Compose and Swarm a service without an
`image` runs in collapsar/node, which has wl-node, wl-client, iperf3 and
ping in /usr/local/bin and /usr/bin; a service with an image of its own may
lack the workload tools, which only a warning can say (`image_warnings`).

Does not own: starting anything (local/supervisor.py), the workload tools themselves
(workload-node/).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from collapsar.errors import Problem, TopologyError
from collapsar.model import Experiment, Service

WORKLOAD_TOOLS = ("wl-node", "wl-client")
BUILD_FIX = "make -C workload-node"
# A workload tool named anywhere in a command: as a word, or the last part of a path.
_TOOL_WORD = re.compile(r"(?:^|[\s/;&|(`'\"])(wl-node|wl-client)(?=$|[\s;&|)`'\"])")


def workload_build_dir() -> Path:
    """workload-node/build of this checkout (emulation-manager/ is its sibling)."""
    return Path(__file__).resolve().parents[1] / "workload-node" / "build"


def instance_path(path: str | None = None, tools_dir: Path | None = None) -> str:
    """The PATH a local-mode instance gets: `path` (the service's own), else
    this process's, then the built workload tools (`tools_dir`, default
    workload_build_dir())."""
    base = os.environ.get("PATH", os.defpath) if path is None else path
    build = str(tools_dir or workload_build_dir())
    if build in base.split(os.pathsep):
        return base
    return f"{base}{os.pathsep}{build}" if base else build


def resolve(program: str, path: str, cwd: str) -> str | None:
    """Where execvp would find `program` (None: nowhere)."""
    if "/" in program:
        full = os.path.normpath(os.path.join(cwd, program))
        return full if os.path.isfile(full) and os.access(full, os.X_OK) else None
    return shutil.which(program, path=path)


def program_of(service: Service) -> str | None:
    return service.command[0] if service.command else None


def resolve_service(service: Service, tools_dir: Path | None = None) -> str | None:
    """Where a local-mode instance of `service` finds its program."""
    program = program_of(service)
    if program is None:
        return None
    return resolve(program, instance_path(service.env.get("PATH"), tools_dir), service.workdir or os.getcwd())


def missing_programs(experiment: Experiment, tools_dir: Path | None = None) -> list[Problem]:
    """One problem per service whose program a local-mode instance would not
    find (`tools_dir`: where the workload tools are built, as for
    instance_path).  The workload tools missing from several services is one
    cause, an unbuilt checkout: one problem, at the first of them."""
    tools_dir = tools_dir or workload_build_dir()
    problems, unbuilt = [], []
    for service in experiment.services:
        program = program_of(service)
        if program is None or resolve_service(service, tools_dir) is not None:
            continue
        if program in WORKLOAD_TOOLS:
            unbuilt.append(service)
        else:
            why = _why_missing(service, program, tools_dir)
            if service.image:  # an imported Kollaps service: its command is its image's arguments
                why += f"; in local mode only: Compose and Swarm run the command in its image ({service.image})"
            problems.append(Problem(service.where, f"service {service.name}: {why}"))
    if unbuilt:
        tools = sorted({service.command[0] for service in unbuilt})
        who = ("service " if len(unbuilt) == 1 else "services ") + ", ".join(s.name for s in unbuilt)
        what = f"program '{tools[0]}' is" if len(tools) == 1 else f"programs '{tools[0]}', '{tools[1]}' are"
        problems.append(
            Problem(
                unbuilt[0].where,
                f"{who}: {what} not built (looked in {_searched(unbuilt[0], tools_dir)}); fix: {BUILD_FIX}",
            )
        )
    return sorted(problems, key=lambda p: p.where.line if p.where else 0)


def _searched(service: Service, tools_dir: Path) -> str:
    own = "the service's env PATH" if "PATH" in service.env else "this host's PATH"
    return f"{own}, then {tools_dir}"


def _why_missing(service: Service, program: str, tools_dir: Path) -> str:
    if "/" in program:
        base = service.workdir or "the directory collapsar runs in"
        where = "" if program.startswith("/") else f" (relative to {base})"
        return f"program '{program}' does not exist or is not executable{where}"
    return f"program '{program}' is not on the instances' PATH ({_searched(service, tools_dir)})"


def require_programs(experiment: Experiment) -> None:
    """Refuse, before anything is created, an experiment whose instances would
    fail to start their commands."""
    problems = missing_programs(experiment)
    if problems:
        raise TopologyError(problems)


def image_warnings(experiment: Experiment, node_image_repo: str = "collapsar/node") -> list[Problem]:
    """Services with an image of their own whose command names a workload
    tool: in Compose and Swarm they run in that image, which may lack it."""
    warnings = []
    for service in experiment.services:
        if not service.image or not service.command or service.image.split(":")[0] == node_image_repo:
            continue
        named = sorted({m.group(1) for word in service.command for m in _TOOL_WORD.finditer(word)})
        if named:
            warnings.append(
                Problem(
                    service.where,
                    (
                        f"service {service.name}: its command runs {' and '.join(named)}, but in Compose and "
                        f"Swarm it runs in its own image ({service.image}), which may lack "
                        f"{'them' if len(named) > 1 else 'it'}; a service without `image` runs in "
                        f"{node_image_repo}, which has wl-node and wl-client"
                    ),
                )
            )
    return warnings
