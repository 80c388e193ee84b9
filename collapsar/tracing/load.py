"""Reading a run directory: its spans into compact columns, and what else
`collapsar trace` needs from it.

  RUNDIR/workload/INSTANCE.spans.jsonl  every traced wl-node and wl-client: one
                                       OTLP/JSON ExportTraceServiceRequest a line
  RUNDIR/t0                            unix seconds of the run's t=0
  RUNDIR/events.json                   the timeline steps as applied (times from t0)
  RUNDIR/experiment.yaml               the topology as it was run

Only spans are required; without t0 or the experiment no configured RTT can
be shown, and a note says so.

Memory stays small for a million spans: a line is parsed on its own (never
a whole file), its spans become one row each of fixed-width columns
(array.array, about 60 bytes a span whatever its JSON size), and the line's
objects are dropped.  Spans link by hash((trace id, span id)), computed in
this process only: a child's parent key is the hash of its trace id and
parent span id, so links never cross traces, and no id is stored as text.
"""

from __future__ import annotations

import errno
import json
import os
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import numpy as np

from collapsar.runfiles import RunDirError, open_regular

# Span names of the workload tools, by code (the order is the code).
NAMES = ("request", "serve", "compute", "load", "store", "forward", "forward.send")
REQUEST, SERVE, COMPUTE, LOAD, STORE, FORWARD, SEND = range(len(NAMES))
STATUSES = ("ok", "error", "timeout", "abandoned", "unknown")
OK, ERROR, TIMEOUT, ABANDONED, UNKNOWN = range(len(STATUSES))
# The one number and the one text kept per span, by name: enough for the
# critical path (quorum size), the waits (a serve's queueing, a hop's reply
# waiting for its sender to read it) and the expectation (configured compute).
_NUMBER_KEY = {
    REQUEST: "wl.reply.wait_us",
    SERVE: "wl.queue_us",
    COMPUTE: "wl.compute.us",
    FORWARD: "wl.forward.nack",
    SEND: "wl.reply.wait_us",
}
_TEXT_KEY = {REQUEST: "wl.target", SEND: "net.peer.name"}
_NAME_CODE = {name: code for code, name in enumerate(NAMES)}
_STATUS_CODE = {name: code for code, name in enumerate(STATUSES)}
_OTLP_STATUS = {1: OK, 2: ERROR}  # status.code when wl.status is missing
SPANS_DIR = "workload"
SPANS_SUFFIX = ".spans.jsonl"
PROGRESS_EVERY = 4096  # lines


@dataclass
class SpanTable:
    """One row per span (numpy columns); `instances` and `texts` decode codes."""

    key: np.ndarray  # int64 hash((trace id, span id))
    parent: np.ndarray  # int64 hash((trace id, parent span id)); meaningless where not rooted
    rooted: np.ndarray  # bool: has a parent span id
    name: np.ndarray  # int8 code in NAMES
    inst: np.ndarray  # int32 code in `instances` (the span's resource)
    start: np.ndarray  # int64 ns, CLOCK_REALTIME of the process that wrote it
    end: np.ndarray  # int64 ns
    status: np.ndarray  # int8 code in STATUSES
    number: np.ndarray  # int64 the name's number attribute (_NUMBER_KEY), -1 if absent
    text: np.ndarray  # int32 code in `texts` of the name's text attribute, 0 ("") if absent
    instances: list[str]
    services: list[str]  # service.name per instance code
    texts: list[str]

    def __len__(self) -> int:
        return int(self.key.size)


