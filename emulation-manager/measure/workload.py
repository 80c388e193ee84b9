"""The workload at the end of a run: each wl-client's summary next to the
network share its chain should see.

Traces (the contract wl-node and wl-client implement): with
COLLAPSAR_TRACE_DIR set, each writes `$COLLAPSAR_TRACE_DIR/$COLLAPSAR_INSTANCE.spans.jsonl`,
and a client also INSTANCE.requests.csv and INSTANCE.summary.json (its
`--json` summary plus "instance" and "service").  A local run points every
instance at RUNDIR/workload/ (`trace_into`), where `collapsar trace` reads
them.

The network share of a chain is what the configured network alone adds to
one request: the RTT of the collapsed paths there and back from the client
to its first node, plus, for each FORWARD, the share of the targets it
waits for: with nack N, the N-th smallest of (RTT to a target + the share of
that target's own sub-chain).  It is taken on the paths in force when the
client started (t=0, or its join), and the line says when later events
change one of them: the view over time is `collapsar trace`'s.  Transfer
time (request and reply bytes over a path's rate), compute and storage are
not part of it; the client's latency includes them.

The chain is read by the client's own parser (`wl-client --check`, which
prints it as one JSON line and runs nothing), never re-parsed here.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from collapsar.errors import CollapsarError
from collapsar.manager.programs import resolve
from collapsar.model import service_of
from collapsar.runfiles import open_regular

TRACE_ENV = "COLLAPSAR_TRACE_DIR"
TRACE_DIR = "workload"  # in the run directory
REPORT_FILE = "workload.json"
CLIENT = "wl-client"
CHECK_TIMEOUT_S = 10.0
_MAX_SUMMARY_BYTES = 1 << 20

Rtt = Callable[[str, str], "int | None"]


def trace_into(run) -> None:
    """RUNDIR/workload/, and every command of the run pointed at it.  Its
    mode is the run directory's: local-mode commands run as root."""
    os.mkdir(TRACE_DIR, 0o700, dir_fd=run.rundir.dir_fd)
    where = str(run.rundir.path / TRACE_DIR)
    for launch in run.launches.values():
        launch.env = {**launch.env, TRACE_ENV: where}


@dataclass(frozen=True)
class Hop:
    """One request's way from `src` to its targets and back."""

    src: str
    targets: tuple[str, ...]
    rtt_us: tuple[int | None, ...]  # None: no path there and back
    nack: int

    def describe(self) -> str:
        each = [f"{t} {_ms(r)}" for t, r in zip(self.targets, self.rtt_us)]
        if len(each) == 1:
            return f"{self.src}->{each[0]}"
        return f"{self.src}->{{{', '.join(each)}}} nack {self.nack}"

    def as_json(self) -> dict:
        return {"from": self.src, "to": list(self.targets), "rtt_us": list(self.rtt_us), "nack": self.nack}


def chain_share(chain: dict, client: str, rtt: Rtt) -> tuple[int | None, list[Hop]]:
    """(network share in us, None if some hop has no path; the hops) of a
    `wl-client --check` description sent from `client`."""
    first = chain["to"]
    hops = [Hop(client, (first,), (rtt(client, first),), 1)]
    rest = _ops_share(first, chain.get("chain", []), rtt, hops)
    return (None if hops[0].rtt_us[0] is None or rest is None else hops[0].rtt_us[0] + rest), hops


def _ops_share(node: str, ops: list, rtt: Rtt, hops: list[Hop]) -> int | None:
    total: int | None = 0
    for op in ops:
        if op.get("op") != "forward":  # compute, load, store: the node's own time
            continue
        targets = tuple(op["to"])
        nack = int(op.get("nack", len(targets)))
        hop = Hop(node, targets, tuple(rtt(node, t) for t in targets), nack)
        hops.append(hop)
        each = []
        for target, there_and_back in zip(targets, hop.rtt_us):
            sub = _ops_share(target, op.get("chain", []), rtt, hops)
            if there_and_back is not None and sub is not None:
                each.append(there_and_back + sub)
        # The forward settles with its nack-th reply: fewer reachable targets, it never does.
        total = None if total is None or len(each) < nack else total + sorted(each)[nack - 1]
    return total


def rtt_in(state, known: dict[str, str]) -> Rtt:
    """Configured RTT (us) between two hosts as a chain names them
    (`known`: instance name or address -> instance), in `state`."""
    present = set(state.instances)

    def rtt(src: str, dst: str) -> int | None:
        a, b = known.get(src), known.get(dst)
        if a is None or b is None or a not in present or b not in present:
            return None
        if a == b:
            return 0
        try:
            there, back = state.path(a, b), state.path(b, a)
        except CollapsarError:  # a pair this state does not know
            return None
        return None if there is None or back is None else there.delay_us + back.delay_us

    return rtt


def summary_line(
    instance: str,
    summary: dict | None,
    share_us: int | None,
    hops: list[Hop],
    changes_us: list[int],
    summary_problem: str | None = None,
    chain_problem: str | None = None,
) -> str:
    if summary is None:
        head = f"workload {instance}: no summary ({summary_problem or 'none written'})"
    else:
        latency = summary.get("latency_us", {})
        counts = ", ".join(f"{key} {summary.get(key, 0)}" for key in ("ok", "err", "timeout"))
        unsent = f", unsent {summary['unsent']}" if summary.get("unsent") else ""
        head = (
            f"workload {instance}: {summary.get('requests', 0)} requests ({counts}{unsent}); "
            f"latency p50 {_ms(latency.get('p50'))}, p99 {_ms(latency.get('p99'))}"
        )
    if not hops:
        return f"{head}; network share of the chain: unknown ({chain_problem or 'no chain'})"
    share = "unknown: a hop has no path" if share_us is None else _ms(share_us)
    line = f"{head}; network share of the chain: {share} (configured RTTs: {', '.join(hop.describe() for hop in hops)})"
    if changes_us:
        line += f"; later events change these paths at {', '.join(f'{t / 1e6:g}s' for t in changes_us)}"
    return line


