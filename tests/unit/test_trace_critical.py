"""The critical path through hand-made spans (tests/span_files.py, the
workload tools' exact schema): which spans are on it, what each part is,
and that the parts add up to the request, for a chain, a fan-out with a
quorum, retries, failed requests and skipped ops, and replies that waited
for their sender to read them."""

import numpy as np
import pytest
from span_files import RunFiles, chain

from collapsar.tracing.critical import CAUSES, KINDS, REPLY_WAIT, critical_paths
from collapsar.tracing.load import read_spans, span_files


def analyse(run_dir):
    spans, notes = read_spans(span_files(run_dir))
    assert notes == []
    return spans, critical_paths(spans)


def parts_of(spans, paths, request: int = 0) -> dict:
    """{(kind, where, to): ms} of one request, summed per part."""
    p = paths.parts
    out: dict = {}
    for i in np.flatnonzero(p.request == request):
        to = spans.instances[p.to[i]] if p.to[i] >= 0 else None
        key = (KINDS[p.kind[i]], spans.instances[p.where[i]], to)
        out[key] = round(out.get(key, 0) + p.ns[i] / 1e6, 6)
    return {k: v for k, v in out.items() if v}


def assert_parts_add_up(paths):
    p, r = paths.parts, paths.requests
    sums = np.bincount(p.request, weights=p.ns, minlength=len(r)).astype(np.int64)
    assert sums.tolist() == r.duration.tolist()


def test_a_chain_is_cut_into_network_per_hop_compute_and_wait(tmp_path):
    files = RunFiles(tmp_path)
    total = chain(files, 100.0, rtt1_ms=20.5, rtt2_ms=10.3, queue1_us=250)
    spans, paths = analyse(files.close())
    assert len(spans) == 7 and total == pytest.approx(34.45)
    assert paths.requests.complete.tolist() == [True]
    assert paths.requests.duration.tolist() == [34_450_000]
    assert parts_of(spans, paths) == {
        ("network", "client", "front"): 20.5,
        ("wait", "front", None): 0.55,
        ("compute", "front", None): 2.0,
        ("network", "front", "db"): 10.3,
        ("compute", "db", None): 1.0,
        ("wait", "db", None): 0.1,
    }
    queue = paths.parts.ns[(paths.parts.cause == 1)]
    assert sorted(queue.tolist()) == [0, 250_000]  # front's reported queueing; db's none
    assert_parts_add_up(paths)


def test_a_replys_wait_for_its_reader_moves_from_the_hop_to_the_sender(tmp_path):
    files = RunFiles(tmp_path)
    # The client read its reply 0.3 ms after the kernel had it, front its reply from db 1.2 ms after.
    total = chain(files, 100.0, rtt1_ms=20.5, rtt2_ms=10.3, queue1_us=250, reply1_us=300, reply2_us=1200)
    spans, paths = analyse(files.close())
    assert total == pytest.approx(34.45) and paths.requests.duration.tolist() == [34_450_000]
    assert parts_of(spans, paths) == {
        ("network", "client", "front"): 20.2,
        ("wait", "front", None): 0.55 + 1.2,
        ("compute", "front", None): 2.0,
        ("network", "front", "db"): 9.1,
        ("compute", "db", None): 1.0,
        ("wait", "db", None): 0.1,
        ("wait", "client", None): 0.3,
    }
    p = paths.parts
    replies = {spans.instances[w]: ns for w, ns in zip(p.where[p.cause == REPLY_WAIT], p.ns[p.cause == REPLY_WAIT])}
    assert replies == {"client": 300_000, "front": 1_200_000} and CAUSES[REPLY_WAIT] == "reply"
    # The client's wait is the last part of the request, at its end.
    client_wait = np.flatnonzero((p.cause == REPLY_WAIT) & (p.where == spans.instances.index("client")))
    assert p.pos[client_wait].tolist() == [34_450_000 - 300_000] and p.pos.max() == 34_450_000 - 300_000
    assert_parts_add_up(paths)


def test_a_reply_wait_beyond_the_hop_leaves_it_no_network_time(tmp_path):
    files = RunFiles(tmp_path)
    request = files.request("client", 0, 10, reply_wait_us=9000)  # more than the hop's 7 ms: clipped
    files.serve("front", request, 1, 3)
    spans, paths = analyse(files.close())
    assert parts_of(spans, paths) == {("wait", "client", None): 7.0, ("wait", "front", None): 3.0}
    assert_parts_add_up(paths)


def test_spans_without_reply_waits_count_the_whole_hop_as_network(tmp_path):
    """Span files from before wl.reply.wait_us: no wait at the client, the hop as it was."""
    files = RunFiles(tmp_path)
    request = files.span("client", "ab" * 16, None, "request", 0, 10, wl__target="front:7891")
    files.serve("front", request, 1, 3)
    spans, paths = analyse(files.close())
    assert parts_of(spans, paths) == {("network", "client", "front"): 7.0, ("wait", "front", None): 3.0}
    assert len(paths.parts.ns) == 3  # the hop, the serve and its queueing: no reply part at all


