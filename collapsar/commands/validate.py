"""`collapsar validate FILE`: check an experiment and print a one-line summary.

Problems go to stderr as `FILE:LINE: message` with exit status 2 (the CLI
prints the `TopologyError`).  Instance pairs with no path at t=0 are only
warnings: an experiment may start partitioned on purpose.

`--json` prints one object on stdout instead, for editors and CI: `ok`, the
counts, `problems` (each with file, line and message) and `warnings`; the
exit status is the same.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import TopologyError
from ..model import Experiment
from ..parser import parse_file


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="Experiment file (YAML)")
    parser.add_argument("--json", action="store_true", help="Print the verdict as one JSON object")


def run(args: argparse.Namespace) -> int:
    if args.json:
        return _run_json(args.file)
    experiment = parse_file(args.file)
    print(summary(experiment))
    # Imported here so that a broken or missing collapse stage never hides
    # the parser's own verdict, which is already printed.
    from ..collapse import unreachable_pairs

    for src, dst in unreachable_pairs(experiment):
        print(f"{experiment.source}: warning: no path from {src} to {dst} at t=0",
              file=sys.stderr)
    return 0


def _count(number: int, word: str) -> str:
    return f"{number} {word}" if number == 1 else f"{number} {word}s"


def summary(experiment: Experiment) -> str:
    instances = sum(service.replicas for service in experiment.services)
    return (f"{experiment.source}: ok: {_count(len(experiment.services), 'service')} "
            f"({_count(instances, 'instance')}), {_count(len(experiment.bridges), 'bridge')}, "
            f"{_count(len(experiment.links), 'link')}, {_count(len(experiment.events), 'event')}")


def _problem_json(problem) -> dict:
    where = problem.where
    return {"file": where.file if where else None, "line": where.line if where else None,
            "message": problem.message}


def _run_json(path: str) -> int:
    from ..collapse import unreachable_pairs

    try:
        experiment = parse_file(path)
    except TopologyError as error:
        print(json.dumps({"file": path, "ok": False, "problems": [_problem_json(p) for p in error.problems],
                          "warnings": []}, indent=1))
        return error.exit_code
    warnings = [{"src": src, "dst": dst, "message": f"no path from {src} to {dst} at t=0"}
                for src, dst in unreachable_pairs(experiment)]
    print(json.dumps({
        "file": experiment.source, "ok": True, "problems": [], "warnings": warnings,
        "services": len(experiment.services),
        "instances": sum(service.replicas for service in experiment.services),
        "bridges": len(experiment.bridges), "links": len(experiment.links),
        "events": len(experiment.events)}, indent=1))
    return 0
