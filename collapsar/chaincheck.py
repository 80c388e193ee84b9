"""Check the commands that run wl-client or wl-node with those programs' own parser.

A chain (`-C 1ms -F db,db-2,nack=2 -S 4k,sync`) has one grammar, the one
the C binaries read, so Collapsar does not parse it again: for every service
whose program is wl-client or wl-node (by basename, written under `command:`
or compiled from `workload:`), `check_chains` runs the built binary with
`--check --names NAMES ARGS...`.  In that mode the binary parses ARGS as a
run would, touches nothing, and either prints one JSON line and exits 0, or
prints `PROGRAM: MESSAGE` on stderr and exits 2.  NAMES are every name an
instance may be reached by during the run (service names, instances, and
instances that join later), so an unknown target is an error here, before
anything runs.  Commands through `sh -c` are not looked into.

The checks run in parallel, and a command written the same way by several
services is checked once.  A missing build (or one from before `--check`)
is a warning, never a failure: validate must work without the C build.

Does not own: finding the build (the caller passes its directory), running
anything for real (collapsar.manager).
"""

from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from collapsar.errors import Problem, Where
from collapsar.model import Experiment, Service, ServiceEvent, instance_name

PROGRAMS = ("wl-client", "wl-node")
BUILD_FIX = "make -C workload-node"
CHECK_TIMEOUT_S = 10.0
# One argv word is at most 128 KiB (the kernel's MAX_ARG_STRLEN); above this
# the names list keeps only the names a command mentions.
NAMES_MAX_CHARS = 100_000


@dataclass
class Verdict:
    """What the chain check found: problems (FILE:LINE, exit 2) and at most one warning."""

    problems: list[Problem] = field(default_factory=list)
    warning: str | None = None
    checked: int = 0  # distinct commands handed to a binary


def workload_services(experiment: Experiment) -> list[Service]:
    return [
        service
        for service in experiment.services
        if service.command and os.path.basename(service.command[0]) in PROGRAMS
    ]


def reachable_names(experiment: Experiment) -> list[str]:
    """Every service name and every instance the run will ever have, joins included."""
    names: dict[str, None] = {}
    for service in experiment.services:
        names[service.name] = None
        for index in range(2, service.replicas + 1):
            names[instance_name(service.name, index)] = None
    for event in experiment.events:
        if isinstance(event, ServiceEvent) and event.action == "join":
            names.update(dict.fromkeys(event.targets))
    return list(names)


def check_chains(experiment: Experiment, build_dir: Path, parallel: int = 8) -> Verdict:
    services = workload_services(experiment)
    if not services:
        return Verdict()
    programs = {name: build_dir / name for name in PROGRAMS}
    missing = sorted(
        str(path)
        for name, path in programs.items()
        if any(os.path.basename(s.command[0]) == name for s in services) and not os.access(path, os.X_OK)
    )
    if missing:
        return Verdict(
            warning=f"wl-client and wl-node commands not checked: {', '.join(missing)} not built; fix: {BUILD_FIX}"
        )
    names = reachable_names(experiment)
    distinct = {(os.path.basename(s.command[0]), s.command[1:]) for s in services}
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(distinct)))) as pool:
        answers = dict(
            zip(distinct, pool.map(lambda key: _check_one(programs[key[0]], key[0], key[1], names), distinct))
        )
    verdict = Verdict(checked=len(distinct))
    for service in services:
        outcome = answers[(os.path.basename(service.command[0]), service.command[1:])]
        if isinstance(outcome, _Stale):
            verdict.warning = (
                f"wl-client and wl-node commands not checked: {outcome.binary} was "
                f"built before --check existed; fix: {BUILD_FIX}"
            )
            return Verdict(warning=verdict.warning)
        if outcome is not None:
            origin = service.command_origin
            where: Where | None = origin.where if origin else service.where
            key = origin.key if origin else "command"
            verdict.problems.append(Problem(where, f"service {service.name}: {key}: {outcome}"))
    return verdict


@dataclass(frozen=True)
class _Stale:
    binary: str


def _names_word(names: list[str], args: tuple[str, ...]) -> str:
    word = ",".join(names)
    if len(word) <= NAMES_MAX_CHARS:
        return word
    # A name the command does not contain cannot be one of its targets.
    text = "\0".join(args)
    return ",".join(name for name in names if name in text)


def _check_one(binary: Path, program: str, args: tuple[str, ...], names: list[str]) -> str | _Stale | None:
    """None when the binary accepts `args`; else the message to report."""
    argv = [str(binary), "--check", "--names", _names_word(names, args), *args]
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            errors="replace",
            stdin=subprocess.DEVNULL,
            timeout=CHECK_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"{program} --check did not answer within {CHECK_TIMEOUT_S:g} s"
    except OSError as error:
        return f"cannot run {binary} --check: {error.strerror}"
    if done.returncode == 0:
        return None
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    # getopt's words in a build from before --check (any other answer comes from --check itself).
    if any("unrecognized option '--check'" in line for line in lines[:1]):
        return _Stale(str(binary))
    said = next((line for line in lines if line.startswith(f"{program}:")), None)
    if done.returncode == 2 and said:
        return said
    # Not the interface's answer (a crash, another status): say what happened.
    first = lines[0] if lines else "no message"
    return f"{program} --check failed (exit status {done.returncode}): {first}"
