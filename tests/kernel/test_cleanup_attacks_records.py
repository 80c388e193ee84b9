"""`collapsar cleanup` (root) against journal records naming what the run
never made, for real: a hosts file outside the run's /etc/netns (or another
run's), a link of another run or of the host, a process the run did not
start, a namespace path outside /run/netns.  Every time the real CLI must
refuse with one line that says why, exit non-zero, and leave each of those
things exactly as it was, the run's own valid records included (nothing is
half-applied).  The control: a journal of the run's own records is cleaned,
also next to a refused one (--all-stale).  Planted files and directories:
test_cleanup_attacks_files.py."""

from __future__ import annotations

import os
import secrets
import signal
from pathlib import Path

import pytest
from cleanup_attacks_support import (
    add_link,
    add_netns,
    alive,
    assert_refused,
    canary,
    cleanup,
    dead_manager,
    link_exists,
    made,  # noqa: F401 (a fixture, used by name)
    run_id,  # noqa: F401 (a fixture, used by name)
    start_sleep,
    state,  # noqa: F401 (a fixture, used by name)
    write_journal,
)

from collapsar.manager.local.rundir import process_start_time


def test_a_hosts_record_outside_the_runs_etc_netns_is_refused(tmp_path, state, run_id, made):
    outside, text = canary(tmp_path)
    # The hosts file of another run's namespace, which this run must not touch either.
    other = Path(f"/etc/netns/cx-{secrets.token_hex(3)}-a")
    other.mkdir(parents=True)
    made["paths"] += [other, other / "hosts"]
    (other / "hosts").write_bytes(text)
    ns = f"cx-{run_id}-a"
    Path(f"/etc/netns/{ns}").mkdir()  # so that a path through it resolves
    made["paths"].append(Path(f"/etc/netns/{ns}"))
    for path, why in (
        (str(outside), f"hosts record {str(outside)!r}"),
        (f"/etc/netns/{ns}/../../..{outside}", "hosts record '/etc/netns/"),
        (str(other / "hosts"), f"hosts record '{other}/hosts'"),
    ):
        journal = write_journal(
            state / "journals" / f"{run_id}.jsonl",
            [
                dead_manager(run_id, tmp_path),
                {"kind": "netns", "name": ns, "instance": "a"},
                {"kind": "hosts", "path": path},
            ],
        )
        assert_refused(cleanup(state, run_id), run_id, f"{journal}:3: ", why, f"expected /etc/netns/{ns}/hosts")
        assert outside.read_bytes() == text and (other / "hosts").read_bytes() == text
        journal.unlink()


@pytest.mark.parametrize("kind", ["veth", "bridge"])
def test_a_link_the_run_did_not_create_is_refused(tmp_path, state, run_id, made, kind):
    # Named like another run's link, and like any other link of the host.
    foreign = [f"cx{secrets.token_hex(3)}{'v1' if kind == 'veth' else 'br'}", f"h2keep{os.getpid() % 10000}"]
    for name in foreign:
        add_link(made, name)
    expected = f"cx{run_id}v1" if kind == "veth" else f"cx{run_id}br"
    for name in foreign:
        journal = write_journal(
            state / "journals" / f"{run_id}.jsonl",
            [
                dead_manager(run_id, tmp_path),
                {"kind": "netns", "name": f"cx-{run_id}-a", "instance": "a"},
                {"kind": kind, "name": name, "instance": "a"},
            ],
        )
        assert_refused(
            cleanup(state, run_id), run_id, f"{journal}:3: {kind} record {name!r}: not", f"expected {expected}"
        )
        assert all(link_exists(link) for link in foreign)
        journal.unlink()


def test_a_process_the_run_did_not_start_is_refused_and_nothing_else_is_removed(tmp_path, state, run_id, made):
    ns = f"cx-{run_id}-a"
    inode = add_netns(made, ns)  # the run's own namespace: valid, but must stay (nothing half-applied)
    foreign = start_sleep(made)  # the test's own process, in the host's namespace
    start = process_start_time(foreign.pid)
    journal = write_journal(
        state / "journals" / f"{run_id}.jsonl",
        [
            dead_manager(run_id, tmp_path),
            {"kind": "netns", "name": ns, "instance": "a"},
            {"kind": "netns_inode", "name": ns, "inode": inode},
            {"kind": "process", "instance": "a", "pid": foreign.pid, "start_time": start},
        ],
    )
    assert_refused(
        cleanup(state, run_id),
        run_id,
        f"{journal}:4: process record pid {foreign.pid} (instance a): it is not in the run's namespace {ns}",
    )
    assert alive(foreign) and os.stat(f"/run/netns/{ns}").st_ino == inode


