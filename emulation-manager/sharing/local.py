"""Bandwidth sharing inside a manager: the ShareLoop bound to a run.

`ManagerSharing` is the part every mode shares; `LocalSharing` is what
local/run.py creates at bring-up, ticks every period and closes at teardown, and
container mode (`container_sharing` in container/sharing.py) follows the
containers on its node.  A local run owns every instance (one manager), starts
this host's Aeron media driver (its dir in /dev/shm, its log in the run
directory; it gets SIGTERM when the manager dies, even by SIGKILL:
sharing/driver.py) and publishes on `aeron:ipc`, where other managers sharing this
host's driver would hear it; a lost driver is reported on the run's output
and in the status, restarted, and the channels re-added (transport.Transport).
Where Aeron is not built, sharing still works among this manager's own
instances and says once that it cannot talk to other managers.

The experiment tag on the wire is a CRC of the experiment file's bytes, so
managers fed the same file agree on it and any other run's messages are
dropped as foreign.  Messages are authenticated with the run's `key`
(sharing/key.py): a local run makes one in memory, it has no other manager.
A dropped message is counted in the status; the first of each kind (other
than our own messages coming back) is also reported on the run's output,
once, never per message: a flood must not become a flood of lines.

Environment variables serve measurements (bench/sharing_bench.py
--convergence), not users: COLLAPSAR_SHARE_<FIELD> overrides a
`ShareSettings` field (e.g. COLLAPSAR_SHARE_INCREASE_GAIN=0.5), and
COLLAPSAR_SHARE_TRACE names a file that gets one JSON line per period with
every active flow's measured and allowed rate.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path as FsPath

from collapsar.errors import CollapsarError
from collapsar.manager.core import EmulationCore
from collapsar.manager.sharing.bus import STREAM_ID, MetadataBus, open_aeron
from collapsar.manager.sharing.key import new_key
from collapsar.manager.sharing.loop import ShareLoop, ShareSettings
from collapsar.manager.sharing.metadata import Codec
from collapsar.manager.sharing.model import Flow, share
from collapsar.manager.sharing.routes import Routes


def experiment_tag(source: str) -> int:
    try:
        return zlib.crc32(FsPath(source).read_bytes())
    except OSError:
        return zlib.crc32(source.encode())


def link_count(state) -> int:
    return max(1, max(state.links, default=0) + 1)


def run_codec(source: str, timeline, instances: Sequence[str], key: bytes) -> Codec:
    """The codec every manager of one run builds alike from the same file."""
    return Codec(experiment_tag(source), link_count(timeline.steps[0].state), instances=len(instances), key=key)


# What each drop reason means, for the one line that reports it.
DROP_REASONS = {
    "forged": "its authentication tag does not match this run's key (not from a manager of this run)",
    "stale": "not newer than what its sender said last (a replay or a duplicate)",
    "path": "a flow that is not a collapsed path of its sender's instance",
    "sender": "a sender id that is no instance of this run",
    "flows": "more flows than its sender has destinations",
    "foreign": "another run's or another program's message",
    "version": "another wire format version (a manager of another Collapsar version)",
}


class ManagerSharing:
    """The sharing of one manager, whatever runs its cores: a ShareLoop, its
    metadata bus and this host's media driver.  `lock` is the one the
    manager's timeline thread holds while it changes the same cores.

    `listen` (ip:port) adds the `aeron:udp` subscription other hosts'
    managers publish to, and `add_peers` the publications to them;
    `driver_prefix` runs the media driver under a command, e.g. nsenter into
    the namespace whose address `listen` is."""

    def __init__(
        self,
        *,
        source: str,
        instances: Sequence[str],
        cores: Mapping[str, EmulationCore],
        netem: bool,
        timeline,
        key: bytes,
        lock,
        aeron_dir: str,
        log_path,
        say: Callable[[str], None],
        listen: str | None = None,
        driver_prefix: tuple[str, ...] = (),
        settings: ShareSettings = ShareSettings(),
        aeron: bool = True,
    ):
        self._say = say
        self._lock = lock
        self.ids = {name: index for index, name in enumerate(instances)}
        codec = run_codec(source, timeline, instances, key)
        self._reported: set[str] = {"own"}  # drop reasons said once already
        self.transport = None
        self.aeron_problem: str | None = None
        self.lost: list[str] = []  # one line per media driver lost
        self.peers: list[str] = []
        if aeron:
            try:
                self.transport = open_aeron(
                    aeron_dir,
                    listen=listen,
                    peers=(),
                    prefix=driver_prefix,
                    log_path=log_path,
                    on_driver_lost=self._driver_lost,
                    # A driver that exits is seen at once (its pid); one that hangs after
                    # 10 s, not 2: a loaded host or an emulated VM can stall a keepalive.
                    driver_timeout_ms=10_000,
                )
            except (CollapsarError, OSError) as error:  # not built, no /dev/shm room, ...
                self.aeron_problem = str(error).splitlines()[0]
                say(
                    f"warning: no Aeron metadata bus ({self.aeron_problem}); sharing among this "
                    f"manager's instances only"
                )
        self.bus = MetadataBus(
            codec, {name: self.ids[name] for name in cores}, self.transport, routes=Routes(timeline, instances)
        )
        self.loop = ShareLoop(
            list(cores),
            cores,
            self.bus,
            netem=netem,
            settings=self.settings_from_env(settings),
            apply=self._apply,
            configured=self._configured,
            sender_names={i: n for n, i in self.ids.items()},
        )
        # The first model run pays numpy's one-time costs (seconds on a VM's
        # emulated CPUs): pay them now, before t=0, not when the first flows start.
        share([Flow("warm-up", (0,), 1000, None, 1)], {0: 1_000_000})
        trace = os.environ.get("COLLAPSAR_SHARE_TRACE")
        self._trace = open(trace, "a") if trace else None

    def add_peers(self, peers: Iterable[str]) -> None:
        """Publish to these managers (ip:port) too, from now on."""
        if self.transport is None:
            return
        from collapsar.manager.sharing.aeron import udp_channel  # only where Aeron runs (cffi)

        for peer in peers:
            if peer in self.peers:
                continue
            self.transport.add("publication", udp_channel(peer), STREAM_ID)
            self.peers.append(peer)
            self._say(f"sharing: metadata to the manager at {peer}")

    def own(self, cores: Mapping[str, EmulationCore]) -> None:
        """The cores this manager runs from now on (container mode): every
        period, since a restarted container keeps its name but not its core."""
        if list(cores) != self.loop.owned:
            self.bus.own({name: self.ids[name] for name in cores})
        self.loop.own(cores)

    @staticmethod
    def settings_from_env(settings: ShareSettings = ShareSettings()) -> ShareSettings:
        changes = {}
        for field in dataclasses.fields(ShareSettings):
            text = os.environ.get(f"COLLAPSAR_SHARE_{field.name.upper()}")
            if text:
                kind = type(getattr(settings, field.name))
                try:
                    changes[field.name] = kind(text)
                except ValueError:
                    raise CollapsarError(
                        f"COLLAPSAR_SHARE_{field.name.upper()}={text}: expected {kind.__name__}"
                    ) from None
        return dataclasses.replace(settings, **changes)

    def _driver_lost(self, problem: str) -> None:
        self.lost.append(problem)
        self._say(f"warning: sharing: {problem}; restarting the Aeron media driver")

    def _apply(self, src: str, changes) -> None:
        with self._lock:  # the timeline thread changes the same cores
            self.loop.cores[src].set_overrides(changes)

    def _configured(self, src: str):
        with self._lock:
            return self.loop.cores[src].configured()

    def tick(self, now_us: int, flows: Iterable[dict], state) -> None:
        """One period: `flows` are the meter's (cumulative `wire_bytes` per
        src/dst), `state` the timeline's state now."""
        wire = {(f["src"], f["dst"]): f["wire_bytes"] for f in flows}
        self.loop.tick(time.monotonic_ns(), wire, state, now_us)
        self._report_drops()
        if self._trace is not None:
            flows = [
                {k: f[k] for k in ("src", "dst", "measured_bps", "allowed_bps", "share_bps", "congestion_loss_ratio")}
                for f in self.loop.last["flows"]
                if f["local"]
            ]
            self._trace.write(json.dumps({"t_us": now_us, "period": self.loop.period, "flows": flows}) + "\n")

    def _report_drops(self) -> None:
        for reason in list(self.bus.counters.dropped):
            if reason not in self._reported:
                self._reported.add(reason)
                why = DROP_REASONS.get(reason, "malformed")
                self._say(
                    f"warning: sharing: dropped a metadata message ({reason}: {why}); such messages are "
                    f"counted in the status (sharing.metadata.dropped_messages), not reported again"
                )

    def status(self) -> dict:
        status = self.loop.status()
        status["aeron"] = {
            "running": self.transport is not None,
            "problem": self.aeron_problem,
            "driver_restarts": len(self.lost),
            "driver_problems": list(self.lost[-5:]),
            "driver_pid": self.transport.driver.pid if self.transport else None,
        }
        return status

    def close(self) -> None:
        meta = self.bus.status()
        dropped = sum(n for reason, n in meta["dropped_messages"].items() if reason != "own")
        self._say(
            f"sharing: {self.loop.period} periods, metadata sent {meta['sent_messages']} messages "
            f"({meta['sent_bytes']} bytes), accepted {meta['accepted_messages']}, dropped {dropped}, "
            f"driver restarts {len(self.lost)}"
        )
        if self._trace is not None:
            self._trace.close()
            self._trace = None
        if self.transport is not None:
            self.transport.close()
            self.transport = None


class LocalSharing(ManagerSharing):
    """Local mode: one manager owns every instance of the run."""

    def __init__(self, run, say: Callable[[str], None], settings: ShareSettings = ShareSettings(), aeron: bool = True):
        self.run = run
        # tmpfs: Aeron maps its files shared, which a run directory on a 9p
        # share (--vm) does not support.  The driver removes the dir when it
        # stops, also when the manager dies (sharing/driver.py).
        super().__init__(
            source=run.experiment.source,
            instances=run.instances,
            cores=run.cores,
            netem=run.netem,
            timeline=run.timeline,
            key=new_key(),
            lock=run.paths_lock,
            aeron_dir=f"/dev/shm/collapsar-{run.run_id}-aeron",
            log_path=run.rundir.path / "aeron-driver.log",
            say=say,
            settings=settings,
            aeron=aeron,
        )
