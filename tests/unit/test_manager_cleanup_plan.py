"""Cleanup planning from a run's journal, without touching the host: the
order of the steps (processes first, namespaces last), every record that is
not the run's own refusing the whole journal with the reason, a journal of
another run, processes gone or recycled, ended runs, and when a run is stale
(its manager process, by pid and start time).  The same attacks as root on
real namespaces, links and processes: tests/kernel/test_cleanup_attacks_*.py."""

import os

import pytest
from manager_rundir_support import JOURNAL, records

from collapsar.errors import CollapsarError
from collapsar.manager.local.cleanup import Step, plan_cleanup
from collapsar.manager.local.rundir import is_stale, manager_alive, process_start_time, same_process


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