def test_fan_out_follows_the_reply_that_completed_the_quorum(tmp_path):
    files = RunFiles(tmp_path)
    request = files.request("client", 0, 40)
    s1 = files.serve("front", request, 10, 20)
    fwd = files.forward("front", s1, 11, 18, ["db:7891", "db-2:7891", "db-3:7891"], nack=2)
    # Replies in the order db (first), db-2 (second: completes the quorum of 2),
    # db-3 abandoned when the forward settled.
    for target, start, dur, status, serve_ms in (
        ("db", 11.1, 6, "ok", 1.0),
        ("db-2", 11.2, 16.0, "ok", 4.0),
        ("db-3", 11.3, 17.4, "abandoned", 2.0),
    ):
        send = files.send("front", fwd, start, dur, target, status=status)
        files.serve(target, send, start + 1, serve_ms)
    spans, paths = analyse(files.close())
    assert parts_of(spans, paths) == {
        ("network", "client", "front"): 20.0,
        ("wait", "front", None): 2.0 + 2.0,  # serve outside the forward, forward beyond its critical send
        ("network", "front", "db-2"): 12.0,
        ("wait", "db-2", None): 4.0,
    }
    assert_parts_add_up(paths)


def test_quorum_order_is_by_reply_not_by_send(tmp_path):
    files = RunFiles(tmp_path)
    request = files.request("client", 0, 30)
    s1 = files.serve("front", request, 5, 20)
    fwd = files.forward("front", s1, 6, 18, ["db:7891", "db-2:7891"], nack=1)
    late = files.send("front", fwd, 6.0, 18.0, "db", status="abandoned")  # sent first, replied last
    files.serve("db", late, 7, 1)
    fast = files.send("front", fwd, 6.5, 17.0, "db-2")
    files.serve("db-2", fast, 7.5, 3)
    spans, paths = analyse(files.close())
    assert ("network", "front", "db-2") in parts_of(spans, paths)
    assert parts_of(spans, paths)[("network", "front", "db-2")] == 14.0


def test_a_retried_forward_takes_the_attempt_that_answered(tmp_path):
    files = RunFiles(tmp_path)
    request = files.request("client", 0, 90)
    s1 = files.serve("front", request, 10, 70)
    fwd = files.forward("front", s1, 10.5, 69, ["db:7891"], nack=1, retries=1)
    first = files.send("front", fwd, 10.6, 50, "db", attempt=0, status="timeout")
    files.serve("db", first, 11.6, 60, status="error")  # answered too late: not on the path
    second = files.send("front", fwd, 60.7, 18.0, "db", attempt=1)
    files.serve("db", second, 61.7, 3.0)
    spans, paths = analyse(files.close())
    parts = parts_of(spans, paths)
    assert parts[("network", "front", "db")] == 15.0
    assert parts[("wait", "db", None)] == 3.0
    assert parts[("wait", "front", None)] == pytest.approx(1.0 + 51.0)  # serve 70-69, forward 69-18
    forward_wait = paths.parts.ns[paths.parts.cause == 3]
    assert forward_wait.tolist() == [51_000_000]
    assert_parts_add_up(paths)


def test_failed_requests_are_kept_with_their_status_and_missing_spans_mark_incomplete(tmp_path):
    files = RunFiles(tmp_path)
    chain(files, 0)
    files.request("client", 100, 10_000, status="timeout")
    refused = files.request("client", 200, 1.5, status="error")
    files.serve("front", refused, 200.5, 0.5, status="error")
    lost = files.request("client", 300, 40)  # ok, but front's spans are gone
    assert lost
    spans, paths = analyse(files.close())
    r = paths.requests
    assert [(s, c) for s, c in zip(r.status.tolist(), r.complete.tolist())] == [
        (0, True),
        (2, False),
        (1, True),
        (0, False),
    ]
    assert_parts_add_up(paths)


def test_skipped_ops_leave_only_what_ran(tmp_path):
    files = RunFiles(tmp_path)
    request = files.request("client", 0, 25)
    serve = files.serve("front", request, 10, 5)  # its compute was skipped: a serve without ops
    assert serve
    spans, paths = analyse(files.close())
    assert parts_of(spans, paths) == {("network", "client", "front"): 20.0, ("wait", "front", None): 5.0}


def test_storage_ops_are_storage(tmp_path):
    files = RunFiles(tmp_path)
    request = files.request("client", 0, 30)
    serve = files.serve("front", request, 10, 10)
    files.storage("front", serve, "load", 10.5, 3)
    files.storage("front", serve, "store", 13.5, 6)
    spans, paths = analyse(files.close())
    assert parts_of(spans, paths) == {
        ("network", "client", "front"): 20.0,
        ("storage", "front", None): 9.0,
        ("wait", "front", None): 1.0,
    }


def test_nested_forwards_and_several_clients(tmp_path):
    files = RunFiles(tmp_path)
    for client, at in (("client", 0), ("client-2", 50)):
        request = files.request(client, at, 40)
        s1 = files.serve("front", request, at + 5, 30)
        f1 = files.forward("front", s1, at + 5, 30, ["mid:7891"], 1)
        send1 = files.send("front", f1, at + 5, 30, "mid")
        s2 = files.serve("mid", send1, at + 7, 26)
        f2 = files.forward("mid", s2, at + 7, 26, ["db:7891"], 1)
        send2 = files.send("mid", f2, at + 7, 26, "db")
        files.serve("db", send2, at + 10, 20)
    spans, paths = analyse(files.close())
    assert sorted(spans.instances[c] for c in paths.requests.client) == ["client", "client-2"]
    for request, code in enumerate(paths.requests.client):
        client = spans.instances[code]
        assert parts_of(spans, paths, request) == {
            (("network", client, "front")): 10.0,
            ("network", "front", "mid"): 4.0,
            ("network", "mid", "db"): 6.0,
            ("wait", "db", None): 20.0,
        }
    assert_parts_add_up(paths)
