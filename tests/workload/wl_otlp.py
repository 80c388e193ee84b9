"""Reading the span files of wl-node and wl-client, and checking every line
against the official OpenTelemetry protocol schema (the opentelemetry-proto
package's generated protobuf classes).

OTLP/JSON is protobuf's JSON mapping with one departure: trace and span ids
are lowercase hex, not base64. So a line is parsed twice: as written (every
field name and value type must be known to the schema:
ignore_unknown_fields=False), and with its ids turned into base64, after
which the parsed message must give back the ids' bytes, the times, and,
turned back into JSON, the whole line."""

import base64
import copy
import json

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

ID_FIELDS = {"traceId": 16, "spanId": 8, "parentSpanId": 8}


def _spans_of(doc):
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            yield from ss.get("spans", [])


def _ids(doc, convert):
    doc = copy.deepcopy(doc)
    for span in _spans_of(doc):
        for key in ID_FIELDS:
            if key in span:
                span[key] = convert(span[key])
    return doc


def _prune_defaults(value):
    """What protobuf's JSON printer leaves out: zero numbers (the status code), empty lists."""
    if isinstance(value, dict):
        return {k: _prune_defaults(v) for k, v in value.items() if v not in (0, [])}
    if isinstance(value, list):
        return [_prune_defaults(v) for v in value]
    return value


def check_line(line):
    """Validate one line; returns the parsed ExportTraceServiceRequest."""
    json_format.Parse(line, ExportTraceServiceRequest(), ignore_unknown_fields=False)
    doc = json.loads(line)
    as_b64 = _ids(doc, lambda h: base64.b64encode(bytes.fromhex(h)).decode())
    msg = json_format.Parse(json.dumps(as_b64), ExportTraceServiceRequest(), ignore_unknown_fields=False)
    parsed = [s for rs in msg.resource_spans for ss in rs.scope_spans for s in ss.spans]
    written = list(_spans_of(doc))
    assert len(parsed) == len(written) > 0
    for p, w in zip(parsed, written):
        assert p.trace_id == bytes.fromhex(w["traceId"]) and len(p.trace_id) == 16, w
        assert p.span_id == bytes.fromhex(w["spanId"]) and len(p.span_id) == 8, w
        assert p.parent_span_id == bytes.fromhex(w.get("parentSpanId", "")), w
        assert w["traceId"] == w["traceId"].lower() and w["spanId"] == w["spanId"].lower()
        assert p.start_time_unix_nano == int(w["startTimeUnixNano"]) > 1_600_000_000 * 10**9, w
        assert p.end_time_unix_nano == int(w["endTimeUnixNano"]) >= p.start_time_unix_nano, w
    back = json_format.MessageToDict(msg, use_integers_for_enums=True)
    assert _ids(back, lambda b: base64.b64decode(b).hex()) == _prune_defaults(doc)
    return msg


def attr_value(value):
    """An OTLP AnyValue as Python: intValue (a decimal string in JSON) as int, arrays as lists."""
    ((kind, v),) = value.items()
    if kind == "intValue":
        return int(v)
    if kind == "arrayValue":
        return [attr_value(x) for x in v.get("values", [])]
    return v


def attrs(obj):
    return {a["key"]: attr_value(a["value"]) for a in obj.get("attributes", [])}


def read_spans(path):
    """Every span of a file as (resource attributes, scope name, span with .attrs), each line checked."""
    out = []
    for line in open(path, encoding="utf-8"):
        check_line(line)
        for rs in json.loads(line)["resourceSpans"]:
            resource = attrs(rs["resource"])
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    span["attrs"] = attrs(span)
                    out.append((resource, ss["scope"]["name"], span))
    return out
