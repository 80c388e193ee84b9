"""The journal, the lock, the run directory and cleanup planning, in a
temporary state dir: what is written where and how, and which journals and
records cleanup refuses (the attacks themselves, as root on real namespaces,
links and processes: tests/kernel/test_cleanup_attacks.py)."""

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from collapsar.errors import CollapsarError, EnvironmentProblem, RunError
from collapsar.manager.local.cleanup import Step, find_run, plan_cleanup
from collapsar.manager.local.rundir import (
    Journal,
    RunDir,
    RunLock,
    checked_state_dir,
    is_stale,
    list_runs,
    manager_alive,
    process_start_time,
    read_journal,
    retire,
    same_process,
)


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


def records(*kinds_and_fields):
    return [{"kind": kind, **fields} for kind, fields in kinds_and_fields]


# What the manager writes for a run of two instances (local/netns.py, local/run.py).
JOURNAL = records(
    ("run", {"run_id": "a1b2c3", "pid": 1, "start_time": 5}),
    ("bridge", {"name": "cxa1b2c3br"}),
    ("netns", {"name": "cx-a1b2c3-a", "instance": "a"}),
    ("netns_inode", {"name": "cx-a1b2c3-a", "inode": 11}),
    ("hosts", {"path": "/etc/netns/cx-a1b2c3-a/hosts"}),
    ("veth", {"name": "cxa1b2c3v1", "instance": "a"}),
    ("netns", {"name": "cx-a1b2c3-b", "instance": "b"}),
    ("netns_inode", {"name": "cx-a1b2c3-b", "inode": 12}),
    ("hosts", {"path": "/etc/netns/cx-a1b2c3-b/hosts"}),
    ("veth", {"name": "cxa1b2c3v2", "instance": "b"}),
    ("qdisc", {"netns": "cx-a1b2c3-a", "ifname": "eth0", "handle": "1:"}),
    ("bpf_pin", {"path": "/sys/fs/bpf/collapsar/a1b2c3/counters"}),
    ("fw_accept", {"bridge": "cxa1b2c3br", "tag": "collapsar a1b2c3"}),
    ("process", {"instance": "a", "pid": 4242, "start_time": 77}),
)


def test_cleanup_plan_order_processes_first_namespaces_last():
    assert plan_cleanup(JOURNAL) == [
        Step("kill", {"pid": 4242, "start_time": 77, "instance": "a", "netns": "cx-a1b2c3-a", "inode": 11}),
        Step("kill_netns", {"netns": "cx-a1b2c3-a", "inode": 11}),
        Step("kill_netns", {"netns": "cx-a1b2c3-b", "inode": 12}),
        Step("unpin", {"path": "/sys/fs/bpf/collapsar/a1b2c3/counters"}),
        Step("del_link", {"name": "cxa1b2c3v2"}),
        Step("del_link", {"name": "cxa1b2c3v1"}),
        Step("del_link", {"name": "cxa1b2c3br"}),
        Step("del_fw", {"bridge": "cxa1b2c3br", "tag": "collapsar a1b2c3"}),
        Step("del_netns", {"netns": "cx-a1b2c3-b"}),
        Step("del_netns", {"netns": "cx-a1b2c3-a"}),
        Step("rm_hosts", {"path": "/etc/netns/cx-a1b2c3-b/hosts"}),
        Step("rm_hosts", {"path": "/etc/netns/cx-a1b2c3-a/hosts"}),
    ]


def _me() -> dict:
    return {"kind": "process", "instance": "a", "pid": os.getpid(), "start_time": process_start_time(os.getpid())}


