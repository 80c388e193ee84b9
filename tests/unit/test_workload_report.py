"""The workload's end-of-run report (collapsar.manager.measure.workload): the
network share of a chain as `wl-client --check` describes it, on the RTTs of
a real parsed and collapsed topology, the summary line, and reading what
the clients wrote; and the verdict on instances that failed on their own
(collapsar.manager.local.outputs), from real processes."""

import json
import os
import time
from types import SimpleNamespace

import pytest

from collapsar.errors import InstanceFailure
from collapsar.manager.local import outputs
from collapsar.manager.local.supervisor import Exit, Launch, Supervisor
from collapsar.manager.measure.workload import Hop, chain_share, network_share, read_summary, rtt_in, summary_line
from collapsar.parser import parse_text
from collapsar.timeline import build_timeline

# client -(10ms)- sw -(5ms)- front; db and db-2 each hang off sw (2ms and 7ms).
TOPOLOGY = """\
experiment: {name: share}
services:
  client: {command: [wl-client]}
  front: {command: [wl-node]}
  db: {command: [wl-node], replicas: 2}
  far: {command: [wl-node]}
bridges: [sw]
links:
  - {from: client, to: sw, latency: 10ms}
  - {from: front, to: sw, latency: 5ms}
  - {from: db, to: sw, latency: 2ms}
  - {from: far, to: sw, latency: 40ms}
events:
  - {at: 3s, link: [far, sw], set: {latency: 1ms}}
  - {at: 5s, service: db, action: leave, amount: 1}
"""
MS = 1000


@pytest.fixture(scope="module")
def timeline():
    return build_timeline(parse_text(TOPOLOGY, "share.yaml"))


@pytest.fixture(scope="module")
def rtt(timeline):
    state = timeline.steps[0].state
    names = list(state.instances)
    return rtt_in(state, {**{n: n for n in names}, "10.0.0.9": "front"})


def compute(time="1ms"):
    return {"op": "compute", "time": time}


def forward(to, nack, *chain):
    return {"op": "forward", "to": list(to), "port": 7891, "nack": nack, "proto": "tcp", "chain": list(chain)}


def test_rtts_are_the_collapsed_paths_there_and_back(rtt):
    assert rtt("client", "front") == 30 * MS  # (10 + 5) each way
    assert rtt("front", "db") == rtt("front", "db-2") == 14 * MS
    assert rtt("client", "10.0.0.9") == 30 * MS  # an address of the run names its instance
    assert rtt("client", "example.org") is None and rtt("front", "front") == 0


def test_a_chain_adds_its_hops(rtt):
    chain = {
        "program": "wl-client",
        "to": "front",
        "port": 7891,
        "proto": "tcp",
        "chain": [compute(), forward(["db"], 1, compute()), {"op": "store", "bytes": 10}],
    }
    share, hops = chain_share(chain, "client", rtt)
    assert share == 44 * MS
    assert [h.describe() for h in hops] == ["client->front 30 ms", "front->db 14 ms"]


def test_a_quorum_waits_for_the_nack_th_fastest_target_with_its_own_sub_chain(rtt):
    # From front: db 14 ms + db's own forward to far (2+40 each way: 84 ms);
    # db-2 14 ms; far 90 ms.  nack 2 of 3: the second smallest, db's 98 ms.
    nested = {"to": "front", "chain": [{**forward(["db", "far"], 1), "chain": [forward(["far"], 1)]}]}
    share, hops = chain_share(nested, "client", rtt)
    # db: 14 + (db -> far 84) = 98; far: 90 + (far -> far 0) = 90; nack 1 -> 90.
    assert share == (30 + 90) * MS
    assert [h.describe() for h in hops] == [
        "client->front 30 ms",
        "front->{db 14 ms, far 90 ms} nack 1",
        "db->far 84 ms",
        "far->far 0 ms",
    ]
    flat = {"to": "front", "chain": [forward(["db", "db-2", "far"], 2)]}
    assert chain_share(flat, "client", rtt)[0] == (30 + 14) * MS
    assert (
        chain_share({"to": "front", "chain": [forward(["db", "db-2", "far"], 3)]}, "client", rtt)[0] == (30 + 90) * MS
    )


def test_a_target_without_a_path_leaves_the_share_unknown_unless_the_quorum_does_without_it(rtt):
    unknown = {"to": "front", "chain": [forward(["nowhere"], 1)]}
    assert chain_share(unknown, "client", rtt)[0] is None
    spare = {"to": "front", "chain": [forward(["nowhere", "db"], 1)]}
    assert chain_share(spare, "client", rtt)[0] == 44 * MS
    assert chain_share({"to": "nowhere", "chain": []}, "client", rtt)[0] is None


SUMMARY = {
    "requests": 20,
    "ok": 18,
    "timeout": 1,
    "err": 1,
    "unsent": 0,
    "instance": "client",
    "service": "client",
    "latency_us": {"p50": 46210.5, "p99": 48900.0},
}


