"""The journal, the lock and cleanup planning, in a temporary state dir."""

import os
import shutil
import subprocess
import sys

import pytest

from collapsar.errors import CollapsarError, RunError
from collapsar.manager.rundir import (Journal, RunDir, RunLock, Step, find_run, is_stale, list_runs,
                                      plan_cleanup, process_start_time, read_journal, retire,
                                      same_process)


@pytest.fixture
def state(tmp_path, monkeypatch):
    path = tmp_path / "state"
    monkeypatch.setenv("COLLAPSAR_STATE_DIR", str(path))
    return path


def test_run_dir_layout_journal_in_state_and_first_record(state):
    run = RunDir.create("a1b2c3")
    assert run.path == state / "a1b2c3"
    assert (run.path / "logs").is_dir()
    journal = state / "journals" / "a1b2c3.jsonl"
    assert list_runs() == {"a1b2c3": journal}
    assert (run.path / "journal.jsonl").resolve() == journal
    head = read_journal(journal)[0]
    assert head["kind"] == "run" and head["pid"] == os.getpid() and head["run_dir"] == str(run.path)
    assert head["start_time"] == process_start_time(os.getpid())
    run.finish()
    assert list_runs() == {} and not journal.exists() and not (state / "index" / "a1b2c3").exists()
    copy = run.path / "journal.jsonl"
    assert not copy.is_symlink() and read_journal(copy)[-1]["kind"] == "finished"


def test_run_dir_under_a_chosen_base(state, tmp_path):
    run = RunDir.create("a1b2c3", base=tmp_path / "elsewhere")
    assert run.path == tmp_path / "elsewhere" / "a1b2c3"
    assert find_run("a1b2c3") == state / "journals" / "a1b2c3.jsonl"
    assert find_run(str(run.path)) == run.path / "journal.jsonl"


def test_journal_outlives_a_deleted_run_dir(state, tmp_path):
    run = RunDir.create("a1b2c3", base=tmp_path / "gone")
    run.journal.record("netns", name="cx-a1b2c3-a")
    shutil.rmtree(tmp_path / "gone")
    assert [r["kind"] for r in read_journal(find_run("a1b2c3"))] == ["run", "netns"]
    retire(state, "a1b2c3")
    assert list_runs() == {}


def test_find_run_names_the_known_runs(state):
    RunDir.create("a1b2c3")
    with pytest.raises(CollapsarError, match=r"cleanup 0000ff: no such run; .*\(active or stale: a1b2c3\)"):
        find_run("0000ff")


def test_torn_last_line_is_skipped(tmp_path):
    journal = Journal(tmp_path / "j")
    journal.record("netns", name="x")
    journal.close()
    with open(tmp_path / "j", "a") as f:
        f.write('{"kind": "veth", "na')
    records = read_journal(tmp_path / "j")
    assert [r["kind"] for r in records] == ["netns"]


def test_second_lock_names_the_active_run(state):
    lock = RunLock.acquire(state, "a1b2c3", state / "a1b2c3")
    with pytest.raises(RunError, match=rf"another collapsar run is active: run a1b2c3 \(manager pid "
                                       rf"{os.getpid()}, {state}/a1b2c3\)"):
        RunLock.acquire(state, "0000ff", state / "0000ff")
    lock.release()
    RunLock.acquire(state, "0000ff", state / "0000ff").release()


def test_lock_of_a_killed_holder_is_free(state):
    code = ("import sys, os, signal; sys.path[:0] = %r; "
            "from collapsar.manager.rundir import RunLock; from pathlib import Path; "
            "RunLock.acquire(Path(%r), 'a1b2c3', Path('/x')); os.kill(os.getpid(), signal.SIGKILL)"
            % (sys.path, str(state)))
    subprocess.run([sys.executable, "-c", code])
    RunLock.acquire(state, "0000ff", state / "0000ff").release()


def records(*kinds_and_fields):
    return [{"kind": kind, **fields} for kind, fields in kinds_and_fields]


JOURNAL = records(
    ("run", {"run_id": "a1b2c3", "pid": 1, "start_time": 5}),
    ("bridge", {"name": "cxa1b2c3br"}),
    ("netns", {"name": "cx-a1b2c3-a"}), ("netns_inode", {"name": "cx-a1b2c3-a", "inode": 11}),
    ("hosts", {"path": "/etc/netns/cx-a1b2c3-a/hosts"}), ("veth", {"name": "cxa1b2c3v1"}),
    ("netns", {"name": "cx-a1b2c3-b"}), ("netns_inode", {"name": "cx-a1b2c3-b", "inode": 12}),
    ("hosts", {"path": "/etc/netns/cx-a1b2c3-b/hosts"}), ("veth", {"name": "cxa1b2c3v2"}),
    ("qdisc", {"netns": "cx-a1b2c3-a", "ifname": "eth0", "handle": "1:"}),
    ("bpf_pin", {"path": "/run/collapsar/bpffs/x"}),
    ("fw_accept", {"bridge": "cxa1b2c3br", "tag": "collapsar a1b2c3"}),
    ("process", {"instance": "a", "pid": 4242, "start_time": 77}),
)


def test_cleanup_plan_order_processes_first_namespaces_last():
    assert plan_cleanup(JOURNAL) == [
        Step("kill", {"pid": 4242, "start_time": 77, "instance": "a"}),
        Step("kill_netns", {"netns": "cx-a1b2c3-a", "inode": 11}),
        Step("kill_netns", {"netns": "cx-a1b2c3-b", "inode": 12}),
        Step("unpin", {"path": "/run/collapsar/bpffs/x"}),
        Step("del_link", {"name": "cxa1b2c3v2"}),
        Step("del_link", {"name": "cxa1b2c3v1"}),
        Step("del_link", {"name": "cxa1b2c3br"}),
        Step("del_fw", {"bridge": "cxa1b2c3br", "tag": "collapsar a1b2c3"}),
        Step("del_netns", {"netns": "cx-a1b2c3-b"}),
        Step("del_netns", {"netns": "cx-a1b2c3-a"}),
        Step("rm_hosts", {"path": "/etc/netns/cx-a1b2c3-b/hosts"}),
        Step("rm_hosts", {"path": "/etc/netns/cx-a1b2c3-a/hosts"}),
    ]


@pytest.mark.parametrize("end", ["finished", "cleaned"])
def test_an_ended_run_has_nothing_to_clean(end):
    assert plan_cleanup(JOURNAL + records((end, {}))) == []
    assert not is_stale(JOURNAL + records((end, {})))


def test_staleness_follows_the_manager_process():
    me = records(("run", {"run_id": "a1b2c3", "pid": os.getpid(),
                          "start_time": process_start_time(os.getpid())}))
    assert not is_stale(me)
    recycled = records(("run", {"run_id": "a1b2c3", "pid": os.getpid(), "start_time": 1}))
    assert is_stale(recycled)  # same pid, other start time: not our manager
    assert is_stale(JOURNAL)


def test_same_process_needs_a_start_time():
    assert same_process(os.getpid(), process_start_time(os.getpid()))
    assert not same_process(os.getpid(), None)
    assert process_start_time(2**22 + 12345) is None
