"""The run directory, its journal and the run lock, in a temporary state
dir: the layout and the modes of what a run writes, the journal kept in the
state dir (also when the run directory is elsewhere or deleted), finding a
run by id or directory, a torn last line, and one active run at a time (a
killed holder's lock is free).  What cleanup plans from a journal:
test_manager_cleanup_plan.py; the files it refuses to believe or write
through: test_manager_rundir_files.py."""

import os
import shutil
import stat
import subprocess
import sys

import pytest
from manager_rundir_support import state  # noqa: F401 (a fixture, used by name)

from collapsar.errors import CollapsarError, RunError
from collapsar.manager.local.cleanup import find_run
from collapsar.manager.local.rundir import (
    Journal,
    RunDir,
    RunLock,
    list_runs,
    process_start_time,
    read_journal,
    retire,
)


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
    assert (head["run_dir_dev"], head["run_dir_ino"]) == (run.path.stat().st_dev, run.path.stat().st_ino)
    assert run.write_file("plan.json", "{}") == run.path / "plan.json"
    modes = {
        name: stat.S_IMODE(os.lstat(path).st_mode)
        for name, path in (
            ("run", run.path),
            ("logs", run.path / "logs"),
            ("journal", journal),
            ("plan", run.path / "plan.json"),
        )
    }
    assert modes == {"run": 0o700, "logs": 0o700, "journal": 0o600, "plan": 0o600}
    run.finish()
    assert list_runs() == {} and not journal.exists() and not (state / "index" / "a1b2c3").exists()
    copy = run.path / "journal.jsonl"
    assert not copy.is_symlink() and read_journal(copy)[-1]["kind"] == "finished"


def test_run_dir_under_a_chosen_base(state, tmp_path):
    run = RunDir.create("a1b2c3", base=tmp_path / "elsewhere")
    assert run.path == tmp_path / "elsewhere" / "a1b2c3"
    assert find_run("a1b2c3") == ("a1b2c3", state / "journals" / "a1b2c3.jsonl")
    assert find_run(str(run.path)) == ("a1b2c3", state / "journals" / "a1b2c3.jsonl")
    run.finish()  # retired: its directory's copy only says there is nothing left
    assert find_run(str(run.path)) == ("a1b2c3", None)


def test_journal_outlives_a_deleted_run_dir(state, tmp_path):
    run = RunDir.create("a1b2c3", base=tmp_path / "gone")
    run.journal.record("netns", name="cx-a1b2c3-a")
    shutil.rmtree(tmp_path / "gone")
    assert [r["kind"] for r in read_journal(find_run("a1b2c3")[1])] == ["run", "netns"]
    retire(state, "a1b2c3")
    assert list_runs() == {}


def test_find_run_names_the_known_runs(state):
    RunDir.create("a1b2c3")
    with pytest.raises(CollapsarError, match=r"cleanup 0000ff: no such run; .*\(active or stale: a1b2c3\)"):
        find_run("0000ff")


def test_torn_last_line_is_skipped(tmp_path):
    journal = Journal(tmp_path / "j", new=True)
    journal.record("netns", name="x")
    journal.close()
    with open(tmp_path / "j", "a") as f:
        f.write('{"kind": "veth", "na')
    records = read_journal(tmp_path / "j")
    assert [r["kind"] for r in records] == ["netns"]


def test_second_lock_names_the_active_run(state):
    lock = RunLock.acquire(state, "a1b2c3", state / "a1b2c3")
    with pytest.raises(
        RunError,
        match=rf"another collapsar run is active: run a1b2c3 \(manager pid "
        rf"{os.getpid()}, {state}/a1b2c3\)",
    ):
        RunLock.acquire(state, "0000ff", state / "0000ff")
    lock.release()
    RunLock.acquire(state, "0000ff", state / "0000ff").release()


def test_lock_of_a_killed_holder_is_free(state):
    code = (
        f"import sys, os, signal; sys.path[:0] = {sys.path!r}; "
        "from collapsar.manager.local.rundir import RunLock; from pathlib import Path; "
        f"RunLock.acquire(Path({str(state)!r}), 'a1b2c3', Path('/x')); os.kill(os.getpid(), signal.SIGKILL)"
    )
    subprocess.run([sys.executable, "-c", code])
    RunLock.acquire(state, "0000ff", state / "0000ff").release()
