"""The workload while the run goes: each wl-client's requests.csv read as it
grows, for the status snapshot's `workload` and /metrics.

wl-client appends a request's record (send_us, latency_us, status, ...) to
RUNDIR/workload/INSTANCE.requests.csv once it is resolved, flushed every
second (workload-node/src/collect.c).  Once a second the run reads what is
new: per client, requests by status and a histogram of the latency of those
that succeeded (LATENCY_BUCKETS_S, Prometheus style: cumulative counts,
their sum and count), from which a dashboard takes p50 and p99 over any
window (histogram_quantile).

The files are the instances' own: each is opened through the trace
directory's descriptor without following a symlink, must be a regular
file, and is read at most READ_BYTES a second and MAX_BYTES in all; a line
that is not a record is skipped.
"""

from __future__ import annotations

import bisect
import errno
import os

from collapsar.manager.measure.series import STATUSES
from collapsar.manager.measure.workload import MAX_REQUESTS_BYTES
from collapsar.runfiles import open_regular

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
READ_BYTES = 4 << 20  # per client and second: about 60,000 records
MAX_BYTES = MAX_REQUESTS_BYTES
SUFFIX = ".requests.csv"


class _Client:
    def __init__(self, fd: int):
        self.fd = fd
        self.read = 0
        self.rest = b""  # a line not yet whole
        self.requests = dict.fromkeys(STATUSES.values(), 0)
        self.buckets = [0] * len(LATENCY_BUCKETS_S)  # per bucket, not yet cumulative
        self.latency_sum_s = 0.0
        self.ok = 0

    def take(self, line: bytes) -> None:
        fields = line.split(b",")
        if len(fields) < 3:
            return
        status = STATUSES.get(fields[2].decode("ascii", "replace"))
        if status is None:
            return  # the header, or not a record
        self.requests[status] += 1
        if status != "ok":
            return
        try:
            latency_s = float(fields[1]) / 1e6
        except ValueError:
            return
        self.ok += 1
        self.latency_sum_s += latency_s
        at = bisect.bisect_left(LATENCY_BUCKETS_S, latency_s)
        if at < len(self.buckets):
            self.buckets[at] += 1


class WorkloadTail:
    """Every client's records so far; `poll()` once a second, `figures()` any time."""

    def __init__(self, trace_dir_fd: int, instances: list[str]):
        """`trace_dir_fd`: the trace directory's descriptor, closed by `close`."""
        self.dir_fd = trace_dir_fd
        self.instances = set(instances)
        self.clients: dict[str, _Client] = {}
        self.refused: dict[str, str] = {}  # instance -> why its file is not read
        self._figures: list[dict] = []

    def poll(self) -> None:
        try:
            names = os.listdir(self.dir_fd)
        except OSError:
            return
        for name in names:
            instance = name[: -len(SUFFIX)] if name.endswith(SUFFIX) else None
            if instance in self.instances and instance not in self.clients and instance not in self.refused:
                self._open(instance, name)
        for client in self.clients.values():
            self._read(client)
        self._figures = [self._summary(name, c) for name, c in sorted(self.clients.items())]

    def _open(self, instance: str, name: str) -> None:
        try:
            fd = open_regular(name, self.dir_fd)
        except OSError as error:
            self.refused[instance] = "a symlink" if error.errno == errno.ELOOP else str(error.strerror)
            return
        self.clients[instance] = _Client(fd)

    def _read(self, client: _Client) -> None:
        if client.read >= MAX_BYTES:
            return
        data = os.pread(client.fd, min(READ_BYTES, MAX_BYTES - client.read), client.read)
        client.read += len(data)
        *lines, client.rest = (client.rest + data).split(b"\n")
        for line in lines:
            client.take(line)

    @staticmethod
    def _summary(name: str, client: _Client) -> dict:
        cumulative, running = [], 0
        for count in client.buckets:
            running += count
            cumulative.append(running)
        return {
            "client": name,
            "requests": dict(client.requests),
            "latency_buckets_s": list(LATENCY_BUCKETS_S),
            "latency_cumulative": cumulative,
            "latency_count": client.ok,
            "latency_sum_s": round(client.latency_sum_s, 6),
        }

    def figures(self) -> list[dict]:
        """Per client as of the last poll: requests by status and the OK
        requests' latency histogram (cumulative counts per bucket bound)."""
        return self._figures

    def close(self) -> None:
        for client in self.clients.values():
            os.close(client.fd)
        self.clients.clear()
        os.close(self.dir_fd)
