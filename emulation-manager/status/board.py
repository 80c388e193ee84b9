"""What the status API serves, as the manager's loop publishes it.

`StatusBoard` holds the latest snapshot; the loop publishes one per period
and never waits for a reader.  Its JSON is made once per snapshot, by the
first reader that wants it, and /status and every server-sent-event
stream send those same bytes: fifty streams cost one encoding a period,
not fifty.  /paths is built only on request (it is O(instances^2)), from a
copy the run takes under its paths lock, which the timeline's step
preparation also holds: the copy is all the lock covers, and with a
version from the run it is made once per change of the paths.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from collapsar.model import Path as NetPath

STREAM_PREFIX = b"event: status\ndata: "


@dataclass(frozen=True)
class Encoded:
    """One published snapshot as bytes, shared by every reader of its version."""

    version: int
    body: bytes  # the JSON of /status
    frame: bytes  # the same as one server-sent event


def paths_rows(configured: Iterable[tuple[str, dict[str, NetPath | None], set[str]]]) -> list[dict]:
    """/paths from (src, dst -> path, cut destinations) per instance: a copy
    the run took under its lock, turned into rows outside it."""
    return [
        {
            "src": src,
            "dst": dst,
            "cut": path is None or dst in cut,
            **(
                {}
                if path is None or dst in cut
                else {
                    "delay_us": path.delay_us,
                    "jitter_us": path.jitter_us,
                    "loss_ratio": path.loss_ratio,
                    "rate_bps": path.rate_bps,
                }
            ),
        }
        for src, shaped, cut in configured
        for dst, path in sorted(shaped.items())
    ]


class StatusBoard:
    def __init__(self, paths: Callable[[], list[dict]] = list, paths_version: Callable[[], object] | None = None):
        """`paths()` builds /paths (O(instances^2)); `paths_version()`, if
        given, changes whenever they do, and the JSON is kept until it does."""
        self._cond = threading.Condition()
        self._snapshot: dict = {"state": "starting"}
        self._version = 0
        self._closed = False
        self.paths = paths
        self._paths_version = paths_version
        # Encoding is the first reader's job, under a lock of its own: the
        # loop that publishes never waits for it, readers of a version share it.
        self._encode_lock = threading.Lock()
        self._encoded = Encoded(-1, b"", b"")
        self.encodings = 0
        self._paths_lock = threading.Lock()
        self._paths_json: tuple[object, bytes] | None = None

    def publish(self, snapshot: dict) -> None:
        with self._cond:
            self._snapshot = snapshot
            self._version += 1
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        with self._cond:
            return self._closed

    def snapshot(self) -> tuple[int, dict]:
        with self._cond:
            return self._version, self._snapshot

    def wait_newer(self, version: int, timeout_s: float) -> tuple[int, dict] | None:
        """The next snapshot after `version`, or None when closed or timed out."""
        with self._cond:
            self._cond.wait_for(lambda: self._version != version or self._closed, timeout_s)
            if self._closed or self._version == version:
                return None
            return self._version, self._snapshot

    def encoded(self) -> Encoded:
        """The latest snapshot as bytes, encoded once per version."""
        with self._cond:
            version, snapshot = self._version, self._snapshot
        with self._encode_lock:
            if self._encoded.version < version:  # else it is this one or a newer one
                body = json.dumps(snapshot).encode()
                self._encoded = Encoded(version, body, STREAM_PREFIX + body + b"\n\n")
                self.encodings += 1
            return self._encoded

    def paths_body(self) -> bytes:
        """/paths as JSON: one build at a time, and none while the version holds."""
        with self._paths_lock:
            # Read before the build: a change during it makes the next request build again.
            version = None if self._paths_version is None else self._paths_version()
            if version is None or self._paths_json is None or self._paths_json[0] != version:
                self._paths_json = (version, json.dumps(self.paths()).encode())
            return self._paths_json[1]

    def metrics(self) -> str:
        version = self.snapshot()[0]
        return (
            "# HELP collapsar_status_snapshots_total Snapshots the manager's loop has published\n"
            "# TYPE collapsar_status_snapshots_total counter\n"
            f"collapsar_status_snapshots_total {version}\n"
            "# HELP collapsar_status_snapshot_encodings_total Snapshots encoded to JSON (at most "
            "one per snapshot, whatever the readers)\n"
            "# TYPE collapsar_status_snapshot_encodings_total counter\n"
            f"collapsar_status_snapshot_encodings_total {self.encodings}\n"
        )
