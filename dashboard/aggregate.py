"""Follow one or several managers and serve them as one.

Each `Follower` keeps a manager's latest status snapshot by reading its
server-sent-events stream on a thread of its own, reconnecting every second
when the manager cannot be reached; its state (connecting, up, unreachable
with the reason, ended) is part of what the page shows, so a manager that
went away is never silent.  A manager whose run ended says so in its last
snapshot (state "ended", with `end`): its follower keeps that snapshot,
is "ended", and stops; no reconnecting to a run that is over.  `merge`
folds the followers' snapshots into one in the shape a single manager
publishes, with `host` on instances and flows and a `managers` list; link
loads are summed over managers (each one measures the flows its own
instances send).  The merged run has ended when every manager's has.

Control requests go to every manager.  Without manager tokens the page's
bearer token is passed on as it is (each manager checks it); with them
(`--token-file` or COLLAPSAR_MANAGER_TOKEN, see collapsar.commands
.dashboard), the aggregator checks the page's token against its own and
sends each manager its token.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from urllib.parse import urlsplit

from collapsar.errors import CollapsarError
from collapsar.manager.status.control import ControlRefused, bearer_matches

RECONNECT_S = 1.0
READ_TIMEOUT_S = 20.0  # managers send a keep-alive comment every 15 s
PUBLISH_EVERY_S = 0.1  # fold at most this often, however many managers tick


def manager_url(text: str) -> str:
    """`http://127.0.0.1:8123` from what a user pastes (the run prints .../status)."""
    url = text.strip().rstrip("/")
    for suffix in ("/status", "/stream", "/dashboard"):
        if url.endswith(suffix):
            url = url[: -len(suffix)]
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path:
        raise CollapsarError(
            f"--manager {text}: expected a manager's status URL like http://127.0.0.1:8123 (collapsar run prints it)"
        )
    return url


class Follower:
    """One manager's stream, followed until `close`."""

    def __init__(self, url: str, on_change: Callable[[], None]):
        self.url = url
        self.host = urlsplit(url).netloc
        self.state = "connecting"
        self.error: str | None = None
        self.snapshot: dict = {}
        self.seen_at: float | None = None  # monotonic time of the last snapshot
        self._on_change = on_change
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"follow {self.host}", daemon=True)

    def start(self) -> Follower:
        self._thread.start()
        return self

    def close(self) -> None:
        """The reading thread ends at the stream's next message or keep-alive
        (closing the reply from here would block on the reader's lock)."""
        self._closing.set()

    def _run(self) -> None:
        while not self._closing.is_set():
            try:
                if self._follow():
                    return  # the run ended: nothing more will come
                self._lost("the manager closed its stream (run ended?)")
            except (OSError, ValueError, urllib.error.URLError) as error:
                reason = getattr(error, "reason", None) or error
                self._lost(f"{type(error).__name__}: {reason}")
            self._closing.wait(RECONNECT_S)

    def _lost(self, why: str) -> None:
        if self._closing.is_set():
            return
        self.state, self.error = "unreachable", why
        self._on_change()

    def _follow(self) -> bool:
        """Snapshots until the stream ends; True once one said the run ended."""
        data: list[str] = []
        with urllib.request.urlopen(self.url + "/stream", timeout=READ_TIMEOUT_S) as reply:
            for raw in reply:
                line = raw.decode("utf-8").rstrip("\r\n")
                if line.startswith("data:"):
                    data.append(line[5:].lstrip(" "))
                elif not line and data:
                    self.snapshot = json.loads("\n".join(data))
                    ended = self.snapshot.get("state") == "ended"
                    self.state, self.error, self.seen_at = "ended" if ended else "up", None, time.monotonic()
                    data = []
                    self._on_change()
                    if ended:
                        return True
                if self._closing.is_set():
                    return False
        return False

    def describe(self) -> dict:
        ago = None if self.seen_at is None else round(time.monotonic() - self.seen_at, 1)
        snap = self.snapshot
        return {
            "url": self.url,
            "host": self.host,
            "state": self.state,
            "error": self.error,
            "run_id": snap.get("run_id"),
            "seen_s_ago": ago,
            "end": snap.get("end") if snap.get("state") == "ended" else None,
        }


def merge(followers: list[Follower]) -> dict:
    """One snapshot from every manager's latest (the first one's timeline);
    its state is the first running manager's, or "ended" once every one has
    ended, with the `end` of the last to end (each manager's is in `managers`)."""
    # Each snapshot read once: a follower's thread replaces it whole, meanwhile.
    latest = [(f, f.snapshot) for f in followers]
    live = [(f, snap) for f, snap in latest if snap]
    first = live[0][1] if live else {}
    merged: dict = {
        "managers": [f.describe() for f in followers],
        "run_id": first.get("run_id"),
        "source": first.get("source"),
        "state": _state(latest),
        "t_us": max((snap.get("t_us", 0) for _, snap in live), default=0),
        "events": first.get("events", {"applied": [], "pending": 0, "upcoming": []}),
        "instances": [],
        "flows": [],
        "throughput": [],
        "links": [],
    }
    for follower, snap in live:
        for key in ("instances", "flows", "throughput", "probe", "workload"):
            merged.setdefault(key, [])
            merged[key] += [{**row, "host": follower.host} for row in snap.get(key, [])]
    # Each manager shares for the flows its instances send: those are its
    # "local" ones (the others it knows from its peers, and they say them).
    merged["sharing"] = {
        "enabled": any((snap.get("sharing") or {}).get("enabled") for _, snap in live),
        "flows": [
            {**flow, "host": follower.host}
            for follower, snap in live
            for flow in (snap.get("sharing") or {}).get("flows", [])
            if flow.get("local", True)
        ],
    }
    merged["links"] = _merge_links([snap.get("links", []) for _, snap in live])
    if merged["state"] == "ended":
        ends = [snap.get("end") or {} for _, snap in latest]
        merged["end"] = max(ends, key=lambda end: end.get("at_unix") or 0)
    return merged


