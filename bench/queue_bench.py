"""A full link's standing queue: what a ping across it waits, Collapsar against the hop-by-hop reference.

    python bench/queue_bench.py --vm --repeat 3
    python bench/queue_bench.py --vm --controls cubic --flows 1,4 --systems reference

A dumbbell: N bulk TCP senders and a pinger on sw1, their sinks and `srv`
on sw2; sw1 - sw2 10 Mbit/s and 20 ms each way, every other link 100
Mbit/s and 1 ms (44 ms of RTT).  The pinger pings srv every 100 ms from
t=2 s; from LOAD_START_S the N senders push TCP (the experiment's
congestion control) to their sinks for LOAD_S.  The pinger is no flow: in
the reference its pings wait in the drop-tail queue the senders fill at
sw1 (its buffer, the reference's rule: the longest round trip across the
link at its rate, 44 ms here); in Collapsar in the standing queue the
sharing loop adds to the delay of whatever crosses a full link
(collapsar/manager/sharing/model.py, `standing_queues`).

Per control, N and system: the ping's median RTT idle (before the load)
and loaded (from SETTLE_S into the load to a second before its end), the
loaded p90, and the wait (loaded - idle) as a part of the buffer: the
figure `STANDING_QUEUE` holds; and the part of the pings sent in the
loaded phase that got no reply, over all the runs (what the full buffer
drops of what crosses it: `StandingQueue.drops`; `loaded_losses`).
Medians over the runs of each run's figure, [min, max] over runs.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "bench"))
sys.path.insert(2, str(ROOT / "tests"))
from fidelity_bench import (  # noqa: E402
    GUEST_ENV,
    SYSTEMS,
    bench_main,
    bench_options,
    run_collapsar,
    run_reference,
    systems_list,
)
from flows_bench import p90, ping_phases  # noqa: E402

from collapsar.errors import CollapsarError  # noqa: E402

DEFAULT_OUT = ROOT / "artifacts" / "queue"
PING_INTERVAL_S = 0.1
PING_START_S = 2.0
LOAD_START_S, LOAD_S = 8.0, 20.0
SETTLE_S = 4.0  # left out of the loaded phase at its start (slow start's overshoot)
BUFFER_MS = 44.3  # the reference's sw1 -> sw2 queue: 36 frames of 1538 bytes at 10 Mbit/s
CONTROLS = ("reno", "cubic", "bbr")


def scenario(control: str, flows: int) -> str:
    end = LOAD_START_S + LOAD_S + 2
    count = int((end - PING_START_S) / PING_INTERVAL_S)
    ping = f"sleep {PING_START_S:g}; exec ping -D -n -i {PING_INTERVAL_S} -c {count} srv"
    lines = [
        f"experiment: {{name: queue-bench, congestion-control: {control}}}",
        "services:",
        f"  srv: {{command: [sleep, '{end + 2:g}']}}",
        f"  pinger: {{command: [sh, -c, {ping!r}]}}",
    ]
    for k in range(1, flows + 1):
        lines.append(f"  sink{k}: {{command: [iperf3, -s, -1]}}")
        lines.append(
            f'  bulk{k}: {{command: [sh, -c, "sleep {LOAD_START_S:g}; exec iperf3 -c sink{k} -t {LOAD_S:g}"]}}'
        )
    lines += ["bridges: [sw1, sw2]", "links:", "  - {from: sw1, to: sw2, latency: 20ms, bandwidth: 10Mbps}"]
    for node, switch in [("pinger", "sw1"), ("srv", "sw2")] + [
        (f"{kind}{k}", sw) for k in range(1, flows + 1) for kind, sw in (("bulk", "sw1"), ("sink", "sw2"))
    ]:
        lines.append(f"  - {{from: {node}, to: {switch}, latency: 1ms, bandwidth: 100Mbps}}")
    return "\n".join(lines) + "\n"


def pings(text: str) -> dict[str, list[float]]:
    """The pinger's RTTs (ms) idle and loaded (from SETTLE_S into the load to
    a second before its end)."""
    loaded = (LOAD_START_S + SETTLE_S, LOAD_START_S + LOAD_S - 1)
    out = ping_phases(text, "pinger", PING_START_S, LOAD_START_S - 0.5, loaded)
    if not out["idle"] or not out["loaded"]:
        raise CollapsarError(f"pinger: {len(out['idle'])} idle and {len(out['loaded'])} loaded replies")
    return out


SEQ_LINE = re.compile(r"^\[(\d+\.\d+)\] .* icmp_seq=(\d+) .* time=([0-9.]+) ms")


def loaded_losses(text: str) -> dict[str, int]:
    """The pings sent in the loaded phase and those of them with no reply:
    by sequence number, each reply placed at its send time (its `-D` time
    less its RTT; the first sent PING_START_S after t=0), so that neither
    the loaded RTTs nor a late pinger move a ping across the phase's edges."""
    rows = [(float(m[1]) - float(m[3]) / 1000, int(m[2])) for m in map(SEQ_LINE.match, text.splitlines()) if m]
    if not rows:
        raise CollapsarError("pinger: no ping replies")
    first = rows[0][0]
    inside = [
        seq for sent, seq in rows if LOAD_START_S + SETTLE_S <= PING_START_S + sent - first < LOAD_START_S + LOAD_S - 1
    ]
    if not inside:
        raise CollapsarError("pinger: no reply to a ping sent in the loaded phase")
    sent = max(inside) - min(inside) + 1
    return {"sent": sent, "lost": sent - len(set(inside))}


