"""The spans of wl-node and wl-client across processes (workload-node/README.md,
"Tracing"): one request from a client through a node that computes, forwards
to three others with a quorum of two and stores, checked against the fixed
schema that `collapsar trace` reads: names, kinds, parents across processes,
attributes, statuses, times and the resource of each process, every line
against the official OTLP protobuf schema (wl_otlp.py)."""

import json

import wl_otlp
from trace_schema_support import RUN_ID, finish, run_env, start_client, wait_for


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