class _Columns:
    """Growing columns while files are read."""

    def __init__(self) -> None:
        self.cols = {
            "key": array("q"),
            "parent": array("q"),
            "rooted": array("b"),
            "name": array("b"),
            "inst": array("i"),
            "start": array("q"),
            "end": array("q"),
            "status": array("b"),
            "number": array("q"),
            "text": array("i"),
        }
        self.instances: dict[str, int] = {}
        self.services: list[str] = []
        self.texts: dict[str, int] = {"": 0}
        self.other_names = 0

    def instance(self, name: str, service: str) -> int:
        code = self.instances.setdefault(name, len(self.instances))
        if code == len(self.services):
            self.services.append(service)
        return code

    def add_line(self, request: object, file_instance: str) -> None:
        c = self.cols
        key, parent, rooted, name_col = c["key"].append, c["parent"].append, c["rooted"].append, c["name"].append
        inst_col, start, end, status_col = c["inst"].append, c["start"].append, c["end"].append, c["status"].append
        number_col, text_col = c["number"].append, c["text"].append
        texts = self.texts
        for resource_spans in request["resourceSpans"]:  # type: ignore[index]
            inst = self.instance(*_resource(resource_spans.get("resource"), file_instance))
            for scope_spans in resource_spans.get("scopeSpans", ()):
                for span in scope_spans.get("spans", ()):
                    code = _NAME_CODE.get(span["name"])
                    if code is None:
                        self.other_names += 1
                        continue
                    trace = span["traceId"]
                    parent_id = span.get("parentSpanId")
                    status = number = None
                    text = ""
                    number_key, text_key = _NUMBER_KEY.get(code), _TEXT_KEY.get(code)
                    for attr in span.get("attributes", ()):
                        attr_key = attr["key"]
                        if attr_key == "wl.status":
                            status = _STATUS_CODE.get(attr["value"]["stringValue"], UNKNOWN)
                        elif attr_key == number_key:
                            number = int(attr["value"]["intValue"])
                        elif attr_key == text_key:
                            text = attr["value"]["stringValue"]
                    if status is None:
                        status = _OTLP_STATUS.get(span.get("status", {}).get("code"), UNKNOWN)
                    key(hash((trace, span["spanId"])))
                    parent(hash((trace, parent_id)) if parent_id else 0)
                    rooted(1 if parent_id else 0)
                    name_col(code)
                    inst_col(inst)
                    start(int(span["startTimeUnixNano"]))
                    end(int(span["endTimeUnixNano"]))
                    status_col(status)
                    number_col(-1 if number is None else number)
                    text_col(texts.setdefault(text, len(texts)))

    def table(self) -> SpanTable:
        c = self.cols
        dtype = {"rooted": np.bool_, "name": np.int8, "status": np.int8, "inst": np.int32, "text": np.int32}
        arrays = {
            k: np.frombuffer(v, dtype=dtype.get(k, np.int64)) if len(v) else np.zeros(0, dtype.get(k, np.int64))
            for k, v in c.items()
        }
        return SpanTable(**arrays, instances=list(self.instances), services=self.services, texts=list(self.texts))


def _resource(resource: dict[str, Any] | None, file_instance: str) -> tuple[str, str]:
    """(service.instance.id, service.name); the file's name when unnamed."""
    instance = service = None
    for attr in (resource or {}).get("attributes", ()):
        if attr["key"] == "service.instance.id":
            instance = attr["value"]["stringValue"]
        elif attr["key"] == "service.name":
            service = attr["value"]["stringValue"]
    return instance or file_instance, service or instance or file_instance


def span_files(run_dir: Path) -> list[Path]:
    """RUNDIR/workload/*.spans.jsonl, or the span files of a trace directory
    itself (Compose's EXPERIMENT.workload, files gathered from Swarm nodes),
    or one line saying what is wrong."""
    if not run_dir.is_dir():
        what = "does not exist" if not run_dir.exists() else "is not a directory"
        raise RunDirError(f"{run_dir}: {what}; expected a run directory (collapsar run prints it)")
    folder = run_dir / SPANS_DIR
    if folder.is_symlink():
        raise RunDirError(f"{folder}: a symlink; expected the folder the run's instances wrote their spans in")
    files = sorted(folder.glob("*" + SPANS_SUFFIX)) if folder.is_dir() else []
    if not files:
        files = sorted(path for path in run_dir.glob("*" + SPANS_SUFFIX) if path.is_file())
    if not files:
        raise RunDirError(
            f"{run_dir}: no spans ({SPANS_DIR}/*{SPANS_SUFFIX} or *{SPANS_SUFFIX}); expected the "
            f"run directory of a run whose wl-node and wl-client instances traced, or their "
            f"trace directory"
        )
    return files


