"""A transport that survives its media driver: the driver this manager owns,
a client on it, and the channels asked for, re-added after a restart
(collapsar.manager.sharing.aeron has the client binding, driver.py the
driver process)."""

from __future__ import annotations

import logging

from collapsar.manager.sharing.aeron import DRIVER_TIMEOUT_MS, AeronError, Client, Driver, Publication, Subscription

log = logging.getLogger(__name__)


class Transport:
    """A media driver this manager owns, a client on it, and the publications and
    subscriptions asked for.  `check()` (run by `offer` and `poll`) notices a
    driver process that exited, or one the client stopped hearing (keepalive
    older than `driver_timeout_ms`: hung or stopped), reports it through the log
    and `on_driver_lost`, restarts the driver and re-adds everything."""

    def __init__(self, driver: Driver, *, driver_timeout_ms: int = DRIVER_TIMEOUT_MS, on_driver_lost=None):
        self.driver = driver
        self.driver_timeout_ms = driver_timeout_ms
        self.on_driver_lost = on_driver_lost
        self.failures: list[str] = []  # one line per driver lost, in order
        self.client: Client | None = None
        self._wanted: list[tuple[str, str, int]] = []  # (kind, channel, stream_id)
        self._open: list[Publication | Subscription] = []

    def start(self) -> None:
        if not self.driver.alive():
            self.driver.start()
        self.client = Client(self.driver.aeron_dir, driver_timeout_ms=self.driver_timeout_ms)
        self._open = [self.client.add(kind, channel, stream_id) for kind, channel, stream_id in self._wanted]

    def _client(self) -> Client:
        if self.client is None:
            raise AeronError("the transport is not started")
        return self.client

    def add(self, kind: str, channel: str, stream_id: int) -> None:
        """kind: "publication" or "subscription"; kept across driver restarts."""
        self._wanted.append((kind, channel, stream_id))
        self._open.append(self._client().add(kind, channel, stream_id))

    def driver_problem(self) -> str | None:
        """Why the driver is unusable, or None when it is fine."""
        if not self.driver.alive():
            code = self.driver.process.returncode if self.driver.process else None
            return f"media driver pid {self.driver.pid} exited (status {code})"
        if self.client is not None and self.client.driver_lost:
            detail = self.client.errors[-1][1] if self.client.errors else "client closed"
            return f"media driver pid {self.driver.pid} stopped answering ({detail})"
        return None

    def check(self) -> bool:
        """Restart the driver if it is unusable; True when it had to."""
        problem = self.driver_problem()
        if problem is None:
            return False
        self.failures.append(problem)
        log.error("%s; restarting it in %s", problem, self.driver.aeron_dir)
        if self.on_driver_lost:
            self.on_driver_lost(problem)
        self._client().close()
        self.driver.stop(timeout_s=1.0)  # a hung driver gets SIGKILL
        self.start()
        return True

    def offer(self, payload: bytes) -> int:
        """Offer to every publication; returns how many took it."""
        self.check()
        return sum(r.offer(payload) for r in self._open if isinstance(r, Publication))

    def poll(self) -> list[bytes]:
        self.check()
        self._client().do_work()
        if self.check():  # do_work is where the client notices a silent driver
            self._client().do_work()
        return [m for r in self._open if isinstance(r, Subscription) for m in r.poll()]

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        self.driver.stop()
