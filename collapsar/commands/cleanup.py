"""`collapsar cleanup`: remove what a dead local run left behind.

Reads the run's journal (written before each object was created) and removes
exactly those namespaces, links, hosts files, pins and processes; nothing is
found by name pattern.  A run whose manager is still alive is refused.
"""

from __future__ import annotations

import argparse


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUNID", nargs="?",
                        help="Run id (or run directory) to clean up")
    parser.add_argument("--all-stale", action="store_true",
                        help="Clean up every run whose manager is gone")


def run(args: argparse.Namespace) -> int:
    from ..errors import CollapsarError
    from ..manager import teardown
    from ..manager.rundir import (END_KINDS, Journal, find_run, is_stale, list_runs, manager_alive,
                                  plan_cleanup, read_journal, retire, state_dir)

    if bool(args.run) == bool(args.all_stale):
        raise CollapsarError("cleanup: expected either a RUNID or --all-stale")
    if args.all_stale:
        targets = [path for path in list_runs().values() if is_stale(read_journal(path))]
        if not targets:
            print("no stale runs")
    else:
        targets = [find_run(args.run)]
    for journal_path in targets:
        records = read_journal(journal_path)
        head = next((r for r in records if r.get("kind") == "run"), {})
        run_id = head.get("run_id", "?")
        if manager_alive(records):
            raise CollapsarError(f"run {run_id} is still active (manager pid {head.get('pid')}); "
                                 f"stop it with kill -TERM {head.get('pid')} instead")
        removed = teardown.execute(plan_cleanup(records))
        for line in removed:
            print(f"{run_id}: {line}")
        if records and records[-1].get("kind") not in END_KINDS:
            journal = Journal(journal_path)
            journal.record("cleaned")
            journal.close()
        retire(state_dir(), run_id)
        print(f"{run_id}: clean ({len(removed)} leftovers removed)")
    return 0
