"""`collapsar cleanup` (root) against files it must not believe or write
through, for real: a journal in the current directory, a symlink in place of
the journal or of the run directory, and a journal or state directory others
can write or own.  Every time the real CLI must refuse with one line that
says why (or, for a replaced run directory, clean the run's own leftovers and
say why the journal was not copied there), exit non-zero, and leave the
planted things exactly as they were.  Records naming what the run never
made: test_cleanup_attacks_records.py."""

from __future__ import annotations

import os

import pytest
from cleanup_attacks_support import (
    add_link,
    add_netns,
    assert_refused,
    canary,
    cleanup,
    dead_manager,
    link_exists,
    made,  # noqa: F401 (a fixture, used by name)
    run_id,  # noqa: F401 (a fixture, used by name)
    state,  # noqa: F401 (a fixture, used by name)
    write_journal,
)

NOBODY = 65534


def test_a_journal_in_the_current_directory_is_never_read(tmp_path, state, run_id, made):
    """The reported attack: ./RUNID/journal.jsonl made `cleanup RUNID` delete a link."""
    victim = f"h2cwd{os.getpid() % 10000}"
    add_link(made, victim)
    cwd = tmp_path / "cwd"
    write_journal(
        cwd / run_id / "journal.jsonl", [dead_manager(run_id, cwd / run_id), {"kind": "bridge", "name": victim}]
    )
    by_id = cleanup(state, run_id, cwd=cwd)
    assert by_id.returncode == 1 and link_exists(victim)
    assert by_id.stderr == (
        f"collapsar: cleanup {run_id}: no such run; expected a run id from "
        f"{state / 'journals'} (active or stale: none) or the directory of one of those runs\n"
    )
    by_path = cleanup(state, f"./{run_id}", cwd=cwd)
    assert by_path.returncode == 1 and link_exists(victim)
    assert by_path.stderr == (
        f"collapsar: cleanup ./{run_id}: {(cwd / run_id).resolve()} is not the run "
        f"directory of any run in {state / 'index'}; cleanup reads journals only "
        f"from {state / 'journals'}\n"
    )


def test_a_symlinked_journal_is_refused(tmp_path, state, run_id, made):
    outside, text = canary(tmp_path)
    crafted = write_journal(
        tmp_path / "crafted.jsonl", [dead_manager(run_id, tmp_path), {"kind": "hosts", "path": str(outside)}]
    )
    link = state / "journals" / f"{run_id}.jsonl"
    link.symlink_to(crafted)
    assert_refused(cleanup(state, run_id), run_id, f"journal {link}: a symlink; expected a regular file")
    assert outside.read_bytes() == text


@pytest.mark.parametrize(
    "owner, mode, why",
    [
        (NOBODY, 0o600, f"owned by uid {NOBODY}; expected root"),
        (0, 0o666, "writable by group or others (mode 0666); expected 0600"),
    ],
)
def test_a_journal_others_could_write_is_refused(tmp_path, state, run_id, owner, mode, why):
    outside, text = canary(tmp_path)
    journal = write_journal(
        state / "journals" / f"{run_id}.jsonl",
        [dead_manager(run_id, tmp_path), {"kind": "hosts", "path": str(outside)}],
    )
    os.chown(journal, owner, -1)
    os.chmod(journal, mode)
    assert_refused(cleanup(state, run_id), run_id, f"journal {journal}: {why}")
    assert outside.read_bytes() == text


def test_a_run_directory_replaced_by_a_symlink_is_not_written_through(tmp_path, state, run_id, made):
    """The state journal is the run's own and valid, so its leftovers go; but
    its run directory was swapped for a symlink to somewhere else whose
    journal.jsonl.tmp points at a file the journal would be copied over."""
    ns = f"cx-{run_id}-a"
    add_netns(made, ns)
    base = tmp_path / "runs"
    real = base / run_id
    real.mkdir(parents=True, mode=0o700)
    identity = os.stat(real)
    write_journal(
        state / "journals" / f"{run_id}.jsonl",
        [
            {**dead_manager(run_id, real), "run_dir_dev": identity.st_dev, "run_dir_ino": identity.st_ino},
            {"kind": "netns", "name": ns, "instance": "a"},
        ],
    )
    (state / "index").mkdir()
    (state / "index" / run_id).symlink_to(real)
    outside, text = canary(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "journal.jsonl.tmp").symlink_to(outside)
    (elsewhere / "journal.jsonl").symlink_to(outside)
    real.rename(tmp_path / "moved-away")
    real.symlink_to(elsewhere)
    result = cleanup(state, run_id)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert f"{run_id}: deleted netns {ns}" in result.stdout and not os.path.exists(f"/run/netns/{ns}")
    assert result.stderr == (
        f"collapsar: cleanup {run_id}: leftovers removed, but {real} is not the run "
        f"directory the run created (replaced or a symlink); its journal was not "
        f"copied there\n"
    )
    assert outside.read_bytes() == text
    assert (elsewhere / "journal.jsonl").is_symlink() and (elsewhere / "journal.jsonl.tmp").is_symlink()
    assert not (state / "journals" / f"{run_id}.jsonl").exists() and not (state / "index" / run_id).exists()


@pytest.mark.parametrize(
    "owner, mode, why",
    [
        (NOBODY, 0o755, f"owned by uid {NOBODY}; expected root; fix: chown root "),
        (
            0,
            0o777,
            "writable by group or others (mode 0777); expected a directory only root can write; fix: chmod go-w ",
        ),
    ],
)
def test_a_state_directory_others_control_is_refused(tmp_path, state, run_id, made, owner, mode, why):
    outside, text = canary(tmp_path)
    write_journal(
        state / "journals" / f"{run_id}.jsonl",
        [dead_manager(run_id, tmp_path), {"kind": "hosts", "path": str(outside)}],
    )
    os.chown(state, owner, -1)
    os.chmod(state, mode)
    result = cleanup(state, run_id)
    assert result.returncode == 3, result.stderr
    assert result.stderr == f"collapsar: state directory {state}: {why}{state}\n"
    assert outside.read_bytes() == text
