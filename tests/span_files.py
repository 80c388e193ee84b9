"""Run directories with hand-made spans, for tests/unit/test_trace_*.py and
bench/trace_bench.py.

`RunFiles` writes what `collapsar trace` reads, in exactly the schema the
workload tools write: RUNDIR/workload/INSTANCE.spans.jsonl with one OTLP/JSON
ExportTraceServiceRequest per line (resource attributes service.name,
service.instance.id, collapsar.run_id, process.pid; scope
"collapsar-workload"; ids in lowercase hex, times as decimal strings, root
spans without parentSpanId, status code 1 ok / 2 error / 0 abandoned), `batch`
spans to a line as a node flushes them; plus t0, experiment.yaml and
events.json.  Times are given in ms from t=0 and written as CLOCK_REALTIME ns.

`chain()` makes one client -> front -> db request with every span of it, the
shape the VM test runs for real.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

T0_NS = 1_700_000_000_123_456_000
STATUS_CODE = {"ok": 1, "error": 2, "timeout": 2, "abandoned": 0}
KIND = {"request": 3, "serve": 2, "compute": 1, "load": 1, "store": 1, "forward": 1, "forward.send": 3}


@dataclass(frozen=True)
class Ctx:
    trace: str
    span: str


def ns(ms: float) -> int:
    return T0_NS + round(ms * 1_000_000)


def _attr(key: str, value) -> dict:
    if isinstance(value, (list, tuple)):
        return {"key": key, "value": {"arrayValue": {"values": [{"stringValue": v} for v in value]}}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


class RunFiles:
    def __init__(self, run_dir: Path, batch: int = 8, run_id: str = "a1b2c3"):
        self.dir = Path(run_dir)
        (self.dir / "workload").mkdir(parents=True, exist_ok=True)
        self.batch = batch
        self.run_id = run_id
        self.services: dict[str, str] = {}
        self._pending: dict[str, list[dict]] = {}
        self._files: dict[str, object] = {}
        self._ids = 0

    def _id(self, hex_digits: int) -> str:
        # Counters, spread over the id's width: tests see structured ids too.
        self._ids += 1
        return f"{self._ids * 0x9E3779B97F4A7C15 % (1 << (4 * hex_digits)):0{hex_digits}x}"

    def span(
        self,
        instance: str,
        trace: str,
        parent: str | None,
        name: str,
        start_ms: float,
        dur_ms: float,
        status: str = "ok",
        **attrs,
    ) -> Ctx:
        """One span; keyword attributes name their dots `__` (wl__queue_us: wl.queue_us)."""
        span_id = self._id(16)
        body = {"traceId": trace, "spanId": span_id}
        if parent:
            body["parentSpanId"] = parent
        body.update(
            {
                "name": name,
                "kind": KIND[name],
                "startTimeUnixNano": str(ns(start_ms)),
                "endTimeUnixNano": str(ns(start_ms + dur_ms)),
                "attributes": [_attr(k.replace("__", "."), v) for k, v in attrs.items()] + [_attr("wl.status", status)],
                "status": {"code": STATUS_CODE[status]},
            }
        )
        pending = self._pending.setdefault(instance, [])
        pending.append(body)
        if len(pending) >= self.batch:
            self._flush(instance)
        return Ctx(trace, span_id)

    def _flush(self, instance: str) -> None:
        spans = self._pending.get(instance)
        if not spans:
            return
        if instance not in self._files:
            self._files[instance] = open(self.dir / "workload" / f"{instance}.spans.jsonl", "w")
        resource = {
            "attributes": [
                _attr("service.name", self.services.get(instance, instance)),
                _attr("service.instance.id", instance),
                _attr("collapsar.run_id", self.run_id),
                _attr("process.pid", 4242),
            ]
        }
        line = {
            "resourceSpans": [
                {"resource": resource, "scopeSpans": [{"scope": {"name": "collapsar-workload"}, "spans": spans}]}
            ]
        }
        self._files[instance].write(json.dumps(line, separators=(",", ":")) + "\n")
        self._pending[instance] = []

    # ---- the spans of the schema, by name ------------------------------------------

    def request(
        self,
        client: str,
        start_ms: float,
        dur_ms: float,
        status: str = "ok",
        target: str = "front:7891",
        reply_wait_us: int | None = None,
    ) -> Ctx:
        """`reply_wait_us`: wl.reply.wait_us, written (0 by default) when a reply came."""
        replied = status != "timeout"
        waited = {"wl__reply__wait_us": reply_wait_us or 0} if replied else {}
        return self.span(
            client,
            self._id(32),
            None,
            "request",
            start_ms,
            dur_ms,
            status,
            wl__target=target,
            wl__request_id=self._ids,
            wl__attempt=0,
            wl__request__bytes=62,
            wl__reply__bytes=48 if replied else 0,
            wl__proto="tcp",
            wl__send_lateness_us=3,
            wl__thread=0,
            wl__session=0,
            **waited,
        )

    def serve(
        self,
        instance: str,
        parent: Ctx,
        start_ms: float,
        dur_ms: float,
        queue_us: int = 0,
        status: str = "ok",
        socket_us: int = 0,
    ) -> Ctx:
        return self.span(
            instance,
            parent.trace,
            parent.span,
            "serve",
            start_ms,
            dur_ms,
            status,
            wl__request__bytes=62,
            wl__reply__bytes=48,
            wl__queue_us=queue_us,
            wl__socket_us=socket_us,
            wl__peer="10.200.0.2:40000",
            wl__proto="tcp",
        )

    def compute(self, instance: str, serve: Ctx, start_ms: float, dur_ms: float, asked_us: int) -> Ctx:
        return self.span(
            instance,
            serve.trace,
            serve.span,
            "compute",
            start_ms,
            dur_ms,
            wl__compute__us=asked_us,
            wl__compute__ns=asked_us * 1000,
            wl__compute__mode="wall",
        )

    def storage(self, instance: str, serve: Ctx, name: str, start_ms: float, dur_ms: float) -> Ctx:
        extra = {"wl__sync": "sync"} if name == "store" else {}
        return self.span(
            instance, serve.trace, serve.span, name, start_ms, dur_ms, wl__bytes=4096, wl__offset=0, **extra
        )

    def forward(
        self,
        instance: str,
        serve: Ctx,
        start_ms: float,
        dur_ms: float,
        targets: list[str],
        nack: int,
        status: str = "ok",
        retries: int = 0,
    ) -> Ctx:
        return self.span(
            instance,
            serve.trace,
            serve.span,
            "forward",
            start_ms,
            dur_ms,
            status,
            wl__forward__targets=targets,
            wl__forward__nack=nack,
            wl__forward__timeout_us=5_000_000,
            wl__forward__retries=retries,
            wl__forward__ok=nack if status == "ok" else 0,
            wl__forward__failed=0,
        )

    def send(
        self,
        instance: str,
        forward: Ctx,
        start_ms: float,
        dur_ms: float,
        target: str,
        attempt: int = 0,
        status: str = "ok",
        reply_wait_us: int | None = None,
    ) -> Ctx:
        """`reply_wait_us`: wl.reply.wait_us, written (0 by default) when the reply settled it (ok)."""
        waited = {"wl__reply__wait_us": reply_wait_us or 0} if status == "ok" or reply_wait_us is not None else {}
        return self.span(
            instance,
            forward.trace,
            forward.span,
            "forward.send",
            start_ms,
            dur_ms,
            status,
            wl__target=f"{target}:7891",
            wl__attempt=attempt,
            net__peer__name=target,
            net__peer__port=7891,
            **waited,
        )

    # ---- the rest of the run directory ----------------------------------------------

    def close(self, experiment: str | None = None, events: list[dict] | None = None, t0: bool = True) -> Path:
        for instance in list(self._pending):
            self._flush(instance)
        for handle in self._files.values():
            handle.close()
        if t0:
            (self.dir / "t0").write_text(f"{T0_NS // 1000 / 1e6:.6f}\n")
        if experiment is not None:
            (self.dir / "experiment.yaml").write_text(experiment)
        if events is not None:
            (self.dir / "events.json").write_text(json.dumps(events))
        return self.dir


def chain(
    files: RunFiles,
    at_ms: float,
    rtt1_ms: float = 20.0,
    rtt2_ms: float = 10.0,
    compute1_ms: float = 2.0,
    compute2_ms: float = 1.0,
    queue1_us: int = 0,
    local_ms: float = 0.1,
    client: str = "client",
    front: str = "front",
    db: str = "db",
    reply1_us: int = 0,
    reply2_us: int = 0,
) -> float:
    """client -> front (compute, forward) -> db (compute): every span of one
    request; `rtt*_ms` is each hop's sender's span minus the receiver's serve,
    of which `reply*_us` the reply waited for the sender to read it
    (wl.reply.wait_us of the request and the forward.send), `local_ms` the
    node's own time before and after each forward and serve.  Returns the
    request's duration in ms."""
    serve2_ms = compute2_ms + local_ms
    send_ms = rtt2_ms + serve2_ms
    forward_ms = send_ms + 2 * local_ms
    serve1_ms = queue1_us / 1000 + compute1_ms + forward_ms + local_ms
    total_ms = rtt1_ms + serve1_ms
    request = files.request(client, at_ms, total_ms, reply_wait_us=reply1_us)
    s1_start = at_ms + rtt1_ms / 2
    s1 = files.serve(front, request, s1_start, serve1_ms, queue_us=queue1_us)
    c1_start = s1_start + queue1_us / 1000
    files.compute(front, s1, c1_start, compute1_ms, round(compute1_ms * 1000))
    f_start = c1_start + compute1_ms
    fwd = files.forward(front, s1, f_start, forward_ms, [f"{db}:7891"], 1)
    send = files.send(front, fwd, f_start + local_ms, send_ms, db, reply_wait_us=reply2_us)
    s2_start = f_start + local_ms + rtt2_ms / 2
    s2 = files.serve(db, send, s2_start, serve2_ms)
    files.compute(db, s2, s2_start, compute2_ms, round(compute2_ms * 1000))
    return total_ms
