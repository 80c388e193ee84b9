"""The control side of the status API: start, stop, ad-hoc link changes.

  POST /control/start  start a run made with --wait-start (commands, timeline)
  POST /control/stop   stop the run (teardown as after --duration)
  POST /control/link   {"link": ["s1", "s2"], "set": {"bandwidth": "5Mbps"}}

Every request needs `Authorization: Bearer <token>`; the token is random per
run, printed by `collapsar run` and written to RUNDIR/control-token (0600).
No request can run a command: the three actions above are all there is, and
a link change is data the topology parser checks like a `set` event.

An ad-hoc change is validated by the same code as the file: the run's
topology text is loaded again with the change appended as one more `set`
event at the current experiment time, and the whole experiment goes through
`parse_tree` (so unknown links, bad units, a link that has left, jitter
above latency are refused with the parser's own message).  The rebuilt
timeline then replaces the player's future (collapsar.manager.play.live):
the change holds for every later step that does not set that property again.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from collapsar.errors import CollapsarError, TopologyError
from collapsar.manager.core import needs_netem
from collapsar.manager.experiment import timeline_paths
from collapsar.parse_common import Report
from collapsar.parser import parse_tree
from collapsar.timeline import build_timeline
from collapsar.yamlsrc import Node, load

TOKEN_FILE = "control-token"
MAX_BODY_BYTES = 64 * 1024
ACTIONS = ("start", "stop", "link")


class ControlRefused(CollapsarError):
    """A control request that cannot be honoured; `status` is its HTTP code."""

    def __init__(self, status: int, message: str):
        self.status = status
        super().__init__(message)


def new_token() -> str:
    return secrets.token_urlsafe(24)


def write_token(run_dir: Path, token: str) -> Path:
    """RUNDIR/control-token, readable by its owner only (created so, never
    chmod-ed after the fact: no window where others could read it)."""
    path = Path(run_dir) / TOKEN_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    return path


def bearer_matches(header: str | None, token: str) -> bool:
    """`Authorization: Bearer <token>`, compared in constant time."""
    if not header or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[len("Bearer ") :].strip().encode(), token.encode())


class ControlHandler(Protocol):
    """What the status API's /control/ routes call: a run's RunControl, or the
    dashboard's proxy to several of them (collapsar.dashboard.aggregate)."""

    def authorized(self, header: str | None) -> bool: ...

    def handle(self, action: str, body: object, authorization: str | None = None) -> dict: ...


class RunControl:
    """What the HTTP layer calls; each action is a callback of the run (None:
    not available in this run, e.g. start without --wait-start)."""

    def __init__(
        self,
        token: str,
        start: Callable[[], dict] | None = None,
        stop: Callable[[], dict] | None = None,
        link: Callable[[object], dict] | None = None,
    ):
        self.token = token
        self._start, self._stop, self._link = start, stop, link

    def authorized(self, header: str | None) -> bool:
        return bearer_matches(header, self.token)

    def handle(self, action: str, body: object, authorization: str | None = None) -> dict:
        """`authorization` is already checked here; a proxy passes it on."""
        if action not in ACTIONS:
            raise ControlRefused(404, f"no control action {action[:40]!r}; expected one of {', '.join(ACTIONS)}")
        if action == "link" and self._link is not None:
            return self._link(body)  # the body's shape is checked by read_change
        callback = {"start": self._start, "stop": self._stop}.get(action)
        if callback is None:
            why = (
                "this run was not started with --wait-start" if action == "start" else "this manager does not offer it"
            )
            raise ControlRefused(409, f"{action}: {why}")
        return callback()


def read_change(body: object) -> tuple[str, str, dict]:
    """The request's shape only; values are the parser's business."""
    if not isinstance(body, dict):
        raise ControlRefused(
            400, 'link change: expected a JSON object like {"link": ["s1", "s2"], "set": {"bandwidth": "5Mbps"}}'
        )
    extra = sorted(set(body) - {"link", "set"})
    if extra:
        raise ControlRefused(
            400, f"link change: unexpected key {extra[0][:40]!r}; expected link and set (the time is now)"
        )
    link, changes = body.get("link"), body.get("set")
    if not isinstance(link, list) or len(link) != 2 or not all(isinstance(end, str) for end in link):
        raise ControlRefused(400, 'link change: "link" must name the two ends, like ["s1", "s2"]')
    if not isinstance(changes, dict) or not changes:
        raise ControlRefused(400, 'link change: "set" must be an object like {"latency": "50ms", "bandwidth": "5Mbps"}')
    return link[0], link[1], changes


