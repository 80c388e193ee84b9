"""The files cleanup believes and the files a run writes, in a temporary
state dir: a state directory or run base others can write (refused with the
fix), a symlinked state directory, journals only root could have written, a
line that is not a record, a run id never looked up in the current
directory, and a run directory path, a planted file or a replaced run
directory that is never followed or written through."""

import json
import os

import pytest
from manager_rundir_support import JOURNAL, state  # noqa: F401 (state: a fixture, used by name)

from collapsar.errors import CollapsarError, EnvironmentProblem, RunError
from collapsar.manager.local.cleanup import find_run
from collapsar.manager.local.rundir import (
    Journal,
    RunDir,
    RunLock,
    checked_state_dir,
    list_runs,
    read_journal,
    retire,
)


def test_a_state_directory_others_can_write_is_refused_with_the_fix(state, tmp_path):
    state.mkdir(mode=0o755)
    assert checked_state_dir() == state
    state.chmod(0o775)
    with pytest.raises(EnvironmentProblem) as refused:
        checked_state_dir()
    assert str(refused.value) == (
        f"state directory {state}: writable by group or others (mode 0775); "
        f"expected a directory only root can write; fix: chmod go-w {state}"
    )
    state.chmod(0o755)
    tmp_path.chmod(0o1777)  # a sticky parent (/tmp) is fine; a plain writable one is not
    assert checked_state_dir() == state
    tmp_path.chmod(0o777)
    with pytest.raises(
        EnvironmentProblem,
        match=rf"^state directory {state}: its parent {tmp_path} is "
        rf"writable by group or others \(mode 0777\).*fix: chmod go-w "
        rf"{tmp_path}$",
    ):
        RunLock.acquire(state, "a1b2c3", state / "a1b2c3")
    tmp_path.chmod(0o700)


def test_a_symlinked_state_directory_is_judged_by_where_it_leads(state, tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real").chmod(0o777)
    state.symlink_to(tmp_path / "real")
    with pytest.raises(EnvironmentProblem, match=rf"^state directory {state}: writable by group or others"):
        checked_state_dir()
    assert not (tmp_path / "real" / "journals").exists()


@pytest.mark.parametrize(
    "plant, why",
    [
        (
            lambda path, tmp: path.symlink_to(tmp / "elsewhere.jsonl"),
            "a symlink; expected a regular file written by collapsar run",
        ),
        (lambda path, tmp: os.mkfifo(path, 0o600), "not a regular file; expected one written by collapsar run"),
        (
            lambda path, tmp: (path.write_text(""), path.chmod(0o620)),
            "writable by group or others (mode 0620); expected 0600",
        ),
    ],
)
def test_a_journal_only_root_could_have_written_is_read(tmp_path, plant, why):
    (tmp_path / "elsewhere.jsonl").write_text('{"kind": "run"}\n')
    path = tmp_path / "j.jsonl"
    plant(path, tmp_path)
    with pytest.raises(CollapsarError) as refused:
        read_journal(path)
    assert str(refused.value) == f"journal {path}: {why}"


def test_a_line_that_is_not_a_record_refuses_the_journal(tmp_path):
    path = tmp_path / "j.jsonl"
    journal = Journal(path, new=True)
    journal.record("netns", name="x")
    journal.close()
    with open(path, "a") as f:
        f.write('["not", "a", "record"]\n{"kind": "veth"}\n')
    with pytest.raises(CollapsarError, match=rf"^{path}:2: not a journal record; expected one JSON object per line$"):
        read_journal(path)


def test_a_run_id_is_never_looked_up_in_the_current_directory(state, tmp_path, monkeypatch):
    RunDir.create("0000ff")
    crafted = tmp_path / "a1b2c3"
    crafted.mkdir()
    (crafted / "journal.jsonl").write_text(json.dumps(JOURNAL[0]) + "\n")
    crafted.joinpath("journal.jsonl").chmod(0o600)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CollapsarError, match=r"^cleanup a1b2c3: no such run; .*\(active or stale: 0000ff\)"):
        find_run("a1b2c3")
    with pytest.raises(
        CollapsarError,
        match=rf"^cleanup \./a1b2c3: {crafted} is not the run directory of any "
        rf"run in {state}/index; cleanup reads journals only from "
        rf"{state}/journals$",
    ):
        find_run("./a1b2c3")


def test_a_run_directory_path_already_taken_is_never_followed(state, tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (state / "a1b2c3").parent.mkdir(parents=True, exist_ok=True)
    (state / "a1b2c3").symlink_to(target)
    with pytest.raises(
        RunError,
        match=rf"^run directory {state}/a1b2c3: a symlink is already there; a new "
        rf"run never reuses \(or follows\) one$",
    ):
        RunDir.create("a1b2c3")
    assert list(target.iterdir()) == [] and list_runs() == {}


def test_a_run_base_others_can_write_is_refused(state, tmp_path):
    base = tmp_path / "shared"
    base.mkdir()
    base.chmod(0o777)
    with pytest.raises(EnvironmentProblem, match=rf"^run directory base {base}: writable by group or others"):
        RunDir.create("a1b2c3", base=base)
    base.chmod(0o1777)  # sticky, as /tmp: others cannot move our directory away
    assert RunDir.create("a1b2c3", base=base).path == base / "a1b2c3"


def test_a_file_planted_in_the_run_directory_is_never_written_through(state, tmp_path):
    run = RunDir.create("a1b2c3")
    canary = tmp_path / "canary"
    canary.write_text("keep")
    (run.path / "plan.json").symlink_to(canary)
    with pytest.raises(
        RunError,
        match=rf"^{run.path}/plan.json: already exists; a run writes each of its "
        rf"files once and never over \(or through\) another$",
    ):
        run.write_file("plan.json", "{}")
    assert canary.read_text() == "keep"


def test_a_replaced_run_directory_does_not_get_the_journal(state, tmp_path):
    run = RunDir.create("a1b2c3", base=tmp_path / "runs")
    run.journal.close()
    canary = tmp_path / "canary"
    canary.write_text("keep")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "journal.jsonl.tmp").symlink_to(canary)
    run.path.rename(tmp_path / "moved")
    run.path.symlink_to(elsewhere)
    assert retire(state, "a1b2c3") == (
        f"{run.path} is not the run directory the run created (replaced or a symlink); its journal was not copied there"
    )
    assert canary.read_text() == "keep" and list_runs() == {}
    assert not (tmp_path / "moved" / "journal.jsonl").is_file()  # the link to the retired journal stays
