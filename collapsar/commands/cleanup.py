"""`collapsar cleanup`: remove what a dead local run left behind.

Reads the run's journal (written before each object was created) and removes
exactly those namespaces, links, hosts files, pins and processes; nothing is
found by name pattern.  A run whose manager is still alive is refused.

This runs as root on what a file says, so it reads journals only from the
state directory, and only ones that root wrote there (collapsar.manager.local.rundir);
a journal with any record that is not its run's own (a path outside
/etc/netns, another link, a process the run did not start, a namespace path)
is refused whole, nothing removed (collapsar.manager.local.cleanup).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run",
        metavar="RUNID",
        nargs="?",
        help="Run id (or the run directory of a run in the state directory) to clean up",
    )
    parser.add_argument("--all-stale", action="store_true", help="Clean up every run whose manager is gone")


def run(args: argparse.Namespace) -> int:
    from collapsar.errors import CollapsarError
    from collapsar.manager.local.cleanup import find_run
    from collapsar.manager.local.rundir import checked_state_dir, is_stale, list_runs, read_journal

    if bool(args.run) == bool(args.all_stale):
        raise CollapsarError("cleanup: expected either a RUNID or --all-stale")
    state = checked_state_dir()
    if not args.all_stale:
        run_id, journal = find_run(args.run, state)
        if journal is None:  # ended and retired: its copy in the run directory says so
            print(f"{run_id}: clean (0 leftovers removed)")
        else:
            clean(state, run_id, journal)
        return 0
    refused: list[str] = []
    stale = []
    for run_id, journal in list_runs(state).items():
        try:
            if is_stale(read_journal(journal)):
                stale.append((run_id, journal))
        except CollapsarError as error:
            refused.append(f"cleanup {run_id}: refused, nothing removed: {error}")
    if not stale and not refused:
        print("no stale runs")
    for run_id, journal in stale:
        try:
            clean(state, run_id, journal)
        except CollapsarError as error:  # one run's refusal does not keep the others
            refused.append(str(error))
    if refused:
        for line in refused[:-1]:
            print(f"collapsar: {line}", file=sys.stderr)
        raise CollapsarError(refused[-1])
    return 0


def clean(state: Path, run_id: str, journal_path: Path) -> None:
    """Undo one run's journal, or refuse it whole before touching anything."""
    from collapsar.errors import CollapsarError
    from collapsar.manager.local import teardown
    from collapsar.manager.local.cleanup import plan_cleanup
    from collapsar.manager.local.rundir import END_KINDS, Journal, manager_alive, read_journal, retire

    try:
        records = read_journal(journal_path)
        alive = manager_alive(records)
        steps = [] if alive else plan_cleanup(records, run_id, where=str(journal_path))
    except CollapsarError as error:
        raise CollapsarError(f"cleanup {run_id}: refused, nothing removed: {error}") from None
    if alive:
        head = records[0]
        raise CollapsarError(
            f"run {run_id} is still active (manager pid {head.get('pid')}); "
            f"stop it with kill -TERM {head.get('pid')} instead"
        )
    removed = teardown.execute(steps)
    for line in removed:
        print(f"{run_id}: {line}")
    if records and records[-1].get("kind") not in END_KINDS:
        journal = Journal(journal_path)
        journal.record("cleaned")
        journal.close()
    problem = retire(state, run_id)
    print(f"{run_id}: clean ({len(removed)} leftovers removed)")
    if problem:
        raise CollapsarError(f"cleanup {run_id}: leftovers removed, but {problem}")
