"""The spans of wl-node and wl-client (workload-node/README.md, "Tracing"):
the fixed schema that `collapsar trace` reads (names, kinds, parents across
processes, attributes, statuses, resource), every line checked against the
official OTLP protobuf schema (wl_otlp.py), and the run directory contract
(COLLAPSAR_TRACE_DIR: files, names, refusals, flushing)."""

import json
import os
import signal
import socket
import subprocess
import time

import wl_otlp
import wl_wire as wire
from wl_support import LISTEN_RE, read_records, sanitizer_env

RUN_ID = "run-42"


def run_env(tmp_path, service, instance):
    return {
        "COLLAPSAR_TRACE_DIR": str(tmp_path / "run"),
        "COLLAPSAR_SERVICE": service,
        "COLLAPSAR_INSTANCE": instance,
        "COLLAPSAR_RUN_ID": RUN_ID,
    }


def start_client(binaries, *args, env=None):
    return subprocess.Popen(
        [str(binaries["client"]), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**sanitizer_env(), **(env or {})},
        umask=0o022,
    )


def finish(proc, timeout=120):
    out, err = proc.communicate(timeout=timeout)
    assert "Sanitizer" not in err and "runtime error" not in err, err
    return proc.returncode, out, err


def wait_for(predicate, what, timeout=20):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def by_trace(files):
    """{trace id: [(instance, span)]} over every span of the given files."""
    traces = {}
    for path in files:
        for resource, _, span in wl_otlp.read_spans(path):
            traces.setdefault(span["traceId"], []).append((resource["service.instance.id"], span))
    return traces


