"""The spans of one wl-node and its client (workload-node/README.md,
"Tracing"), each line checked against the official OTLP protobuf schema
(wl_otlp.py): queue time as the wait in the node, UDP requests, a request
without trace context (the node starts a trace) and one refused over
--max-request, requests to an unreachable node as error spans, and resource
names escaped."""

import socket

import wl_otlp
import wl_wire as wire


def test_queue_time_is_the_wait_in_the_node(start_node, run_client, tmp_path):
    """Three requests sent at once to one worker: each waits for the computes before it."""
    spans_path = tmp_path / "node.jsonl"
    node = start_node("--trace", spans_path)
    run_client("--to", node.addr, "-C", "20ms,wall", "-r", "1m", "-n", 3)
    node.stop()
    serves = {}
    computes = {}
    for _, _, span in wl_otlp.read_spans(spans_path):
        (serves if span["name"] == "serve" else computes)[span["spanId"]] = span
    assert len(serves) == 3 and len(computes) == 3
    queued = []
    for compute in computes.values():
        serve = serves[compute["parentSpanId"]]
        wait_us = (int(compute["startTimeUnixNano"]) - int(serve["startTimeUnixNano"])) / 1000
        assert abs(serve["attrs"]["wl.queue_us"] - wait_us) <= 1, (serve, compute)
        queued.append(serve["attrs"]["wl.queue_us"])
    # However the three arrive, the last one read waits for at least one 20 ms compute.
    assert max(queued) >= 19_000, queued


def test_udp_refused_and_untraced_requests(binaries, start_node, run_client, tmp_path):
    spans_path = tmp_path / "node.jsonl"
    node = start_node("--trace", spans_path, "-b", "udp://127.0.0.1:0", "--max-request", "4k")
    client_path = tmp_path / "client.jsonl"
    udp_to = f"udp://127.0.0.1:{node.udp_port}"
    run_client("--to", udp_to, "-C", "0", "-n", 2, "--trace", client_path)
    with socket.create_connection(("127.0.0.1", node.port)) as s:
        s.sendall(wire.request(wire.chain(wire.op_compute(1000)), req_id=5, reply_len=60))
        head = s.recv(wire.HDR.size, socket.MSG_WAITALL)
        reply_trace = wire.HDR.unpack(head)[6]
        s.recv(60 - wire.HDR.size, socket.MSG_WAITALL)
        s.sendall(wire.request(wire.chain(wire.op_compute(1000)), req_id=6, pad=8192))
        assert wire.read_reply(s) == (6, wire.ERR, wire.HDR.size + 4)
    node.stop()
    requests = {s["spanId"]: s for _, _, s in wl_otlp.read_spans(client_path)}
    assert [r["attrs"]["wl.proto"] for r in requests.values()] == ["udp", "udp"]
    assert {r["attrs"]["wl.target"] for r in requests.values()} == {udp_to}
    serves = [s for _, _, s in wl_otlp.read_spans(spans_path) if s["name"] == "serve"]
    assert len(serves) == 4
    udp = [s for s in serves if s["attrs"]["wl.proto"] == "udp"]
    assert sorted(s["parentSpanId"] for s in udp) == sorted(requests)
    assert all(s["attrs"]["wl.peer"].startswith("127.0.0.1:") for s in udp)
    tcp = {s["attrs"]["wl.request.bytes"]: s for s in serves if s["attrs"]["wl.proto"] == "tcp"}
    hand = wire.HDR.size + 4 + len(wire.chain(wire.op_compute(1000)))
    # No trace context in the request: the node starts a trace, and its reply carries the id.
    untraced = tcp[hand]
    assert "parentSpanId" not in untraced and untraced["traceId"] == reply_trace.hex()
    assert untraced["attrs"]["wl.reply.bytes"] == 60 and untraced["status"] == {"code": 1}
    refused = tcp[hand + 8192]  # over --max-request: answered ERR without being read
    assert refused["attrs"]["wl.status"] == "error" and refused["status"] == {"code": 2}
    assert refused["attrs"]["wl.reply.bytes"] == wire.HDR.size + 4


def test_requests_to_an_unreachable_node_are_error_spans(run_client, tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spans_path = tmp_path / "client.jsonl"
    result = run_client("--to", f"127.0.0.1:{port}", "-n", 3, "--trace", spans_path, check=False)
    assert result["err"] == 3
    spans = [s for _, _, s in wl_otlp.read_spans(spans_path)]
    assert [s["attrs"]["wl.status"] for s in spans] == ["error"] * 3
    assert all(s["status"] == {"code": 2} and s["attrs"]["wl.request.bytes"] == 0 for s in spans)
    assert len({s["traceId"] for s in spans}) == 3


def test_resource_names_are_escaped(start_node, run_client, tmp_path):
    spans_path = tmp_path / "node.jsonl"
    odd = 'we"ird\\ \t name \u00e9 \udcff'  # \udcff: the byte 0xff, not UTF-8, through os.fsencode
    node = start_node("--trace", spans_path, env={"COLLAPSAR_SERVICE": odd, "COLLAPSAR_INSTANCE": "i\n1"})
    run_client("--to", node.addr, "-C", "0", "-n", 1)
    node.stop()
    (resource, _, _), _ = wl_otlp.read_spans(spans_path)  # serve and compute
    assert resource["service.name"] == 'we"ird\\ \t name \u00e9 \ufffd'
    assert resource["service.instance.id"] == "i\n1" and "collapsar.run_id" not in resource
