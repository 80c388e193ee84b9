"""`collapsar validate FILE`: check an experiment and print a one-line summary.

Problems go to stderr as `FILE:LINE: message` with exit status 2 (the CLI
prints the `TopologyError`).  Instance pairs with no path at t=0 are only
warnings: an experiment may start partitioned on purpose.
"""

from __future__ import annotations

import argparse
import sys

from ..model import Experiment
from ..parser import parse_file


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="Experiment file (YAML)")


def run(args: argparse.Namespace) -> int:
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