def test_spans_name_every_process_op_and_parent(binaries, start_node, tmp_path):
    """client -> front -> (db, cache, slow) with a quorum of 2 of 3: slow answers after the quorum."""
    run = tmp_path / "run"
    run.mkdir()
    db = start_node(env=run_env(tmp_path, "db", "db-1"))
    cache = start_node(env=run_env(tmp_path, "cache", "cache-1"))
    slow = start_node(env=run_env(tmp_path, "slow", "slow-1"))
    front = start_node(env=run_env(tmp_path, "front", "front-1"))
    targets = [db.addr, cache.addr, slow.addr]
    proc = start_client(
        binaries,
        "--to",
        front.addr,
        "-C",
        "1ms,wall",
        "--skip",
        "1",
        "-C",
        "900ms",
        "-F",
        ",".join(targets) + ",nack=2,timeout=2s,retry=1,ps=600,rs=64,branch",
        "-C",
        "2ms",
        "--store-offset",
        "8k",
        "-S",
        "4k,sync",
        "--next-branch",
        "--load-offset",
        "4k",
        "-L",
        "1k",
        "--next-branch",
        "-C",
        "300ms,wall",
        "--fwd-end",
        "--store-offset",
        "16k",
        "-S",
        "2k,psync",
        "--ps",
        "1000",
        "--rs",
        "100",
        "-r",
        "10",
        "-n",
        "2",
        "--json",
        env=run_env(tmp_path, "shop", "client-1"),
    )
    code, out, err = finish(proc)
    assert code == 0, err
    assert json.loads(out)["ok"] == 2
    wait_for(lambda: slow.stats()["replies"] == 2, "the slow node's replies")
    pids = {"client-1": proc.pid}
    for name, node in (("front-1", front), ("db-1", db), ("cache-1", cache), ("slow-1", slow)):
        pids[name] = node.proc.pid
        assert node.stop() == 0
    services = {"client-1": "shop", "front-1": "front", "db-1": "db", "cache-1": "cache", "slow-1": "slow"}
    for inst, service in services.items():
        for resource, scope, _ in wl_otlp.read_spans(run / f"{inst}.spans.jsonl"):
            assert scope == "collapsar-workload"
            assert resource == {
                "service.name": service,
                "service.instance.id": inst,
                "collapsar.run_id": RUN_ID,
                "process.pid": pids[inst],
            }
    traces = by_trace(run / f"{inst}.spans.jsonl" for inst in services)
    assert len(traces) == 2
    request_ids = set()
    for spans in traces.values():
        assert len({s["spanId"] for _, s in spans}) == len(spans)
        names = sorted((inst, s["name"]) for inst, s in spans)
        assert names == sorted(
            [
                ("client-1", "request"),
                ("front-1", "serve"),
                ("front-1", "compute"),
                ("front-1", "forward"),
                ("front-1", "forward.send"),
                ("front-1", "forward.send"),
                ("front-1", "forward.send"),
                ("front-1", "store"),
                ("db-1", "serve"),
                ("db-1", "compute"),
                ("db-1", "store"),
                ("cache-1", "serve"),
                ("cache-1", "load"),
                ("slow-1", "serve"),
                ("slow-1", "compute"),
            ]
        )

        def one(inst, name):
            found = [s for i, s in spans if i == inst and s["name"] == name]  # noqa: B023 - called in this iteration
            assert len(found) == 1, (inst, name, found)
            return found[0]

        def check(span, kind, parent, attrs, code=1):
            assert span["kind"] == kind, span
            assert span.get("parentSpanId") == (parent["spanId"] if parent else None), span
            assert span["status"] == {"code": code}, span
            for key, value in attrs.items():
                assert span["attrs"].get(key) == value, (key, span)
            return span

        def duration_us(span):
            return (int(span["endTimeUnixNano"]) - int(span["startTimeUnixNano"])) / 1000

        request = check(
            one("client-1", "request"),
            3,
            None,
            {
                "wl.target": front.addr,
                "wl.attempt": 0,
                "wl.status": "ok",
                "wl.request.bytes": 1000,
                "wl.reply.bytes": 100,
                "wl.proto": "tcp",
                "wl.thread": 0,
                "wl.session": 0,
            },
        )
        request_ids.add(request["attrs"]["wl.request_id"])
        assert request["attrs"]["wl.send_lateness_us"] >= 0  # open loop (-r)
        # Its reply waited for the client's read; the span still ends at the read.
        assert 0 <= request["attrs"]["wl.reply.wait_us"] <= duration_us(request)
        serve = check(
            one("front-1", "serve"),
            2,
            request,
            {"wl.status": "ok", "wl.request.bytes": 1000, "wl.reply.bytes": 100, "wl.proto": "tcp", "wl.skipped": 1},
        )
        assert serve["attrs"]["wl.peer"].startswith("127.0.0.1:")
        # It starts at the kernel's receive of the request, wl.socket_us before the node read it.
        assert 0 <= serve["attrs"]["wl.socket_us"] <= serve["attrs"]["wl.queue_us"]
        # One clock on this host: the client's request encloses the node's serve.
        assert int(request["startTimeUnixNano"]) <= int(serve["startTimeUnixNano"])
        assert int(serve["endTimeUnixNano"]) <= int(request["endTimeUnixNano"])
        compute = check(
            one("front-1", "compute"),
            1,
            serve,
            {"wl.compute.us": 1000, "wl.compute.ns": 1_000_000, "wl.compute.mode": "wall", "wl.status": "ok"},
        )
        assert duration_us(compute) >= 1000
        forward = check(
            one("front-1", "forward"),
            1,
            serve,
            {
                "wl.forward.targets": targets,
                "wl.forward.nack": 2,
                "wl.forward.timeout_us": 2_000_000,
                "wl.forward.retries": 1,
                "wl.forward.ok": 2,
                "wl.forward.failed": 0,
                "wl.status": "ok",
            },
        )
        sends = {s["attrs"]["wl.target"]: s for i, s in spans if s["name"] == "forward.send"}
        assert sorted(sends) == sorted(targets)
        for node, status in ((db, "ok"), (cache, "ok"), (slow, "abandoned")):
            check(
                sends[node.addr],
                3,
                forward,
                {"wl.attempt": 0, "wl.status": status, "net.peer.name": "127.0.0.1", "net.peer.port": node.port},
                code=1 if status == "ok" else 0,
            )
        for node in (db, cache):  # a reply came: how long it waited for front to read it
            assert 0 <= sends[node.addr]["attrs"]["wl.reply.wait_us"] <= duration_us(sends[node.addr])
        assert "wl.reply.wait_us" not in sends[slow.addr]["attrs"]  # none came
        assert sends[slow.addr]["endTimeUnixNano"] == forward["endTimeUnixNano"]  # given up at the quorum
        store = check(one("front-1", "store"), 1, serve, {"wl.bytes": 2048, "wl.offset": 16384, "wl.sync": "psync"})
        assert int(store["startTimeUnixNano"]) >= int(forward["endTimeUnixNano"])
        # Each target's serve hangs under the send that reached it, across processes.
        for inst, node in (("db-1", db), ("cache-1", cache), ("slow-1", slow)):
            far = check(
                one(inst, "serve"),
                2,
                sends[node.addr],
                {"wl.status": "ok", "wl.request.bytes": 600, "wl.reply.bytes": 64, "wl.proto": "tcp"},
            )
            assert far["attrs"]["wl.peer"].startswith("127.0.0.1:") and "wl.skipped" not in far["attrs"]
        check(one("db-1", "compute"), 1, one("db-1", "serve"), {"wl.compute.us": 2000, "wl.compute.mode": "cpu"})
        check(one("db-1", "store"), 1, one("db-1", "serve"), {"wl.bytes": 4096, "wl.offset": 8192, "wl.sync": "sync"})
        load = check(one("cache-1", "load"), 1, one("cache-1", "serve"), {"wl.bytes": 1024, "wl.offset": 4096})
        assert "wl.sync" not in load["attrs"]
        late = check(
            one("slow-1", "compute"), 1, one("slow-1", "serve"), {"wl.compute.us": 300_000, "wl.compute.mode": "wall"}
        )
        assert duration_us(late) >= 300_000
        assert int(one("slow-1", "serve")["endTimeUnixNano"]) > int(sends[slow.addr]["endTimeUnixNano"])
    assert request_ids == {0, 1}


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