def read_spans(files: list[Path], progress: Callable[[int, int], None] | None = None) -> tuple[SpanTable, list[str]]:
    """Every span of `files`, and notes on what was skipped."""
    columns = _Columns()
    total = sum(path.lstat().st_size for path in files)
    done = torn = 0
    for path in files:
        file_instance = path.name[: -len(SPANS_SUFFIX)]
        with open(_regular(path), "rb") as handle:
            for number, line in enumerate(handle, start=1):
                if number % PROGRESS_EVERY == 0 and progress is not None:
                    progress(done + handle.tell(), total)
                if not line.strip():
                    continue
                try:
                    request = json.loads(line)
                except ValueError as error:
                    if not line.endswith(b"\n"):  # cut short by a killed writer: only the last line can be
                        torn += 1
                        continue
                    raise RunDirError(
                        f"{path}:{number}: not JSON ({error}); expected one OTLP/JSON "
                        f"ExportTraceServiceRequest per line"
                    ) from None
                try:
                    columns.add_line(request, file_instance)
                except (KeyError, TypeError, ValueError, AttributeError) as error:
                    what = f"missing {error}" if isinstance(error, KeyError) else str(error)
                    raise RunDirError(
                        f"{path}:{number}: {what}; expected an OTLP/JSON "
                        f"ExportTraceServiceRequest of the workload tools' spans"
                    ) from None
        done += path.lstat().st_size
    notes = []
    if torn:
        notes.append(f"{torn} span file(s) end in a line cut short (a writer was killed): skipped")
    if columns.other_names:
        notes.append(f"{columns.other_names} spans of other names ignored")
    return columns.table(), notes


def _regular(path: Path) -> int:
    """A span or run file, opened without following a symlink an instance
    may have planted in its place."""
    try:
        return open_regular(path)
    except OSError as error:
        what = "a symlink" if error.errno == errno.ELOOP else error.strerror
        raise RunDirError(f"{path}: {what}; expected a regular file the run wrote") from None


def read_t0_ns(run_dir: Path) -> int | None:
    """RUNDIR/t0 in ns, None when the run never reached t=0."""
    path = run_dir / "t0"
    if not path.is_file() and not path.is_symlink():
        return None
    try:
        with open(_regular(path), "rb") as handle:
            return int(Decimal(handle.read(64).decode("ascii", "replace").strip()) * 1_000_000_000)
    except InvalidOperation:
        raise RunDirError(f"{path}: expected the unix time of t=0 in seconds, like 1700000000.123456") from None


def read_events(run_dir: Path) -> list[dict] | None:
    """RUNDIR/events.json (the applied steps), None when absent."""
    path = run_dir / "events.json"
    if not path.is_file() and not path.is_symlink():
        return None
    try:
        with open(_regular(path), "rb") as handle:
            events = json.loads(handle.read())
    except ValueError as error:
        raise RunDirError(f"{path}: not JSON ({error}); expected the run's event log") from None
    if not isinstance(events, list) or not all(isinstance(e, dict) and "scheduled_us" in e for e in events):
        raise RunDirError(f"{path}: expected a list of events with scheduled_us (the run's event log)")
    return events


@dataclass
class RunInputs:
    run_dir: Path
    spans: SpanTable
    t0_ns: int | None
    events: list[dict] | None
    experiment: Path | None
    notes: list[str] = field(default_factory=list)


def read_run(run_dir: str | os.PathLike, progress: Callable[[int, int], None] | None = None) -> RunInputs:
    path = Path(run_dir)
    spans, notes = read_spans(span_files(path), progress)
    experiment = path / "experiment.yaml"
    return RunInputs(
        path,
        spans,
        read_t0_ns(path),
        read_events(path),
        experiment if experiment.is_file() and not experiment.is_symlink() else None,
        notes,
    )