def measure(args) -> int:
    from collapsar.tcal import check_kernel

    check_kernel(need_netem=True)
    args.out.mkdir(parents=True, exist_ok=True)
    raw: dict = {"runs": []}
    for number in range(args.repeat):
        for control in args.controls:
            for flows in args.flows:
                file = args.out / f"{control}-{flows}.yaml"
                file.write_text(scenario(control, flows))
                for system in args.systems:
                    started = time.monotonic()
                    where = args.out / f"{system}-{control}-{flows}-{number + 1}"
                    logs = (run_collapsar if system == "collapsar" else run_reference)(file, where)
                    pinger = (logs / "pinger.out").read_text()
                    run = {
                        "system": system,
                        "control": control,
                        "flows": flows,
                        "run": number + 1,
                        "took_s": time.monotonic() - started,
                        "pings": pings(pinger),
                        "loaded_pings": loaded_losses(pinger),
                    }
                    raw["runs"].append(run)
                    print(f"{system} {control} x{flows} run {number + 1}: {run['took_s']:.0f} s", flush=True)
                    (args.out / "raw.json").write_text(json.dumps(raw, indent=1))
    return 0


def summarise(raw: dict) -> str:
    lines = [
        "ping RTT across the full link, ms: median over runs of each run's figure [min, max]; "
        f"wait = loaded - idle, and as a part of the reference's {BUFFER_MS} ms buffer",
        f"{'control x flows':>16} {'system':>9} | {'idle':>6} | {'loaded':>22} | {'p90':>6} | "
        f"{'wait':>6} | {'part':>5} | {'lost':>5}",
    ]
    keys = sorted({(r["control"], r["flows"]) for r in raw["runs"]}, key=lambda k: (CONTROLS.index(k[0]), k[1]))
    for control, flows in keys:
        for system in SYSTEMS:
            runs = [r for r in raw["runs"] if (r["system"], r["control"], r["flows"]) == (system, control, flows)]
            if not runs:
                continue
            idle = [statistics.median(r["pings"]["idle"]) for r in runs]
            loaded = [statistics.median(r["pings"]["loaded"]) for r in runs]
            p90s = [p90(r["pings"]["loaded"]) for r in runs]
            wait = [b - a for a, b in zip(idle, loaded)]
            counted = [r["loaded_pings"] for r in runs if "loaded_pings" in r]
            sent = sum(c["sent"] for c in counted)
            lost = f"{sum(c['lost'] for c in counted) / sent:5.1%}" if sent else "    -"
            lines.append(
                f"{control + ' x ' + str(flows):>16} {system:>9} | {statistics.median(idle):6.1f} | "
                f"{statistics.median(loaded):6.1f} [{min(loaded):6.1f}, {max(loaded):6.1f}] | "
                f"{statistics.median(p90s):6.1f} | {statistics.median(wait):6.1f} | "
                f"{statistics.median(wait) / BUFFER_MS:5.2f} | {lost}"
            )
    took = {s: sum(r["took_s"] for r in raw["runs"] if r["system"] == s) for s in SYSTEMS}
    lines.append("run time: " + ", ".join(f"{s} {t:.0f} s" for s, t in took.items() if t))
    return "\n".join(lines)


def in_vm(args) -> int:
    from collapsar.vm import run_in_vm

    args.out.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, str(Path(__file__).resolve()), "--measure-only", "--repeat", str(args.repeat)]
    argv += ["--systems", ",".join(args.systems), "--controls", ",".join(args.controls)]
    argv += ["--flows", ",".join(map(str, args.flows)), "--out", str(args.out.resolve())]
    runs = args.repeat * len(args.systems) * len(args.controls) * len(args.flows)
    return run_in_vm(argv, [args.out], 600 + runs * 150, env=GUEST_ENV, cwd=str(ROOT))


def _controls(text: str) -> tuple[str, ...]:
    names = tuple(t for t in text.split(",") if t)
    unknown = [n for n in names if n not in CONTROLS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"expected some of {','.join(CONTROLS)}, got {text!r}")
    return names


def _counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(t) for t in text.split(","))
    except ValueError:
        counts = ()
    if not counts or any(not 1 <= c <= 8 for c in counts):
        raise argparse.ArgumentTypeError(f"expected flow counts from 1 to 8, comma-separated, got {text!r}")
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--controls", type=_controls, default=CONTROLS, help="default: reno,cubic,bbr")
    parser.add_argument("--flows", type=_counts, default=(1, 4), help="bulk flows at once (default: 1,4)")
    parser.add_argument("--systems", type=systems_list, default=SYSTEMS, help="default: collapsar,reference")
    bench_options(parser, DEFAULT_OUT)
    args = parser.parse_args(argv)
    return bench_main(args, "queue_bench", in_vm, measure, lambda raw: (summarise(raw), {}))


if __name__ == "__main__":
    sys.exit(main())
