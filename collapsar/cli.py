"""The `collapsar` command: one verb per subcommand.

Each verb lives in its own module under `collapsar.commands` that exposes
`register(parser)` (adds its arguments) and `run(args) -> int`.  `COMMANDS`
maps verbs to those modules and is the only place a new verb is added.  Verb
modules keep heavy imports (numpy, pyroute2, the kernel-facing code) inside
`run`, so building the parser stays cheap and `collapsar validate` never loads
what only `collapsar run` needs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

from collapsar.errors import CollapsarError

# verb -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "validate": ("collapsar.commands.validate", "Check a topology file and print a summary"),
    "collapse": ("collapsar.commands.collapse", "Print the collapsed path table at a time"),
    "import": ("collapsar.commands.import_xml", "Convert a Kollaps XML experiment to YAML"),
    "run": ("collapsar.commands.run", "Emulate an experiment on this host (local mode)"),
    "cleanup": ("collapsar.commands.cleanup", "Remove what a killed local run left behind"),
    "check": ("collapsar.commands.check", "Check that this host's kernel can run experiments (or FILE)"),
    "dashboard": ("collapsar.commands.dashboard", "Serve the web dashboard for running managers"),
    "generate": ("collapsar.commands.generate", "Write a Docker Swarm stack or Compose file for an experiment"),
    "manager": ("collapsar.commands.manager", "Run the emulation manager for Docker containers on this node"),
    "trace": ("collapsar.commands.trace", "Where a run's latency goes: per-client latency and its breakdown"),
    "report": ("collapsar.commands.report", "One self-contained HTML page of a run's results, with plots"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="collapsar",
        description="Declarative network topology emulator with decentralized shaping.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="Show tracebacks on errors")
    verbs = parser.add_subparsers(dest="verb", metavar="COMMAND", required=True)
    for verb, (module_name, help_text) in COMMANDS.items():
        sub = verbs.add_parser(
            verb,
            help=help_text,
            description=help_text,
            formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        )
        sub.set_defaults(module_name=module_name)
        importlib.import_module(module_name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return importlib.import_module(args.module_name).run(args)
    except CollapsarError as error:
        if args.debug:
            traceback.print_exc()
        for line in error.lines():
            print(f"collapsar: {line}" if not _has_place(line) else line, file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("collapsar: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`collapsar collapse ... | head`): not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _has_place(line: str) -> bool:
    """Lines that start with `file:line:` are printed as they are."""
    head, _, rest = line.partition(":")
    number, _, _ = rest.partition(":")
    return bool(head) and number.isdigit()


if __name__ == "__main__":
    sys.exit(main())