def test_a_namespace_name_outside_run_netns_is_refused(tmp_path, state, run_id, made):
    bystander = f"h2keep{os.getpid() % 10000}"
    inode = add_netns(made, bystander)
    inside = start_sleep(made, bystander)
    outside, text = canary(tmp_path)
    for name in (f"/run/netns/{bystander}", f"../../..{outside}", f"cx-{run_id}-a/../{bystander}"):
        journal = write_journal(
            state / "journals" / f"{run_id}.jsonl",
            [
                dead_manager(run_id, tmp_path),
                {"kind": "netns", "name": name, "instance": "a"},
                {"kind": "netns_inode", "name": name, "inode": inode},
            ],
        )
        assert_refused(
            cleanup(state, run_id),
            run_id,
            f"{journal}:2: netns record {name!r} (instance a): not a namespace of run {run_id}; expected cx-{run_id}-a",
        )
        assert os.stat(f"/run/netns/{bystander}").st_ino == inode and alive(inside)
        assert outside.read_bytes() == text
        journal.unlink()


def test_a_journal_of_the_runs_own_records_is_cleaned(tmp_path, state, run_id, made):
    """The control: the same kinds of record, each the run's own, all go."""
    ns = f"cx-{run_id}-a"
    inode = add_netns(made, ns)
    hosts = Path(f"/etc/netns/{ns}/hosts")
    hosts.parent.mkdir(parents=True)
    made["paths"] += [hosts.parent, hosts]
    hosts.write_text("127.0.0.1\tlocalhost\n")
    for link in (f"cx{run_id}br", f"cx{run_id}v1"):
        add_link(made, link)
    inside = start_sleep(made, ns)
    journal = write_journal(
        state / "journals" / f"{run_id}.jsonl",
        [
            dead_manager(run_id, tmp_path),
            {"kind": "bridge", "name": f"cx{run_id}br"},
            {"kind": "netns", "name": ns, "instance": "a"},
            {"kind": "netns_inode", "name": ns, "inode": inode},
            {"kind": "hosts", "path": str(hosts)},
            {"kind": "veth", "name": f"cx{run_id}v1", "instance": "a"},
            {"kind": "process", "instance": "a", "pid": inside.pid, "start_time": process_start_time(inside.pid)},
        ],
    )
    result = cleanup(state, run_id)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"{run_id}: killed pid {inside.pid} (a)",
        f"{run_id}: deleted link cx{run_id}v1",
        f"{run_id}: deleted link cx{run_id}br",
        f"{run_id}: deleted netns {ns}",
        f"{run_id}: removed {hosts}",
        f"{run_id}: clean (5 leftovers removed)",
    ]
    assert inside.wait(5) == -signal.SIGKILL
    assert not os.path.exists(f"/run/netns/{ns}") and not hosts.parent.exists()
    assert not link_exists(f"cx{run_id}br") and not link_exists(f"cx{run_id}v1")
    assert not journal.exists()


def test_all_stale_cleans_the_runs_own_journals_and_refuses_the_crafted_one(tmp_path, state, made):
    good, crafted = sorted(secrets.token_hex(3) for _ in range(2))
    ns = f"cx-{good}-a"
    add_netns(made, ns)
    write_journal(
        state / "journals" / f"{good}.jsonl",
        [dead_manager(good, tmp_path), {"kind": "netns", "name": ns, "instance": "a"}],
    )
    outside, text = canary(tmp_path)
    journal = write_journal(
        state / "journals" / f"{crafted}.jsonl",
        [dead_manager(crafted, tmp_path), {"kind": "hosts", "path": str(outside)}],
    )
    result = cleanup(state, "--all-stale")
    assert result.returncode == 1
    assert result.stdout.splitlines() == [f"{good}: deleted netns {ns}", f"{good}: clean (1 leftovers removed)"]
    assert result.stderr == (
        f"collapsar: cleanup {crafted}: refused, nothing removed: {journal}:2: hosts record "
        f"{str(outside)!r}: not a hosts file of run {crafted}; expected the hosts file of a "
        f"recorded namespace (there is none)\n"
    )
    assert outside.read_bytes() == text and journal.exists()
    assert not os.path.exists(f"/run/netns/{ns}") and not (state / "journals" / f"{good}.jsonl").exists()