def test_run_directory_collects_spans_records_and_summary(binaries, start_node, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    node = start_node(env=run_env(tmp_path, "front", "front-1"))
    out_csv = tmp_path / "out.csv"
    code, out, err = finish(
        start_client(
            binaries,
            "--to",
            node.addr,
            "-C",
            "0",
            "-n",
            20,
            "--nt",
            2,
            "-r",
            500,
            "-o",
            out_csv,
            "--json",
            env=run_env(tmp_path, "shop", "client-1"),
        )
    )
    assert code == 0, err
    node.stop()
    assert sorted(p.name for p in run.iterdir()) == [
        "client-1.requests.csv",
        "client-1.spans.jsonl",
        "client-1.summary.json",
        "front-1.spans.jsonl",
    ]
    for path in run.iterdir():
        assert path.stat().st_mode & 0o777 == 0o644, path
    assert json.loads((run / "client-1.summary.json").read_text()) == {
        **json.loads(out),
        "instance": "client-1",
        "service": "shop",
        "run_id": RUN_ID,
    }
    rows = (run / "client-1.requests.csv").read_text().splitlines()
    assert rows[0] == "send_us,latency_us,status,thread,session"
    assert sorted(rows[1:]) == sorted(out_csv.read_text().splitlines()[1:])
    assert len(read_records(run / "client-1.requests.csv")) == 40
    assert len(wl_otlp.read_spans(run / "client-1.spans.jsonl")) == 40
    assert len(wl_otlp.read_spans(run / "front-1.spans.jsonl")) == 40 * 2  # serve + compute


def test_run_directory_refuses_names_symlinks_and_existing_files(binaries, start_node, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for prog in (binaries["node"], binaries["client"]):
        for bad in ("a/b", ".hidden", ""):
            env = {**sanitizer_env(), **run_env(tmp_path, "x", bad)}
            proc = subprocess.run(
                [str(prog), "-b", "127.0.0.1:0"] if prog == binaries["node"] else [str(prog)],
                capture_output=True,
                text=True,
                env=env,
                timeout=30,
            )
            assert proc.returncode == 2, (prog, bad, proc.stderr)
            assert len(proc.stderr.splitlines()) == 1 and "COLLAPSAR_INSTANCE" in proc.stderr, proc.stderr
    victim = tmp_path / "victim"
    (run / "evil.spans.jsonl").symlink_to(victim)
    (run / "twice.spans.jsonl").write_text("earlier\n")
    for name in ("evil", "twice"):
        proc = subprocess.run(
            [str(binaries["node"]), "-b", "127.0.0.1:0"],
            capture_output=True,
            text=True,
            env={**sanitizer_env(), **run_env(tmp_path, "x", name)},
            timeout=30,
        )
        assert proc.returncode == 1 and f"{run}/{name}.spans.jsonl" in proc.stderr, proc.stderr
    assert not victim.exists() and (run / "twice.spans.jsonl").read_text() == "earlier\n"
    # --trace wins over the run directory: nothing is created there.
    node = start_node("--trace", tmp_path / "own.jsonl", env=run_env(tmp_path, "x", "own"))
    node.stop()
    assert not (run / "own.spans.jsonl").exists() and (tmp_path / "own.jsonl").exists()


def start_raw_node(binaries, tmp_path, env):
    """A node outside the fixture, to be killed: (process, port)."""
    log = tmp_path / "raw-node.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(
            [str(binaries["node"]), "-b", "127.0.0.1:0", "-s", str(tmp_path / "raw.storage")],
            stdout=f,
            stderr=f,
            env={**sanitizer_env(), **env},
        )
    wait_for(lambda: LISTEN_RE.search(log.read_text()), "the node's port")
    return proc, int(LISTEN_RE.search(log.read_text())[3])


def test_run_directory_is_flushed_every_second_and_at_sigterm(binaries, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    node, port = start_raw_node(binaries, tmp_path, run_env(tmp_path, "front", "front-1"))
    try:
        client = start_client(
            binaries,
            "--to",
            f"127.0.0.1:{port}",
            "-C",
            "0",
            "-r",
            20,
            "-n",
            400,
            "--json",
            env=run_env(tmp_path, "shop", "client-1"),
        )
        csv = run / "client-1.requests.csv"
        # While both run: records and spans reach the files within about a second.
        wait_for(lambda: csv.exists() and len(csv.read_text().splitlines()) > 20, "records in the run directory")
        wait_for(lambda: len(wl_otlp.read_spans(run / "client-1.spans.jsonl")) > 20, "the client's spans")
        client.send_signal(signal.SIGTERM)
        code, out, err = finish(client, timeout=30)
        assert code == 0, err
        summary = json.loads((run / "client-1.summary.json").read_text())
        assert summary == {**json.loads(out), "instance": "client-1", "service": "shop", "run_id": RUN_ID}
        assert 20 < summary["requests"] < 400
        assert len(read_records(csv)) == summary["requests"]
        assert len(wl_otlp.read_spans(run / "client-1.spans.jsonl")) == summary["requests"]
        # A node that dies without a word has written what it served up to a second before.
        time.sleep(1.5)
        node.send_signal(signal.SIGKILL)
        node.wait(timeout=30)
        serves = [s for _, _, s in wl_otlp.read_spans(run / "front-1.spans.jsonl") if s["name"] == "serve"]
        assert len(serves) == summary["requests"]
    finally:
        if node.poll() is None:
            node.kill()
            node.wait()
        if os.path.exists(tmp_path / "raw.storage"):
            os.unlink(tmp_path / "raw.storage")


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