def describe_change(a: str, b: str, changes: dict) -> str:
    return f"link {a} -- {b} set " + ", ".join(f"{key}={value}" for key, value in changes.items())


def with_events(text: str, source: str, extra: list[dict]):
    """Parse the topology `text` with `extra` events appended to its list."""
    problems: list = []
    root = load(text, source, problems)
    if root is None or not root.is_mapping:
        raise ControlRefused(500, f"{source}: the run's topology no longer loads")
    written = root.value.get("events")
    items = list(written.value) if written is not None and written.is_list else []
    for event in extra:
        node = load(json.dumps(event), "control request", problems)
        if node is None:
            raise ControlRefused(400, "link change: " + "; ".join(p.message for p in problems))
        items.append(node)
    root.value["events"] = Node(items, written.line if written is not None else 1)
    return parse_tree(Report(source), root)


class AdHocLinks:
    """Turns link-change requests into a new future for the player."""

    def __init__(
        self, text: str, source: str, player, netem: bool, on_change: Callable[[object], None] = lambda timeline: None
    ):
        """`on_change(timeline)`: told the new timeline once it plays (the
        sharing loop reads link capacities from the run's timeline)."""
        self.text, self.source = text, source
        self.player = player
        self.netem = netem
        self.on_change = on_change
        self.changes: list[dict] = []  # accepted so far, as events of the file language

    def _timeline(self, event: dict):
        try:
            experiment = with_events(self.text, self.source, [*self.changes, event])
            timeline = build_timeline(experiment)
        except TopologyError as error:
            raise ControlRefused(400, "link change refused: " + "; ".join(p.message for p in error.problems)) from None
        except CollapsarError as error:
            raise ControlRefused(400, f"link change refused: {error}") from None
        if not self.netem and needs_netem(timeline_paths(timeline)):
            raise ControlRefused(
                400,
                "link change refused: this run shapes rates only (htb, no "
                "netem: no path had latency, jitter or loss); latency, jitter "
                "and loss can change only in a run that starts with some",
            )
        return timeline

    def apply(self, body: object) -> dict:
        a, b, changes = read_change(body)
        label = describe_change(a, b, changes)
        with self.player.lock:  # one change at a time; none once the run stops
            if self.player.stopped:
                raise ControlRefused(409, "link change refused: the run is stopping")
            at_us = self.player.now_us()
            event = {"at": f"{at_us}us", "link": [a, b], "set": changes}
            timeline = self._timeline(event)  # refused here: nothing was paused
            applied = self.player.pause()
            try:
                if 0 <= at_us <= applied:  # a step fired meanwhile: go after it
                    at_us = applied + 1
                    event["at"] = f"{at_us}us"
                    timeline = self._timeline(event)
            except ControlRefused:
                self.player.resume(applied)
                raise
            self.changes.append(event)
            self.player.replace(timeline, applied, at_us, label)
            self.on_change(timeline)
        return {"ok": True, "at_us": at_us, "label": f"ad-hoc: {label}"}


def local_control(
    run_dir: Path,
    say: Callable[[str], None],
    player,
    adhoc: AdHocLinks,
    wait_start: bool,
    start_requested: threading.Event,
    stop: Callable[[str], None],
) -> RunControl:
    """The control actions of a local run: a fresh token, printed and written
    to the run directory; start only with --wait-start.  Start and stop only
    raise flags: the run's own loop acts on them at its next tick, so every
    process and netlink change stays on the threads that own them."""
    token = new_token()
    path = write_token(run_dir, token)
    say(f"control token: {token} (also in {path})")

    def start() -> dict:
        if player.started or start_requested.is_set():
            raise ControlRefused(409, "start: the run has already started")
        start_requested.set()
        return {"ok": True, "state": "starting"}

    def stop_run() -> dict:
        stop("stop requested through the control API")
        return {"ok": True, "state": "stopping"}

    return RunControl(token, start if wait_start else None, stop_run, adhoc.apply)