def test_the_summary_line_puts_the_client_next_to_its_network_share():
    hops = [Hop("client", ("front",), (30_000,), 1), Hop("front", ("db", "db-2"), (14_000, None), 1)]
    assert summary_line("client", SUMMARY, 44_000, hops, [3_000_000]) == (
        "workload client: 20 requests (ok 18, err 1, timeout 1); latency p50 46.21 ms, p99 48.9 ms; "
        "network share of the chain: 44 ms (configured RTTs: client->front 30 ms, "
        "front->{db 14 ms, db-2 -} nack 1); later events change these paths at 3s"
    )
    assert summary_line("client", None, None, hops[:1], [], "workload/client.summary.json was not written", None) == (
        "workload client: no summary (workload/client.summary.json was not written); network share of the "
        "chain: unknown: a hop has no path (configured RTTs: client->front 30 ms)"
    )
    assert summary_line("wrapped", SUMMARY, None, [], [], None, "its command is not wl-client itself") == (
        "workload wrapped: 20 requests (ok 18, err 1, timeout 1); latency p50 46.21 ms, p99 48.9 ms; "
        "network share of the chain: unknown (its command is not wl-client itself)"
    )


def test_summaries_are_read_from_regular_files_only(tmp_path):
    (tmp_path / "client.summary.json").write_text(json.dumps(SUMMARY))
    assert read_summary(tmp_path / "client.summary.json") == (SUMMARY, None)
    assert read_summary(tmp_path / "gone.summary.json") == (None, "workload/gone.summary.json was not written")
    (tmp_path / "link.summary.json").symlink_to(tmp_path / "client.summary.json")
    assert read_summary(tmp_path / "link.summary.json")[0] is None
    os.mkfifo(tmp_path / "fifo.summary.json")
    assert read_summary(tmp_path / "fifo.summary.json") == (None, "workload/fifo.summary.json is not a regular file")
    (tmp_path / "bad.summary.json").write_text("[1, 2")
    assert read_summary(tmp_path / "bad.summary.json")[1].startswith("workload/bad.summary.json is no summary")


def test_the_share_is_taken_when_the_client_starts_and_later_changes_are_named(timeline):
    # far's link changes at 3s; db-2 leaves at 5s (its paths go).
    known = {name: name for name in timeline.steps[0].state.instances}
    to_far = {"to": "front", "chain": [forward(["far"], 1)]}
    assert network_share(to_far, "client", timeline, known)[0::2] == ((30 + 90) * MS, 0)
    assert network_share(to_far, "client", timeline, known)[3] == [3_000_000]
    to_db = {"to": "front", "chain": [forward(["db", "db-2"], 2)]}
    share, hops, at_us, changes = network_share(to_db, "client", timeline, known)
    assert (share, at_us, changes) == (44 * MS, 0, [5_000_000])


# ---- instances that fail on their own --------------------------------------------------


def test_only_exits_nobody_asked_for_fail_the_run_with_their_last_lines(tmp_path):
    logs = lambda inst: (tmp_path / f"{inst}.out", tmp_path / f"{inst}.err")  # noqa: E731
    sup = Supervisor(logs, prefix=lambda inst: [], on_start=lambda *a: None, grace_s=2)
    try:
        noisy = "for i in 1 2 3 4 5 6 7; do echo line $i; done; printf 'esc\\033[2Jape\\n' >&2; exit 3"
        sup.start(Launch("noisy", ("sh", "-c", noisy)))
        sup.start(Launch("quiet", ("sh", "-c", "echo all went well; exit 4")))
        sup.start(Launch("fine", ("true",)))
        sup.start(Launch("trapped", ("sh", "-c", "trap 'exit 7' TERM; while :; do sleep 0.05; done")))
        sup.start(Launch("left", ("sleep", "30")))
        deadline = time.monotonic() + 5
        while len(sup.exits) < 3 and time.monotonic() < deadline:
            sup.poll()
            time.sleep(0.01)
        sup.kill("left")  # a crash event
        sup.stop_all()  # the end of the run: `trapped` exits 7 on its SIGTERM
    finally:
        sup.close()
    run = SimpleNamespace(supervisor=sup, rundir=SimpleNamespace(log_paths=logs))
    with pytest.raises(InstanceFailure) as raised:
        outputs.raise_on_failed_instances(run)
    assert raised.value.exit_code == 6
    by_instance: dict[str, list[str]] = {}  # in the order they exited, which the two race for
    for line in raised.value.lines():
        by_instance.setdefault(
            line.split()[1].rstrip(":|") if line.startswith("instance") else line.split("|")[0].strip(), []
        ).append(line)
    assert by_instance == {
        "noisy": [
            "instance noisy: exited with status 3 on its own; the last lines of logs/noisy.err:",
            "  noisy| esc?[2Jape",
        ],  # the terminal's escape shown, not sent
        "quiet": [
            "instance quiet: exited with status 4 on its own; the last lines of logs/quiet.out:",
            "  quiet| all went well",
        ],
    }
    assert outputs.log_tail(tmp_path / "noisy.out") == [f"line {i}" for i in range(3, 8)]


def test_a_program_that_could_not_be_executed_is_said_so(tmp_path):
    logs = lambda inst: (tmp_path / f"{inst}.out", tmp_path / f"{inst}.err")  # noqa: E731
    (tmp_path / "typo.err").write_text('exec of "iperf33" failed: No such file or directory\n')
    run = SimpleNamespace(
        supervisor=SimpleNamespace(exits=[Exit("typo", 1, 1, "exited"), Exit("typo", 2, -11, "exited")]),
        rundir=SimpleNamespace(log_paths=logs),
    )
    with pytest.raises(InstanceFailure) as raised:
        outputs.raise_on_failed_instances(run)
    assert raised.value.lines() == [
        'instance typo: could not start: exec of "iperf33" failed: No such file or directory',
        "instance typo: was killed by SIGSEGV, a signal this run did not send; the last lines of logs/typo.err:",
        '  typo| exec of "iperf33" failed: No such file or directory',
    ]
