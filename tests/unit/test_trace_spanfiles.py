"""The hand-made spans the trace tests stand on (tests/span_files.py) are
what wl-node and wl-client write: every line an OTLP/JSON
ExportTraceServiceRequest that the official protobuf schema accepts with no
unknown field (ids turned from the tools' hex into protobuf's base64), and
per span name the attributes of the workload tools' schema."""

import base64
import json

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from span_files import RunFiles, chain

ATTRIBUTES = {
    "request": {
        "wl.target",
        "wl.request_id",
        "wl.attempt",
        "wl.status",
        "wl.request.bytes",
        "wl.reply.bytes",
        "wl.proto",
        "wl.send_lateness_us",
        "wl.thread",
        "wl.session",
        "wl.reply.wait_us",
    },
    "serve": {"wl.status", "wl.request.bytes", "wl.reply.bytes", "wl.queue_us", "wl.socket_us", "wl.peer", "wl.proto"},
    "compute": {"wl.compute.us", "wl.compute.ns", "wl.compute.mode", "wl.status"},
    "load": {"wl.bytes", "wl.offset", "wl.status"},
    "store": {"wl.bytes", "wl.offset", "wl.sync", "wl.status"},
    "forward": {
        "wl.forward.targets",
        "wl.forward.nack",
        "wl.forward.timeout_us",
        "wl.forward.retries",
        "wl.forward.ok",
        "wl.forward.failed",
        "wl.status",
    },
    "forward.send": {"wl.target", "wl.attempt", "wl.status", "net.peer.name", "net.peer.port", "wl.reply.wait_us"},
}


def test_hand_made_spans_follow_the_schema(tmp_path):
    files = RunFiles(tmp_path, batch=3)
    chain(files, 1.0, queue1_us=20)
    request = files.request("client", 50, 30)
    serve = files.serve("front", request, 55, 20)
    files.storage("front", serve, "load", 56, 2)
    files.storage("front", serve, "store", 58, 2)
    files.close()
    names = set()
    for path in sorted((tmp_path / "workload").iterdir()):
        for line in path.read_text().splitlines():
            doc = json.loads(line)
            (resource,) = doc["resourceSpans"]
            keys = [a["key"] for a in resource["resource"]["attributes"]]
            assert keys == ["service.name", "service.instance.id", "collapsar.run_id", "process.pid"]
            (scope,) = resource["scopeSpans"]
            assert scope["scope"] == {"name": "collapsar-workload"}
            for span in scope["spans"]:
                names.add(span["name"])
                assert {a["key"] for a in span["attributes"]} == ATTRIBUTES[span["name"]], span["name"]
                assert ("parentSpanId" in span) == (span["name"] != "request")
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        assert span[key] == span[key].lower() and len(span[key]) == (32 if key == "traceId" else 16)
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
            json_format.Parse(json.dumps(doc), ExportTraceServiceRequest(), ignore_unknown_fields=False)
    assert names == set(ATTRIBUTES)
