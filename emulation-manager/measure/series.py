"""Time series of a run, one row per second, in RUNDIR/series/*.csv.

CSV with a header row, comma-separated, numbers in plain units (bits per
second, microseconds, ratios), empty for "none" (an unlimited rate):
pandas (`pd.read_csv`) and DuckDB (`read_csv_auto`) read them as they are.
Rows are written once per second as the run goes (flushed: a run killed
midway keeps what it measured); events.csv is written at the end.

  flows.csv   t_s, src, dst, measured_bps, configured_bps, share_bps,
              congestion_loss, cut
              one row per (src, dst) pair that sent in the second before
              t_s: its rate over that second at the sender's egress (wire
              bits), the path's rate in force, the rate its class allowed
              (the path's, or the share the sharing loop narrowed it to),
              the loss the sharing loop charged it for an oversubscribed
              link, and 1 if the path was cut
  links.csv   t_s, link, a, b, direction, capacity_bps, load_bps, utilisation
              one row per link and direction that carried a flow in the
              second before t_s: the link as written (its index in
              /topology, its ends, "up" for a -> b), its rate in the middle
              of that second, and the load of its busiest instance-level
              link from the measured rates (status/topoview.py), with or
              without sharing
  events.csv  index, scheduled_s, applied_s, lateness_us, label, error, adhoc
              one row per timeline step applied
  rtt.csv     t_s, src, dst, sent, received, rtt_min_ms, rtt_median_ms,
              rtt_max_ms, configured_rtt_ms
              with --probe-every (measure/liveprobe.py): per probed pair and
              second, its echoes and their RTT, next to the RTT its paths
              both ways configured then; written at the end
  workload.csv  t_s, client, sent, ok, err, timeout, p50_ms, p99_ms
              per wl-client and second, the requests it sent in the second
              before t_s (from its requests.csv, whose send times count from
              the client's own start, placed at the time the run started its
              command: a few ms early at most) and the latency of those that
              succeeded; written at the end
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Iterable, Mapping
from typing import IO

from collapsar.manager.play.scheduler import percentile

SERIES_DIR = "series"
FLOW_COLUMNS = ("t_s", "src", "dst", "measured_bps", "configured_bps", "share_bps", "congestion_loss", "cut")
LINK_COLUMNS = ("t_s", "link", "a", "b", "direction", "capacity_bps", "load_bps", "utilisation")
EVENT_COLUMNS = ("index", "scheduled_s", "applied_s", "lateness_us", "label", "error", "adhoc")
RTT_COLUMNS = (
    "t_s",
    "src",
    "dst",
    "sent",
    "received",
    "rtt_min_ms",
    "rtt_median_ms",
    "rtt_max_ms",
    "configured_rtt_ms",
)
WORKLOAD_COLUMNS = ("t_s", "client", "sent", "ok", "err", "timeout", "p50_ms", "p99_ms")
STATUSES = {"OK": "ok", "ERR": "err", "TIMEOUT": "timeout"}  # wl-client's statuses -> columns
EVERY_US = 1_000_000


def _cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < 1e15 else f"{value:.6g}"
    return value


class SeriesWriter:
    """Writes the series of one run into `series/` of its run directory
    (`dir_fd`: the run directory, opened by RunDir; the files are new, never
    written through a symlink or over anything)."""

    def __init__(self, dir_fd: int):
        os.mkdir(SERIES_DIR, 0o700, dir_fd=dir_fd)
        self._dir_fd = os.open(SERIES_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        self._files: list[IO[str]] = []
        self._flows = self._table("flows.csv", FLOW_COLUMNS)
        self._links = self._table("links.csv", LINK_COLUMNS)
        self.next_us = EVERY_US  # the first row: one second after t=0

    def _open(self, name: str) -> IO[str]:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        handle = os.fdopen(os.open(name, flags, 0o600, dir_fd=self._dir_fd), "w", newline="")
        self._files.append(handle)
        return handle

    def _table(self, name: str, columns: tuple[str, ...]):
        writer = csv.writer(self._open(name))
        writer.writerow(columns)
        return writer

    def due(self, now_us: int) -> bool:
        return now_us >= self.next_us

    def second(
        self,
        now_us: int,
        rates: Mapping[tuple[str, str], int],
        configured: Callable[[str, str], tuple[int | None, bool]],
        allowed: Callable[[str, str], int | None],
        sharing: Mapping | None,
        links: Iterable[Mapping] = (),
    ) -> None:
        """One second's rows: `rates` (src, dst) -> bits per second over the
        last second (the meter's window), `configured` and `allowed` as the
        meter follows them, `sharing` the sharing loop's status (None: off),
        `links` the live view's links (status/topoview.py LiveView)."""
        t_s = round(now_us / 1e6, 3)
        loss = {(f["src"], f["dst"]): f["congestion_loss_ratio"] for f in (sharing or {}).get("flows", ())}
        for (src, dst), rate in sorted(rates.items()):
            if rate <= 0:
                continue
            path_bps, cut = configured(src, dst)
            row = (t_s, src, dst, rate, path_bps, None if cut else allowed(src, dst), loss.get((src, dst), 0.0), cut)
            self._flows.writerow([_cell(v) for v in row])
        for link in links:
            for direction in ("up", "down"):
                side = link.get(direction)
                if not side or not side["load_bps"]:
                    continue
                cells: list[object] = [t_s, link["id"], link["a"], link["b"], direction]
                cells += [side["rate_bps"], side["load_bps"], side["utilisation"]]
                self._links.writerow([_cell(v) for v in cells])
        for handle in self._files:
            handle.flush()
        self.next_us = (now_us // EVERY_US + 1) * EVERY_US

    def events(self, log: Iterable[Mapping]) -> None:
        """events.csv from the event log (Fired.as_dict rows)."""
        writer = self._table("events.csv", EVENT_COLUMNS)
        for e in log:
            row = (
                e["index"],
                e["scheduled_us"] / 1e6,
                e["applied_us"] / 1e6,
                e["lateness_us"],
                e["label"],
                e["error"],
                e.get("adhoc", False),
            )
            writer.writerow([_cell(v) for v in row])

    def rtt(self, rows: Iterable[tuple]) -> None:
        """rtt.csv: LiveProbe.rows(), in RTT_COLUMNS order."""
        writer = self._table("rtt.csv", RTT_COLUMNS)
        for row in rows:
            writer.writerow([_cell(v) for v in row])

    def workload(self, clients: Mapping[str, tuple[int, Iterable[Mapping[str, str]]]]) -> None:
        """workload.csv: `clients` instance -> (when its command started, us
        from t=0; its requests.csv rows).  Rows that do not parse are skipped."""
        writer = self._table("workload.csv", WORKLOAD_COLUMNS)
        for client, (start_us, records) in sorted(clients.items()):
            seconds: dict[int, tuple[dict[str, int], list[float]]] = {}
            for record in records:
                try:
                    send_us, latency_us = float(record["send_us"]), float(record["latency_us"])
                    column = STATUSES[record["status"]]
                except (KeyError, TypeError, ValueError):
                    continue
                second = int((start_us + send_us) // EVERY_US) + 1  # the second ending at t_s
                counts, latencies = seconds.setdefault(second, ({"ok": 0, "err": 0, "timeout": 0}, []))
                counts[column] += 1
                if column == "ok":
                    latencies.append(latency_us / 1000)
            for second, (counts, latencies) in sorted(seconds.items()):
                p50, p99 = (percentile(latencies, 0.5), percentile(latencies, 0.99)) if latencies else (None, None)
                row = (second, client, sum(counts.values()), counts["ok"], counts["err"], counts["timeout"], p50, p99)
                writer.writerow([_cell(v) for v in row])

    def close(self) -> None:
        for handle in self._files:
            handle.close()
        self._files.clear()
        os.close(self._dir_fd)
