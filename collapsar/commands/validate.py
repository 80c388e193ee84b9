"""`collapsar validate FILE`: check an experiment and print a one-line summary.

Problems go to stderr as `FILE:LINE: message` with exit status 2 (the CLI
prints the `TopologyError`).  Instance pairs with no path at t=0 are only
warnings: an experiment may start partitioned on purpose.  They are
summarised (a count, then at most three sources with at most three
destinations each); `--json` lists every pair.  So are programs
(collapsar.manager.programs): a command whose program local mode's
instances would not find (`FILE:LINE: warning: service X: program 'foo' is
not on the instances' PATH (...)`, saying that this is local mode's only
when the service has an image, whose arguments an imported Kollaps command
is; `collapsar run` and `check` refuse it), and a service with an image
of its own that runs wl-node or wl-client, which that image may lack in
Compose and Swarm.

Commands that run wl-client or wl-node, written or compiled from the
`workload:` form, are checked by the built binaries' own parser
(collapsar.chaincheck): a bad chain or an unknown target is a problem like
any other, `FILE:LINE: service X: command: wl-client: MESSAGE`.  Without
the build they are not checked, and one warning says how to build it.
`--commands` also prints the argv every service's instances will run.

`--json` prints one object on stdout instead, for editors and CI: `ok`, the
counts, `problems` (each with file, line and message) and `warnings`; the
exit status is the same.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from collapsar.chaincheck import BUILD_FIX, Verdict, check_chains
from collapsar.errors import TopologyError
from collapsar.model import Experiment
from collapsar.parser import parse_file

# Sources, and destinations of each, that validate names when instance
# pairs have no path; the rest are counted.
SHOWN_UNREACHABLE = 3


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="Experiment file (YAML)")
    parser.add_argument("--json", action="store_true", help="Print the verdict as one JSON object")
    parser.add_argument(
        "--commands",
        action="store_true",
        help="Also print each service's command as its instances will run it (`workload:` compiled to its argv)",
    )


def run(args: argparse.Namespace) -> int:
    if args.json:
        return _run_json(args.file, args.commands)
    experiment = parse_file(args.file)
    chains = _check_chains(experiment)
    print(summary(experiment))
    if args.commands:
        for service in experiment.services:
            if service.command:
                print(f"  {service.name}: {shlex.join(service.command)}")
    # Imported here so that a broken or missing collapse stage never hides
    # the parser's own verdict, which is already printed.
    from collapsar.collapse import unreachable_pairs

    for message in unreachable_summary(unreachable_pairs(experiment)):
        print(f"{experiment.source}: warning: {message}", file=sys.stderr)
    programs = _program_warnings(experiment)
    for problem in programs:
        print(f"{problem.where or experiment.source}: warning: {problem.message}", file=sys.stderr)
    for warning in _chain_warnings(chains, programs):
        print(f"{experiment.source}: warning: {warning}", file=sys.stderr)
    return 0


def _program_warnings(experiment: Experiment) -> list:
    from collapsar.manager.programs import image_warnings, missing_programs

    return missing_programs(experiment) + image_warnings(experiment)


def _check_chains(experiment: Experiment) -> Verdict:
    """The chain check's verdict; its problems end validation like the parser's."""
    from collapsar.manager.programs import workload_build_dir

    verdict = check_chains(experiment, workload_build_dir())
    if verdict.problems:
        raise TopologyError(sorted(verdict.problems, key=lambda p: p.where.line if p.where else 0))
    return verdict


def _chain_warnings(verdict: Verdict, programs: list) -> list[str]:
    # A missing build is already named by the program warnings:
    # say it once.
    if verdict.warning is None or any(BUILD_FIX in p.message for p in programs):
        return []
    return [verdict.warning]


def _count(number: int, word: str) -> str:
    return f"{number} {word}" if number == 1 else f"{number} {word}s"


def unreachable_summary(pairs: list[tuple[str, str]], shown: int = SHOWN_UNREACHABLE) -> list[str]:
    """Warnings for the instance pairs with no path, summarised: one line
    for each of the `shown` sources missing the most destinations, naming
    its first `shown` of them, after a count when that leaves some out (a
    scale-free topology of 600 elements has thousands of such pairs; --json
    lists them all)."""
    by_source: dict[str, list[str]] = {}
    for src, dst in pairs:
        by_source.setdefault(src, []).append(dst)
    first = sorted(by_source.items(), key=lambda item: -len(item[1]))[:shown]
    lines = []
    if len(by_source) > shown or any(len(dsts) > shown for _, dsts in first):
        some = f"{shown} shown; " if len(by_source) > shown else ""
        lines.append(
            f"{_count(len(pairs), 'instance pair')} have no path at t=0, from "
            f"{_count(len(by_source), 'source')} ({some}--json lists every pair)"
        )
    for src, dsts in first:
        more = f" and {len(dsts) - shown} more" if len(dsts) > shown else ""
        lines.append(f"no path from {src} to {', '.join(dsts[:shown])}{more} at t=0")
    return lines


def summary(experiment: Experiment) -> str:
    instances = sum(service.replicas for service in experiment.services)
    return (
        f"{experiment.source}: ok: {_count(len(experiment.services), 'service')} "
        f"({_count(instances, 'instance')}), {_count(len(experiment.bridges), 'bridge')}, "
        f"{_count(len(experiment.links), 'link')}, {_count(len(experiment.events), 'event')}"
    )


def _problem_json(problem) -> dict:
    where = problem.where
    return {"file": where.file if where else None, "line": where.line if where else None, "message": problem.message}


def _run_json(path: str, commands: bool) -> int:
    from collapsar.collapse import unreachable_pairs

    try:
        experiment = parse_file(path)
        chains = _check_chains(experiment)
    except TopologyError as error:
        print(
            json.dumps(
                {"file": path, "ok": False, "problems": [_problem_json(p) for p in error.problems], "warnings": []},
                indent=1,
            )
        )
        return error.exit_code
    warnings: list[dict[str, object]] = [
        {"src": src, "dst": dst, "message": f"no path from {src} to {dst} at t=0"}
        for src, dst in unreachable_pairs(experiment)
    ]
    programs = _program_warnings(experiment)
    warnings += [_problem_json(problem) for problem in programs]
    warnings += [
        {"file": experiment.source, "line": None, "message": warning} for warning in _chain_warnings(chains, programs)
    ]
    verdict = {
        "file": experiment.source,
        "ok": True,
        "problems": [],
        "warnings": warnings,
        "services": len(experiment.services),
        "instances": sum(service.replicas for service in experiment.services),
        "bridges": len(experiment.bridges),
        "links": len(experiment.links),
        "events": len(experiment.events),
    }
    if commands:
        verdict["commands"] = {s.name: list(s.command) for s in experiment.services if s.command}
    print(json.dumps(verdict, indent=1))
    return 0
