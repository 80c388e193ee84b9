"""`collapsar cleanup` (root) against `cgroup` journal records naming groups
the run never made, on this host's real control groups: a group of the
host's own, another run's, a path that climbs out of the run's group, an
instance the run never had.  The real CLI must refuse each journal with one
line naming the record, and leave every group (the run's own included) as
it was.  The control: the run's own records remove exactly its groups.
The same checks without a kernel: tests/unit/test_manager_cgroup_cleanup.py."""

from __future__ import annotations

import os
import secrets

from cleanup_attacks_support import (
    assert_refused,
    cleanup,
    dead_manager,
    made,  # noqa: F401 (a fixture, used by name)
    run_id,  # noqa: F401 (a fixture, used by name)
    state,  # noqa: F401 (a fixture, used by name)
    write_journal,
)

from collapsar.manager.local.cgroups import detect


def _make(made: dict, path) -> None:
    path.mkdir()
    made["paths"].append(path)  # removed afterwards (rmdir), children first


def test_a_cgroup_record_of_a_group_the_run_did_not_make_is_refused(tmp_path, state, run_id, made):
    memory = detect().hierarchies["memory"].mount
    own = memory / f"collapsar-{run_id}"
    other = memory / f"collapsar-{secrets.token_hex(3)}"
    host = memory / f"cxkeep{os.getpid() % 10000}"
    for path in (own, own / "a", other, other / "a", host):
        _make(made, path)
    head = [dead_manager(run_id, tmp_path), {"kind": "netns", "name": f"cx-{run_id}-a", "instance": "a"}]
    mine = [
        {"kind": "cgroup", "controller": "memory", "instance": None, "path": str(own)},
        {"kind": "cgroup", "controller": "memory", "instance": "a", "path": str(own / "a")},
    ]
    for record, why in (
        (
            {"kind": "cgroup", "controller": "memory", "instance": None, "path": str(host)},
            f"cgroup record {str(host)!r}: not a control group of run {run_id}; expected {own}",
        ),
        (
            {"kind": "cgroup", "controller": "memory", "instance": "a", "path": str(other / "a")},
            f"cgroup record '{other}/a': not a control group of run {run_id}; expected {own}/a",
        ),
        (
            {"kind": "cgroup", "controller": "memory", "instance": "a", "path": f"{own}/a/../../{host.name}"},
            f"cgroup record '{own}/a/../../{host.name}': not a control group of run {run_id}",
        ),
        (
            {"kind": "cgroup", "controller": "memory", "instance": f"../{host.name}", "path": str(host)},
            "the journal records no namespace for that instance",
        ),
    ):
        journal = write_journal(state / "journals" / f"{run_id}.jsonl", [*head, *mine, record])
        assert_refused(cleanup(state, run_id), run_id, f"{journal}:5: ", why)
        assert all(path.is_dir() for path in (own / "a", other / "a", host))
        journal.unlink()
    # The control: its own records remove the run's groups, instance first, and nothing else.
    write_journal(state / "journals" / f"{run_id}.jsonl", [*head, *mine])
    result = cleanup(state, run_id)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"{run_id}: removed control group {own / 'a'}",
        f"{run_id}: removed control group {own}",
        f"{run_id}: clean (2 leftovers removed)",
    ]
    assert not own.exists() and (other / "a").is_dir() and host.is_dir()
