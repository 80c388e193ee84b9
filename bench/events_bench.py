"""Event lateness of local mode: how long after its time each timeline step
is in force, and where that time goes.

Each run plays a topology of 12 instances (an iperf3 flow across two
switches, so the sharing loop works throughout, and ten idle services) with
a step every 200 ms for 8 s: crashes and joins, leaves, disconnects and
reconnects, link property changes on the shared uplink (a path change in
every namespace), a link leaving and coming back, and a partition.  From the
run's events.json it takes, per step:
  lateness  applied - scheduled (the issue's figure: p99 under 5 ms)
  wake      started - scheduled (the firing thread reaching the deadline)
  apply     applied - started (signals and every namespace's netlink batch)
  prepare   prepared - scheduled (negative: how long before its time the
            step's Python work was done; its max is the closest call)
  host_p99, host_max  how late this host woke a real-time thread during the
            run (cyclictest, tests/host_timing.py): the floor under the rest
`--hogs K` runs K busy processes at normal priority during the runs, to see
the figures with both CPUs saturated.  Reports medians over --repeat runs of
each run's p50/p99/max.  Needs root; bandwidth-only, so no sch_netem needed.

    python bench/events_bench.py --repeat 5
    python bench/events_bench.py --repeat 5 --hogs 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from host_timing import HostTimer  # noqa: E402

from collapsar.manager.play.scheduler import percentile  # noqa: E402

CLI = [sys.executable, "-m", "collapsar.cli"]
IDLE = [f"p{i}" for i in range(1, 9)]


def topology(extra: int = 0) -> str:
    """The bench's 12 instances, plus `extra` idle ones half on each switch
    (--extra 388: 400 instances, every bottleneck change a path change in
    each of them)."""
    lines = [
        "experiment: {name: events-bench}",
        "services:",
        "  srv: {command: [iperf3, -s, -1, -p, '5201']}",
        "  cli: {command: [sh, -c, 'sleep 0.3; iperf3 -c srv -p 5201 -t 9 > /dev/null']}",
        "  late: {command: [sleep, '60'], replicas: 0}",
        "  spare: {command: [sleep, '60']}",
    ]
    lines += [f"  {p}: {{command: [sleep, '60']}}" for p in IDLE]
    lines += [f"  x{i}: {{command: [sleep, '600']}}" for i in range(extra)]
    lines += [
        "bridges: [sw1, sw2]",
        "links:",
        "  - {from: sw1, to: sw2, bandwidth: 200Mbps}",
        "  - {from: cli, to: sw1, bandwidth: 100Mbps}",
        "  - {from: srv, to: sw2, bandwidth: 100Mbps}",
        "  - {from: late, to: sw1, bandwidth: 100Mbps}",
        "  - {from: spare, to: sw2, bandwidth: 100Mbps}",
    ]
    lines += [f"  - {{from: {p}, to: {'sw1' if i % 2 else 'sw2'}, bandwidth: 100Mbps}}" for i, p in enumerate(IDLE)]
    lines += [f"  - {{from: x{i}, to: {'sw1' if i % 2 else 'sw2'}, bandwidth: 100Mbps}}" for i in range(extra)]
    lines.append("events:")
    events = []
    t = 1000
    for i in range(4):
        a, b = IDLE[2 * i], IDLE[2 * i + 1]
        events += [
            f"{{at: {t}ms, link: [sw1, sw2], set: {{bandwidth: {150 - 20 * i}Mbps}}}}",
            f"{{at: {t + 200}ms, service: {a}, action: disconnect}}",
            f"{{at: {t + 400}ms, service: {a}, action: reconnect}}",
            f"{{at: {t + 600}ms, link: [{b}, {'sw1' if (2 * i + 1) % 2 else 'sw2'}], set: "
            f"{{bandwidth: {50 + 10 * i}Mbps}}}}",
            f"{{at: {t + 800}ms, partition: [[{a}], [srv, cli]], until: {t + 1400}ms}}",
        ]
        t += 1600
    events += [
        "{at: 1100ms, service: late, action: join, amount: 1}",
        "{at: 2300ms, service: spare, action: crash}",
        "{at: 3500ms, service: late, action: leave}",
        "{at: 4700ms, service: spare, action: join}",
        "{at: 5900ms, link: [late, sw1], action: leave}",
        "{at: 7100ms, link: [late, sw1], action: join}",
    ]
    lines += [f"  - {e}" for e in events]
    return "\n".join(lines) + "\n"


def one_run(workdir: Path, keep_awake: str, extra: int = 0) -> dict[str, list[int]]:
    path = workdir / "events.yaml"
    path.write_text(topology(extra))
    with HostTimer() as timer:
        proc = subprocess.run(
            [
                *CLI,
                "run",
                str(path),
                "--duration",
                "10s",
                "--subnet",
                "10.79.0.0/24" if extra < 240 else "10.79.0.0/21",
                "--run-dir",
                str(workdir / "runs"),
                "--grace",
                "0.5s",
                "--status-port",
                "-1",
                "--keep-awake",
                keep_awake,
            ],
            capture_output=True,
            text=True,
            timeout=120 + extra,
        )
    if proc.returncode != 0:
        raise SystemExit(f"collapsar run failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    run_id = proc.stdout.split(":", 1)[0].split()[1]
    log = json.loads((workdir / "runs" / run_id / "events.json").read_text())
    bad = [e for e in log if e["error"]]
    if bad:
        raise SystemExit(f"a step failed: {bad[0]}")
    figures = {
        "lateness": [e["lateness_us"] for e in log],
        "wake": [e["started_us"] - e["scheduled_us"] for e in log],
        "apply": [e["applied_us"] - e["started_us"] for e in log],
        "host_p99": [timer.result.p99_us],
        "host_max": [timer.result.max_us],
    }
    if all(e.get("prepared_us") is not None for e in log):  # runs before prepared steps had none
        # Negative: prepared ahead by that much (min: the closest call).
        figures["prepare"] = [e["prepared_us"] - e["scheduled_us"] for e in log]
    worst = sorted(log, key=lambda e: e["lateness_us"], reverse=True)[:3]
    print(
        "  latest steps: "
        + "; ".join(
            f"{e['label']} at {e['scheduled_us'] / 1e6:g}s {e['lateness_us'] / 1000:.1f} ms "
            f"(apply {(e['applied_us'] - e['started_us']) / 1000:.1f} ms)"
            for e in worst
        ),
        file=sys.stderr,
    )
    return figures


def summary(runs: list[dict[str, list[int]]]) -> dict:
    out = {"runs": len(runs), "steps_per_run": len(runs[0]["lateness"])}
    for key in [k for k in ("lateness", "wake", "apply", "prepare", "host_p99", "host_max") if k in runs[0]]:
        for name, fraction in (("p50", 0.5), ("p99", 0.99), ("max", 1.0)):
            out[f"{key}_{name}_us"] = statistics.median(percentile(r[key], fraction) for r in runs)
    out["lateness_max_of_all_us"] = max(max(r["lateness"]) for r in runs)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--hogs", type=int, default=0, help="busy processes to run meanwhile")
    parser.add_argument("--keep-awake", choices=("auto", "on", "off"), default="auto", help="passed to collapsar run")
    parser.add_argument("--extra", type=int, default=0, help="idle instances added (388: 400 in all)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.repeat < 1 or args.hogs < 0:
        parser.error("--repeat must be at least 1 and --hogs at least 0")
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
    try:
        with tempfile.TemporaryDirectory(prefix="cx-events-bench-") as tmp:
            runs = [one_run(Path(tmp), args.keep_awake, args.extra) for _ in range(args.repeat)]
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    result = summary(runs)
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"{result['runs']} runs of {result['steps_per_run']} steps, {args.hogs} busy processes; "
        "medians over runs of each run's p50 / p99 / max (us):"
    )
    for key in [k for k in ("lateness", "wake", "apply", "prepare", "host_p99", "host_max") if f"{k}_p50_us" in result]:
        print(
            f"  {key:9s} {result[f'{key}_p50_us']:8.0f} {result[f'{key}_p99_us']:8.0f} {result[f'{key}_max_us']:8.0f}"
        )
    print(f"  worst lateness of all runs: {result['lateness_max_of_all_us']} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