def _ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1000:.4g} ms"


# ---- the run's end -------------------------------------------------------------


def report(run) -> None:
    """Print one line per workload client (a wl-client command, or anything
    that wrote a summary) and write RUNDIR/workload.json."""
    names = list(run.instances)
    known = {**{name: name for name in names}, **{ip: name for name, ip in run.plan.ip_of().items()}}
    chains: dict[tuple, tuple[dict | None, str | None]] = {}  # argv -> described once per service
    records = []
    for instance in names:
        summary, summary_problem = read_summary(run.rundir.path / TRACE_DIR / f"{instance}.summary.json")
        launch = run.launches.get(instance)
        if launch is not None and os.path.basename(launch.argv[0]) == CLIENT:
            if launch.argv not in chains:
                chains[launch.argv] = describe_chain(launch, names)
            chain, chain_problem = chains[launch.argv]
        elif summary is not None:
            chain, chain_problem = None, "its command is not wl-client itself: the chain is unknown"
        else:
            continue
        share, hops, at_us, changes_us = None, [], None, []
        if chain is not None:
            share, hops, at_us, changes_us = network_share(chain, instance, run.timeline, known)
        records.append(
            {
                "instance": instance,
                "service": service_of(run.experiment, instance),
                "summary": summary,
                "summary_problem": summary_problem,
                "chain": chain,
                "chain_problem": chain_problem,
                "network_share_us": share,
                "at_us": at_us,
                "hops": [hop.as_json() for hop in hops],
                "paths_change_at_us": changes_us,
            }
        )
        run.say(summary_line(instance, summary, share, hops, changes_us, summary_problem, chain_problem))
    if records:
        run.rundir.write_file(REPORT_FILE, json.dumps({"trace_dir": TRACE_DIR, "clients": records}, indent=1))


def network_share(chain: dict, client: str, timeline, known: dict[str, str]):
    """(share in us, hops, the time of the paths it is taken on, the times of
    later steps that change one of those paths): on the paths in force when
    `client` first ran."""
    steps = timeline.steps
    first = next((i for i, step in enumerate(steps) if client in step.state.instances), 0)
    share, hops = chain_share(chain, client, rtt_in(steps[first].state, known))
    pairs = {(known.get(hop.src), known.get(target)) for hop in hops for target in hop.targets}
    pairs |= {(b, a) for a, b in pairs}
    changes = [step.at_us for step in steps[first + 1 :] if any(pair in step.changed for pair in pairs)]
    return share, hops, steps[first].at_us, changes


def describe_chain(launch, names: list[str]) -> tuple[dict | None, str | None]:
    """(the chain as `wl-client --check` prints it, None) or (None, why not)."""
    program = resolve(launch.argv[0], launch.env.get("PATH", ""), launch.cwd or os.getcwd())
    if program is None:
        return None, f"{launch.argv[0]} is not found to describe its chain"
    try:
        done = subprocess.run(
            [program, "--check", "--names", ",".join(names), *launch.argv[1:]],
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return None, f"wl-client --check: {error}"
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return None, f"wl-client --check cannot describe the chain: {said[:200]}"
    try:
        chain = json.loads(done.stdout.splitlines()[0])
        if not isinstance(chain, dict) or "to" not in chain:
            raise ValueError("no 'to'")
    except (IndexError, ValueError) as error:
        return None, f"wl-client --check printed no chain ({error})"
    return chain, None


MAX_REQUESTS_BYTES = 64 << 20  # about a million requests' records


def _read_written(path, limit: int) -> tuple[bytes | None, str | None]:
    """A file an instance wrote in the trace directory: a regular file
    (never a symlink followed or a FIFO waited on), read up to `limit`
    bytes and one more, so that the caller sees when it is larger."""
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return None, f"{TRACE_DIR}/{path.name} was not written"
    except OSError as error:
        if error.errno == 0:  # open_regular's "not a regular file"
            return None, f"{TRACE_DIR}/{path.name} is not a regular file"
        return None, f"{TRACE_DIR}/{path.name}: {error.strerror}"
    with open(fd, "rb") as handle:
        return handle.read(limit + 1), None


def read_requests(path) -> list[dict[str, str]] | None:
    """A client's requests.csv rows (None: not there, not a regular file,
    or larger than MAX_REQUESTS_BYTES)."""
    data, _ = _read_written(path, MAX_REQUESTS_BYTES)
    if data is None or len(data) > MAX_REQUESTS_BYTES:
        return None
    return list(csv.DictReader(io.StringIO(data.decode("utf-8", "replace"))))


def read_summary(path) -> tuple[dict | None, str | None]:
    """A client's summary.json, read up to 1 MiB (see _read_written)."""
    data, problem = _read_written(path, _MAX_SUMMARY_BYTES)
    if data is None:
        return None, problem
    try:
        if len(data) > _MAX_SUMMARY_BYTES:
            raise ValueError("larger than 1 MiB")
        summary = json.loads(data)
        if not isinstance(summary, dict):
            raise ValueError("not an object")
    except ValueError as error:
        return None, f"{TRACE_DIR}/{path.name} is no summary ({error})"
    return summary, None
