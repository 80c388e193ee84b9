"""The options every manager run takes, declared once for `collapsar run`
and `collapsar manager` (collapsar.manager.run.options.RunOptions)."""

from __future__ import annotations

import argparse

from collapsar.errors import CollapsarError
from collapsar.units import UnitError, parse_duration_us


def add_run_options(parser: argparse.ArgumentParser, *, status_port: int, duration_help: str) -> None:
    parser.add_argument("--duration", metavar="TIME", default=None, help=duration_help)
    parser.add_argument(
        "--status-port",
        type=int,
        default=status_port,
        metavar="PORT",
        help="Port of the status API on 127.0.0.1 (0: any free port; -1: none)",
    )
    parser.add_argument(
        "--grace", default="5s", metavar="TIME", help="How long a leaving instance gets between SIGTERM and SIGKILL"
    )
    parser.add_argument(
        "--no-sharing",
        action="store_true",
        help="Shape each pair to its collapsed path only: flows crossing the same "
        "link do not share its capacity (no bandwidth-sharing loop, no Aeron)",
    )


def duration_us(flag: str, text: str) -> int:
    try:
        return parse_duration_us(text)
    except UnitError as error:
        raise CollapsarError(f"{flag} {text}: {error}") from None


def run_options(args: argparse.Namespace) -> dict:
    """RunOptions' fields from the parsed options."""
    return {
        "duration_us": None if args.duration is None else duration_us("--duration", args.duration),
        "status_port": None if args.status_port < 0 else args.status_port,
        "grace_s": duration_us("--grace", args.grace) / 1e6,
        "sharing": not args.no_sharing,
    }