# One record that is not run a1b2c3's own (line 15 of JOURNAL + it), and what the refusal says.
FOREIGN = [
    (
        {"kind": "netns", "name": "/run/netns/victim", "instance": "c"},
        "netns record '/run/netns/victim' (instance c): not a namespace of run a1b2c3; expected cx-a1b2c3-c",
    ),
    (
        {"kind": "netns", "name": "cx-a1b2c3-c/../../../etc", "instance": "c"},
        "netns record 'cx-a1b2c3-c/../../../etc' (instance c): not a namespace of run a1b2c3; expected cx-a1b2c3-c",
    ),
    (
        {"kind": "netns", "name": "cx-0000ff-c", "instance": "c"},
        "netns record 'cx-0000ff-c' (instance c): not a namespace of run a1b2c3; expected cx-a1b2c3-c",
    ),
    (
        {"kind": "netns", "name": "cx-a1b2c3-a", "instance": "a"},
        "netns record 'cx-a1b2c3-a': a second record of that namespace; expected one",
    ),
    (
        {"kind": "netns_inode", "name": "/proc/1/ns/net", "inode": 4026531840},
        "netns_inode record '/proc/1/ns/net': not a namespace this journal records for run a1b2c3; expected one "
        "of cx-a1b2c3-a, cx-a1b2c3-b and an inode number",
    ),
    (
        {"kind": "veth", "name": "eth0", "instance": "a"},
        "veth record 'eth0': not a veth of run a1b2c3 (instance a); expected cxa1b2c3v1",
    ),
    (
        {"kind": "veth", "name": "cx0000ffv1", "instance": "z"},
        "veth record 'cx0000ffv1': not a veth of run a1b2c3 (instance z); expected one of cxa1b2c3v1, cxa1b2c3v2",
    ),
    (
        {"kind": "bridge", "name": "docker0"},
        "bridge record 'docker0': not the bridge of run a1b2c3; expected cxa1b2c3br",
    ),
    (
        {"kind": "fw_accept", "bridge": "docker0", "tag": "x"},
        "fw_accept record for bridge 'docker0': not the bridge of run a1b2c3; expected cxa1b2c3br and a tag",
    ),
    (
        {"kind": "hosts", "path": "/etc/passwd"},
        "hosts record '/etc/passwd': not a hosts file of run a1b2c3; "
        "expected one of /etc/netns/cx-a1b2c3-a/hosts, /etc/netns/cx-a1b2c3-b/hosts",
    ),
    (
        {"kind": "hosts", "path": "/etc/netns/cx-a1b2c3-a/../../shadow"},
        "hosts record '/etc/netns/cx-a1b2c3-a/../../shadow': not a hosts file of run a1b2c3; expected one of",
    ),
    (
        {"kind": "hosts", "path": "/etc/netns/cx-0000ff-a/hosts"},
        "hosts record '/etc/netns/cx-0000ff-a/hosts': not a hosts file of run a1b2c3",
    ),
    (
        {"kind": "bpf_pin", "path": "/sys/fs/bpf/collapsar/a1b2c3/../0000ff/m"},
        "bpf_pin record "
        "'/sys/fs/bpf/collapsar/a1b2c3/../0000ff/m': not in run a1b2c3's pin directory; expected "
        "/sys/fs/bpf/collapsar/a1b2c3/NAME",
    ),
    ({"kind": "bpf_pin", "path": "/sys/fs/bpf/tc/globals/m"}, "bpf_pin record '/sys/fs/bpf/tc/globals/m': not in"),
    (
        {"kind": "process", "instance": "a", "pid": -1, "start_time": None},
        "process record pid -1 (instance a): expected a pid above 1 and its start time",
    ),
    (
        {"kind": "process", "instance": "a", "pid": "1", "start_time": 5},
        "process record pid 1 (instance a): expected a pid above 1 and its start time",
    ),
    (
        {"kind": "process", "instance": "zz", "pid": 4243, "start_time": 1},
        "process record pid 4243 (instance zz): the journal records no namespace for that instance",
    ),
    (
        _me(),
        f"process record pid {os.getpid()} (instance a): it is not in the run's namespace cx-a1b2c3-a; "
        f"a process the run did not start is never killed",
    ),
]


@pytest.mark.parametrize("record, why", FOREIGN, ids=[f"{r['kind']}-{i}" for i, (r, _) in enumerate(FOREIGN)])
def test_a_record_not_the_runs_own_refuses_the_whole_journal(record, why):
    with pytest.raises(CollapsarError) as refused:
        plan_cleanup(JOURNAL + [record], "a1b2c3", where="/run/collapsar/journals/a1b2c3.jsonl")
    assert str(refused.value).startswith(f"/run/collapsar/journals/a1b2c3.jsonl:15: {why}")


def test_a_refusal_names_the_first_bad_record_and_counts_the_others():
    bad = [record for record, _ in FOREIGN[:3]]
    with pytest.raises(
        CollapsarError,
        match=r"^journal:15: netns record '/run/netns/victim' .* "
        r"\(and 2 more refused records\)$",
    ):
        plan_cleanup(JOURNAL + bad)


def test_a_journal_of_another_run_is_refused():
    with pytest.raises(
        CollapsarError,
        match=r"^journal:1: first record 'run' of run 'a1b2c3'; "
        r"expected the 'run' record of run 0000ff",
    ):
        plan_cleanup(JOURNAL, "0000ff")
    with pytest.raises(CollapsarError, match=r"run id '\.\./x': expected six hex digits"):
        plan_cleanup(records(("run", {"run_id": "../x", "pid": 1})))


def test_a_process_gone_or_recycled_is_not_a_reason_to_refuse():
    me = _me()
    recycled = {**me, "start_time": me["start_time"] + 1}  # our pid, another start: not that process
    gone = {**me, "pid": 2**22 + 12345}
    steps = plan_cleanup(JOURNAL + [recycled, gone])
    assert [s.target["pid"] for s in steps if s.action == "kill"] == [4242, os.getpid(), 2**22 + 12345]


def test_a_manager_record_with_a_crafted_pid_is_not_alive():
    assert not manager_alive(records(("run", {"run_id": "a1b2c3", "pid": "1; rm -rf /", "start_time": 5})))
    me = {"run_id": "a1b2c3", "pid": os.getpid(), "start_time": process_start_time(os.getpid())}
    assert manager_alive(records(("run", me)))
    assert not manager_alive(records(("netns", {"name": "x"}), ("run", me)))  # the head comes first


@pytest.mark.parametrize("end", ["finished", "cleaned"])
def test_an_ended_run_has_nothing_to_clean(end):
    assert plan_cleanup(JOURNAL + records((end, {}))) == []
    assert not is_stale(JOURNAL + records((end, {})))


def test_staleness_follows_the_manager_process():
    me = records(("run", {"run_id": "a1b2c3", "pid": os.getpid(), "start_time": process_start_time(os.getpid())}))
    assert not is_stale(me)
    recycled = records(("run", {"run_id": "a1b2c3", "pid": os.getpid(), "start_time": 1}))
    assert is_stale(recycled)  # same pid, other start time: not our manager
    assert is_stale(JOURNAL)


def test_same_process_needs_a_start_time():
    assert same_process(os.getpid(), process_start_time(os.getpid()))
    assert not same_process(os.getpid(), None)
    assert process_start_time(2**22 + 12345) is None


# ---- files cleanup believes, and files a run writes ----------------------------


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