def _state(latest: list[tuple[Follower, dict]]) -> str:
    """Ended once every manager's run has; else unreachable when every
    manager still going is; else the first one's with a snapshot."""
    going = [(f, snap) for f, snap in latest if snap.get("state") != "ended"]
    if latest and not going:
        return "ended"
    if going and all(f.state == "unreachable" for f, _ in going):
        return "unreachable"
    return next((snap.get("state", "connecting") for _, snap in going if snap), "connecting")


def _merge_links(per_manager: list[list[dict]]) -> list[dict]:
    merged: dict[int, dict] = {}
    for links in per_manager:
        for link in links:
            into = merged.get(link["id"])
            if into is None:
                merged[link["id"]] = json.loads(json.dumps(link))  # a copy we may add to
                continue
            for direction in ("up", "down"):
                if direction in link and direction in into:
                    into[direction]["load_bps"] += link[direction]["load_bps"]
    for link in merged.values():
        for direction in ("up", "down"):
            side = link.get(direction)
            if side and side.get("rate_bps"):
                side["utilisation"] = round(side["load_bps"] / side["rate_bps"], 4)
    return [merged[key] for key in sorted(merged)]


class Aggregator:
    """The followers, the board they feed, and the control proxy."""

    def __init__(self, urls: list[str], board, tokens: list[str] | None = None, own_token: str | None = None):
        if tokens and len(tokens) not in (1, len(urls)):
            raise CollapsarError(
                f"{len(tokens)} manager tokens for {len(urls)} managers: "
                "give one token for all, or one per --manager in order"
            )
        self.board = board
        self.tokens = (tokens * len(urls) if len(tokens) == 1 else tokens) if tokens else None
        self.token = own_token if tokens else None
        self._dirty = threading.Event()
        self._closing = threading.Event()
        self.followers = [Follower(url, self._dirty.set) for url in urls]
        self._topology: dict | None = None
        self._publisher = threading.Thread(target=self._publish, name="aggregate", daemon=True)

    def start(self) -> Aggregator:
        for follower in self.followers:
            follower.start()
        self._publisher.start()
        return self

    def close(self) -> None:
        self._closing.set()
        self._dirty.set()
        for follower in self.followers:
            follower.close()

    def _publish(self) -> None:
        while not self._closing.is_set():
            self._dirty.wait()
            self._dirty.clear()
            if self._closing.is_set():
                return
            self.board.publish(merge(self.followers))
            self._closing.wait(PUBLISH_EVERY_S)

    def topology(self) -> dict:
        """The first manager's (all managers of a run share the experiment)."""
        if self._topology is None:
            errors = []
            for follower in self.followers:
                try:
                    with urllib.request.urlopen(follower.url + "/topology", timeout=5) as reply:
                        self._topology = json.loads(reply.read())
                        break
                except (OSError, ValueError) as error:
                    errors.append(f"{follower.url}: {error}")
            else:
                return {"nodes": [], "links": [], "error": "; ".join(errors) or "no manager"}
        return self._topology

    # ---- control ----------------------------------------------------------------

    def authorized(self, header: str | None) -> bool:
        if self.token is not None:
            return bearer_matches(header, self.token)
        return header is not None and header.startswith("Bearer ")  # each manager checks it

    def handle(self, action: str, body: object, authorization: str | None = None) -> dict:
        replies: list[tuple[Follower, int, dict]] = []
        failures: list[tuple[Follower, int, dict]] = []
        for index, follower in enumerate(self.followers):
            header = f"Bearer {self.tokens[index]}" if self.tokens else authorization
            code, reply = _post(f"{follower.url}/control/{action}", body, header)
            (replies if code == 200 else failures).append((follower, code, reply))
        if failures:
            _, code, _ = failures[0]
            message = "; ".join(f"{f.host}: {reply.get('error', code)}" for f, code, reply in failures)
            raise ControlRefused(code, message)
        return {"ok": True, "managers": [{"host": f.host, **reply} for f, _, reply in replies]}


def _post(url: str, body: object, authorization: str | None) -> tuple[int, dict]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    if authorization:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read() or b"{}")
    except urllib.error.HTTPError as error:
        try:
            return error.code, json.loads(error.read() or b"{}")
        except ValueError:
            return error.code, {"error": f"HTTP {error.code}"}
    except (OSError, ValueError) as error:
        return 502, {"error": f"unreachable: {error}"}
