"""Every operation end to end through wl-client and wl-node on loopback."""

import json
import socket

import pytest
import wl_wire as wire
from wl_support import read_records

pytestmark = pytest.mark.timing  # compute and chain times


def test_compute_takes_the_requested_time(start_node, run_client):
    node = start_node()
    res = run_client("--to", node.addr, "-C", "5ms", "-n", 20)
    assert res["ok"] == 20
    assert res.lat["min"] >= 5000
    assert res.lat["p50"] < 5000 + 20000  # a loaded 2-core box still answers within 20 ms


def test_compute_wall_mode_and_zero(start_node, run_client):
    node = start_node()
    res = run_client("--to", node.addr, "-C", "2ms,wall", "-n", 10)
    assert res["ok"] == 10 and res.lat["min"] >= 2000
    loop = run_client("--to", node.addr, "-C", "5ms,loop", "-n", 10)
    assert loop["ok"] == 10 and loop.lat["min"] >= 4500  # calibrated on an idle-ish CPU: never faster
    assert "calibrated loop" in node.log()
    zero = run_client("--to", node.addr, "-C", "0", "-n", 200)
    assert zero["ok"] == 200 and zero.lat["p50"] < 2000


def test_load_and_store_reach_the_storage_thread(start_node, run_client, tmp_path):
    node = start_node()
    res = run_client("--to", node.addr, "--store-offset", "4k", "-S", "8k", "--load-offset", "4k", "-L", "8k", "-n", 25)
    assert res["ok"] == 25
    stats = node.stats()
    assert stats["stores"] == 25 and stats["loads"] == 25
    assert (tmp_path / "node0.storage").stat().st_size == 12 * 1024


def test_forward_chain_runs_on_the_second_node(start_node, run_client):
    first, second = start_node(), start_node()
    res = run_client("--to", first.addr, "-C", "1ms", "-F", second.addr, "-C", "3ms", "-n", 10)
    assert res["ok"] == 10
    assert res.lat["min"] >= 4000
    assert first.stats()["forwards"] == 10
    assert second.stats()["requests"] == 10


def test_forward_nests_three_levels_and_fwd_end_returns(start_node, run_client):
    a, b, c = start_node(), start_node(), start_node()
    res = run_client(
        "--to",
        a.addr,
        "-F",
        b.addr,
        "-F",
        c.addr,
        "-C",
        "1ms",
        "--fwd-end",
        "-C",
        "1ms",
        "--fwd-end",
        "-C",
        "1ms",
        "-n",
        5,
    )
    assert res["ok"] == 5 and res.lat["min"] >= 3000
    assert [n.stats()["requests"] for n in (a, b, c)] == [5, 5, 5]


def test_skip_probability_matches_over_many_requests(start_node, run_client):
    node = start_node()
    res = run_client("--to", node.addr, "--skip", "1,prob=0.3", "-S", "512", "-n", 2000, "--seed", 11)
    assert res["ok"] == 2000
    stores = node.stats()["stores"]
    assert 0.66 * 2000 <= stores <= 0.74 * 2000  # 70% executed; 4 sigma is about 0.04


def test_skip_always_and_never(start_node, run_client):
    node = start_node()
    run_client("--to", node.addr, "--skip", "2", "-S", "1k", "-S", "1k", "-L", "1k", "-n", 10)
    stats = node.stats()
    assert (stats["stores"], stats["loads"]) == (0, 10)
    run_client("--to", node.addr, "--skip", "1,prob=0", "-S", "1k", "-n", 10)
    assert node.stats()["stores"] == 10


def test_request_and_reply_sizes(start_node, run_client):
    node = start_node()
    res = run_client("--to", node.addr, "--ps", "4k", "--rs", "10k", "-C", "0", "-n", 10)
    assert res["ok"] == 10
    stats = node.stats()
    assert stats["bytes_in"] == 10 * 4096
    assert stats["bytes_out"] == 10 * 10240


def test_per_request_csv_and_json_records(start_node, binaries, tmp_path, run_client):
    node = start_node()
    out = tmp_path / "recs.csv"
    run_client("--to", node.addr, "-C", "0", "-n", 50, "--nt", 2, "--ns", 5, "-r", 1000, "-o", out)
    recs = read_records(out)
    assert len(recs) == 100
    assert {r["thread"] for r in recs} == {"0", "1"}
    assert {r["session"] for r in recs} == {str(i) for i in range(5)}
    assert all(r["status"] == "OK" and r["latency_us"] > 0 for r in recs)
    assert node.stats()["accepted"] == 10
    jout = tmp_path / "recs.jsonl"
    run_client("--to", node.addr, "-n", 3, "-o", jout, "--output-format", "json")
    lines = [json.loads(x) for x in jout.read_text().splitlines()]
    assert [x["status"] for x in lines] == ["OK"] * 3


def test_opentelemetry_trace_links_client_and_nodes(start_node, run_client, tmp_path):
    t1, t2 = tmp_path / "n1.jsonl", tmp_path / "n2.jsonl"
    second = start_node("--trace", t2)
    first = start_node("--trace", t1)
    tc = tmp_path / "client.jsonl"
    run_client("--to", first.addr, "-C", "1ms", "-F", second.addr, "-C", "2ms", "-n", 3, "--trace", tc)
    first.stop()
    second.stop()
    spans = []
    for path in (tc, t1, t2):  # the schema itself: test_trace_schema_*.py
        for line in path.read_text().splitlines():
            for rs in json.loads(line)["resourceSpans"]:
                service = rs["resource"]["attributes"][0]["value"]["stringValue"]
                for s in rs["scopeSpans"][0]["spans"]:
                    spans.append((service, s))
    by_trace = {}
    for service, s in spans:
        by_trace.setdefault(s["traceId"], []).append((service, s))
    assert len(by_trace) == 3
    for trace_spans in by_trace.values():
        names = sorted(s["name"] for _, s in trace_spans)
        assert names == sorted(["request", "serve", "compute", "forward", "forward.send", "serve", "compute"])
        ids = {s["spanId"]: s for _, s in trace_spans}
        roots = [s for _, s in trace_spans if "parentSpanId" not in s]
        assert [r["name"] for r in roots] == ["request"]
        for _, s in trace_spans:  # every parent link resolves inside the trace
            assert "parentSpanId" not in s or s["parentSpanId"] in ids
        compute2 = [s for svc, s in trace_spans if svc == "wl-node" and s["name"] == "compute"]
        durations = sorted(int(s["endTimeUnixNano"]) - int(s["startTimeUnixNano"]) for s in compute2)
        assert durations[0] >= 1_000_000 and durations[1] >= 2_000_000


def test_hand_encoded_request_gets_a_reply(start_node):
    node = start_node()
    with socket.create_connection(("127.0.0.1", node.port)) as s:
        s.sendall(wire.request(wire.chain(wire.op_compute(1000)), req_id=77, reply_len=100))
        assert wire.read_reply(s) == (77, wire.OK, 100)
