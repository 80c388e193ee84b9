"""Fidelity: one scenario through Collapsar and through a hop-by-hop reference network, against the sharing model.

    python bench/fidelity_bench.py --vm                      # bench/kollaps-fig8.yaml, one run each
    python bench/fidelity_bench.py --vm --repeat 5 --settle 8s

The scenario's flows are its `iperf3 -c SERVER -t T` clients (each client
service runs one, after an optional `sleep`; its stdout is its JSON report
which, with --get-server-output and servers run with -J, holds the
receiver's intervals); a stage starts when a client joins and
ends at the next join (the last at the last flow's end).  Per stage and
flow:
- model: `collapsar.manager.sharing.model.share` over the flows active in
  that stage, greedy, on Collapsar's collapsed paths (RTT = 2 x delay);
- Collapsar: `collapsar run FILE`, then the receiver's per-second
  intervals from each client's log (RUNDIR/logs/<client>.out);
- reference: tests/reference_net.py (one namespace per instance and
  bridge, a veth per link, htb + netem + a BDP queue per direction), the
  same intervals from its logs.
A flow's rate in a stage is the mean of the server's intervals that lie
in the stage's settled part (from `--settle` after its start to `--guard`
before its end, timed from the client's join plus its `sleep`); raw.json
keeps the per-second series, so `--summarise --settle T --guard T`
re-reads them.  The guard leaves out the last second before the next
flow's start: it holds the next join (its namespace and process start in
the VM's emulated CPU) and, as the flows' times are nominal and processes
start up to a second late there, maybe the next flow's first packets.  A
lone 5 Mbit/s flow got 311-367 of its 406 packets in that second in each
of 5 reference runs, 406 in every other second; Collapsar's in 4 of 5.  With --repeat N each
system runs N times (alternating), and the table shows the mean and the
95% interval (Student t) over the runs.

Delays need sch_netem: `--vm` runs the measuring part in the stock-kernel
VM (collapsar.vm.run_in_vm, one boot for everything) and the summary on
this host (numpy and scipy are slow to import in the emulated CPU).
Measurements go to --out (default artifacts/fidelity/), replacing an
earlier measurement's: raw.json (each run's per-second series per flow),
table.txt, summary.json, and each run's logs in <system>-<run>/.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "tests"))
from collapsar.errors import CollapsarError  # noqa: E402
from collapsar.model import Experiment, ServiceEvent, host_congestion_control, instance_name  # noqa: E402
from collapsar.parser import parse_file  # noqa: E402
from collapsar.units import parse_duration_us  # noqa: E402

DEFAULT_FILE = ROOT / "bench" / "kollaps-fig8.yaml"
DEFAULT_OUT = ROOT / "artifacts" / "fidelity"
SYSTEMS = ("collapsar", "reference")
# A share of a link's rate carries this much TCP goodput (MTU 1500, timestamps):
# 1448 payload bytes per 1538 wire bytes, or per 1514 without wire overhead.
GOODPUT_PER_RATE = {True: 1448 / 1538, False: 1448 / 1514}
GUEST_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}


# ---- the scenario ---------------------------------------------------------------


def flows_of(experiment: Experiment) -> list[dict]:
    """Each iperf3 client: instance, server instance, when its flow starts and ends (s from t=0)."""
    joins = {t: e.at_us / 1e6 for e in experiment.events if isinstance(e, ServiceEvent) for t in e.targets}
    flows = []
    for service in experiment.services:
        text = shlex.join(service.command)
        client = re.search(r"iperf3\s.*?(?:-c|--client)\s+(\S+)", text)
        if not client:
            continue
        seconds = re.search(r"(?:-t|--time)\s+([0-9.]+)", text)
        sleep = re.search(r"sleep\s+([0-9.]+)", text)
        instance = instance_name(service.name, 1)
        start = joins.get(instance, 0.0) + (float(sleep.group(1)) if sleep else 0.0)
        flows.append(
            {
                "client": instance,
                "server": client.group(1),
                "start_s": start,
                "end_s": start + (float(seconds.group(1)) if seconds else 10.0),
            }
        )
    if not flows:
        raise CollapsarError(f"{experiment.source}: no service runs `iperf3 -c SERVER`: nothing to measure")
    return flows


def stages_of(flows: list[dict]) -> list[tuple[float, float]]:
    """[start, end) of each stage: the joins, then the last flow's end."""
    starts = sorted({round(f["start_s"]) for f in flows})
    ends = starts[1:] + [max(f["end_s"] for f in flows)]
    return [(float(a), float(b)) for a, b in zip(starts, ends)]


def active(flows: list[dict], stage: tuple[float, float]) -> list[dict]:
    return [f for f in flows if f["start_s"] <= stage[0] + 1.5 and f["end_s"] >= stage[1] - 1.5]


# ---- measuring (in the VM when --vm) ------------------------------------------------


def server_intervals(report_text: str) -> list[tuple[float, float, float]]:
    """(start, end, bits/s) of the receiver's intervals from a client's iperf3 -J report."""
    report = json.loads(report_text[report_text.index("{") :])
    if "error" in report:
        raise CollapsarError(f"iperf3: {report['error']}")
    if "server_output_json" not in report:
        # What the sender wrote into its socket is not what arrived: refuse it.
        raise CollapsarError(
            "iperf3 report without the server's intervals: run the client with --get-server-output "
            "and the server with -J"
        )
    intervals = report["server_output_json"]["intervals"]
    return [(i["sum"]["start"], i["sum"]["end"], i["sum"]["bits_per_second"]) for i in intervals]


def flow_series(logs: Path, flows: list[dict]) -> dict[str, list[tuple[float, float, float]]]:
    """Each flow's receiver intervals, timed from t=0: (start, end, bits/s)."""
    series = {}
    for flow in flows:
        out = (logs / f"{flow['client']}.out").read_text()
        series[flow["client"]] = [
            (flow["start_s"] + a, flow["start_s"] + b, bps) for a, b, bps in server_intervals(out)
        ]
    return series


def stage_rates(
    series: dict, flows: list[dict], stages, settle_s: float, guard_s: float
) -> dict[str, dict[str, float | None]]:
    """Per stage, each active flow's mean rate over the stage's settled part."""
    rates: dict[str, dict[str, float | None]] = {}
    for k, stage in enumerate(stages):
        rates[str(k)] = {}
        end = stage[1] - guard_s
        for flow in active(flows, stage):
            begin = max(stage[0], flow["start_s"]) + settle_s
            kept = [bps for a, b, bps in series[flow["client"]] if a >= begin - 0.1 and b <= end + 0.1]
            rates[str(k)][flow["client"]] = sum(kept) / len(kept) if kept else None
    return rates


def run_collapsar(file: Path, out: Path) -> Path:
    before = set(out.iterdir()) if out.exists() else set()
    out.mkdir(parents=True, exist_ok=True)
    collapsar = Path(sys.prefix) / "bin" / "collapsar"
    done = subprocess.run([str(collapsar), "run", "--run-dir", str(out), str(file)], capture_output=True, text=True)
    made = [p for p in out.iterdir() if p.is_dir() and p not in before]
    if done.returncode or len(made) != 1:
        raise CollapsarError(f"collapsar run {file} exited {done.returncode}: {done.stderr.strip()[-1500:]}")
    return made[0] / "logs"


def run_reference(file: Path, out: Path) -> Path:
    from reference_net import ReferenceNet

    with ReferenceNet(parse_file(file), log_dir=out) as net:
        codes = net.run()
    failed = {name: code for name, code in codes.items() if code}
    if failed:
        raise CollapsarError(f"reference run of {file}: commands failed: {failed} (logs in {out})")
    return out


def measure(args) -> int:
    from collapsar.tcal import check_kernel

    experiment = parse_file(args.file)
    directions = [props for spec in experiment.links for props in (spec.up, spec.down) if props is not None]
    check_kernel(need_netem=any(props.needs_netem for props in directions))
    flows, stages = flows_of(experiment), stages_of(flows_of(experiment))
    raw: dict = {"file": str(args.file), "flows": flows, "stages": stages, "runs": []}
    # What TCP used where the runs ran (the model weighs flows for it): the
    # experiment's, or the kernel's default that every new namespace starts with.
    raw["congestion_control"] = experiment.settings.congestion_control or host_congestion_control()
    args.out.mkdir(parents=True, exist_ok=True)
    for number in range(args.repeat):
        for system in args.systems:
            started = time.monotonic()
            where = args.out / f"{system}-{number + 1}"
            if where.exists():  # a previous measurement's: its logs would be appended to
                shutil.rmtree(where)
            logs = (run_collapsar if system == "collapsar" else run_reference)(args.file, where)
            took = time.monotonic() - started
            series = flow_series(logs, flows)
            raw["runs"].append({"system": system, "run": number + 1, "took_s": took, "series": series})
            print(f"{system} run {number + 1} of {args.repeat}: {took:.0f} s", flush=True)
            (args.out / "raw.json").write_text(json.dumps(raw, indent=1))
    return 0


# ---- the summary (on the host) ------------------------------------------------------


def model_rates(experiment: Experiment, flows: list[dict], stages, rtt_exponent: float) -> tuple[dict, dict]:
    """Per stage: each active flow's share (weights RTT^-rtt_exponent), and
    each link the model fills (its flows' shares add up to its capacity):
    "a -> b" -> its flows."""
    from reference_plan import with_joiners

    from collapsar.collapse import collapse
    from collapsar.manager.sharing.model import Flow, share

    state = collapse(with_joiners(experiment))
    capacity = {i: link.props.rate_bps for i, link in state.links.items()}
    rates, full = {}, {}
    for k, stage in enumerate(stages):
        wanted = []
        for flow in active(flows, stage):
            path = state.path(flow["client"], flow["server"])
            assert path is not None, f"no path {flow['client']} -> {flow['server']}"
            # Greedy flows; a path without delay counts as 1 us (the model needs an RTT above 0).
            rtt_us = max(path.rtt_hint_us, 1)
            wanted.append(Flow(flow["client"], path.link_ids, rtt_us, path.rate_bps, 10**12))
        rates[str(k)] = dict(share(wanted, capacity, rtt_exponent).rate_bps)
        full[str(k)] = {}
        for link_id in sorted({i for f in wanted for i in f.link_ids}):
            on = [f.flow_id for f in wanted if link_id in f.link_ids]
            cap = capacity[link_id]
            if cap and len(on) > 1 and sum(rates[str(k)][c] or 0 for c in on) >= 0.999 * cap:
                link = state.links[link_id]
                full[str(k)][f"{link.src} -> {link.dst}"] = on
    return rates, full


def summarise(raw: dict, experiment: Experiment, settle_s: float, guard_s: float) -> tuple[str, dict]:
    from collapsar.manager.sharing.model import rtt_exponent
    from collapsar.report.aggregate import stats

    stages = [tuple(s) for s in raw["stages"]]
    control = _control(raw)
    model, full = model_rates(experiment, raw["flows"], stages, rtt_exponent(control))
    goodput = GOODPUT_PER_RATE[experiment.settings.wire_overhead]
    for run in raw["runs"]:
        run["rates"] = stage_rates(run["series"], raw["flows"], stages, settle_s, guard_s)
    lines = [
        f"{raw['file']}: settled part from {settle_s:g} s into each stage to {guard_s:g} s before its end; Mbit/s; "
        f"mean [95% interval] over {sum(r['system'] == 'collapsar' for r in raw['runs'])} run(s); "
        f"err: against the model's share as TCP goodput (x {goodput:.4f}); "
        f"model weights RTT^-{rtt_exponent(control):g} ({control})"
        + (f"; reference runs from {raw['reference_from']}" if raw.get("reference_from") else ""),
        f"{'stage':>5} {'flow':>5} {'model':>7} | {'collapsar':>26} {'err':>6} | {'reference':>26} {'err':>6} | inside",
    ]
    summary: dict = {}
    errors: dict[str, list[float]] = {s: [] for s in SYSTEMS}
    inside = []
    for k in range(len(stages)):
        for client, allowed in model[str(k)].items():
            row = {"model_bps": allowed, "model_goodput_bps": None if allowed is None else allowed * goodput}
            cells = []
            for system in SYSTEMS:
                got = stats(r["rates"][str(k)].get(client) for r in raw["runs"] if r["system"] == system)
                row[system] = got
                if got is None or allowed is None:
                    cells.append(f"{'-':>26} {'-':>6}")
                    continue
                err = got["mean"] / (allowed * goodput) - 1
                errors[system].append(abs(err))
                cells.append(f"{_mean_and_interval(got)} {err:+6.1%}")
            row["inside"] = _inside(row["collapsar"], row["reference"])
            if row["inside"] is not None:
                inside.append(row["inside"])
            summary[f"{k + 1}/{client}"] = row
            model_text = f"{allowed / 1e6:7.3f}" if allowed else "      -"
            mark = {True: "yes", False: "no", None: "-"}[row["inside"]]
            lines.append(f"{k + 1:>5} {client:>5} {model_text} | {cells[0]} | {cells[1]} | {mark}")
    if inside:
        lines.append(f"Collapsar's mean inside the reference's interval: {sum(inside)} of {len(inside)}")
    lines += _utilisation(raw, full, summary)
    for system, errs in errors.items():
        if errs:
            errs.sort()
            lines.append(f"{system}: |err| vs model median {errs[len(errs) // 2]:.1%}, worst {errs[-1]:.1%}")
    took = {s: sum(r["took_s"] for r in raw["runs"] if r["system"] == s) for s in SYSTEMS}
    lines.append("run time: " + ", ".join(f"{s} {t:.0f} s" for s, t in took.items()))
    return "\n".join(lines), summary


def _control(raw: dict) -> str:
    """The congestion control the runs used; measurements from before it
    was recorded ran in the VM, whose kernel defaults to cubic."""
    return raw.get("congestion_control") or "cubic"


def _mean_and_interval(got: dict) -> str:
    """`mean [low, high]` in Mbit/s of a `report.aggregate.stats` result."""
    low, high = got["ci95"] or [got["mean"], got["mean"]]
    return f"{got['mean'] / 1e6:7.3f} [{low / 1e6:7.3f}, {high / 1e6:7.3f}]"


def _inside(collapsar: dict | None, reference: dict | None) -> bool | None:
    if not collapsar or not reference or not reference["ci95"]:
        return None
    low, high = reference["ci95"]
    return low <= collapsar["mean"] <= high


def _utilisation(raw: dict, full: dict, summary: dict) -> list[str]:
    """Per stage, each link the model fills: the total its flows carried (mean
    over runs) in each system, and Collapsar's against the reference's."""
    from collapsar.report.aggregate import stats

    lines = ["bottleneck totals (Mbit/s, mean [95% interval]); collapsar against reference:"]
    for k, links in full.items():
        for name, clients in links.items():
            got = {}
            for system in SYSTEMS:
                totals = []
                for run in raw["runs"]:
                    values = [run["rates"][k].get(c) for c in clients]
                    if run["system"] == system and None not in values:
                        totals.append(sum(values))
                got[system] = stats(totals)
            summary[f"{int(k) + 1}/{name}"] = got
            cells = [_mean_and_interval(g) if g else f"{'-':>25}" for g in got.values()]
            ratio = (
                f"{got['collapsar']['mean'] / got['reference']['mean'] - 1:+6.1%}"
                if got["collapsar"] and got["reference"]
                else ""
            )
            lines.append(f"{int(k) + 1:>5} {name:>12} | {cells[0]} | {cells[1]} | {ratio}")
    return lines if len(lines) > 1 else []


def with_reference_from(raw: dict, folder: Path) -> dict:
    """`raw` with its reference runs replaced by those of folder/raw.json,
    which must have measured the same flows (same scenario)."""
    other_file = folder / "raw.json"
    if not other_file.is_file():
        raise CollapsarError(f"--reference-from {folder}: no raw.json there")
    other = json.loads(other_file.read_text())
    if (other["flows"], other["stages"]) != (raw["flows"], raw["stages"]):
        raise CollapsarError(f"--reference-from {folder}: its runs measured other flows or stages")
    if _control(other) != _control(raw):
        raise CollapsarError(f"--reference-from {folder}: its runs used another congestion control")
    runs = [r for r in raw["runs"] if r["system"] != "reference"] + [
        r for r in other["runs"] if r["system"] == "reference"
    ]
    return {**raw, "runs": runs, "reference_from": str(folder)}


def systems_list(text: str) -> tuple[str, ...]:
    chosen = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [name for name in chosen if name not in SYSTEMS]
    if not chosen or unknown:
        raise argparse.ArgumentTypeError(f"expected some of {', '.join(SYSTEMS)}, got {text!r}")
    return chosen


def write_variant(file: Path, settings: list[str], out: Path) -> Path:
    """The scenario with each PATH=VALUE of `settings` set, as OUT/scenario.yaml
    (checked by the parser before anything runs)."""
    from collapsar.sweep import parse_sweep, variant

    text = file.read_text()
    for setting in settings:
        sweep = parse_sweep(setting)
        if len(sweep.values) != 1:
            raise CollapsarError(f"--set {setting}: expected one value")
        text = variant(text, sweep, sweep.values[0])
    out.mkdir(parents=True, exist_ok=True)
    written = out / "scenario.yaml"
    written.write_text(f"# {file} with {'; '.join(settings)}\n{text}")
    parse_file(written)
    return written


def in_vm(args) -> int:
    from collapsar.vm import run_in_vm

    args.out.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, str(Path(__file__).resolve()), "--measure-only", "--repeat", str(args.repeat)]
    argv += ["--systems", ",".join(args.systems), "--out", str(args.out.resolve()), str(args.file.resolve())]
    budget_s = 600 + args.repeat * len(args.systems) * 400
    return run_in_vm(argv, [args.out], budget_s, env=GUEST_ENV, cwd=str(ROOT))


def bench_options(parser: argparse.ArgumentParser, default_out: Path) -> None:
    """The options a bench of both systems in the VM takes (this one, flows_bench)."""
    parser.add_argument("--repeat", type=int, default=1, help="runs of each system (default: 1)")
    parser.add_argument("--out", type=Path, default=default_out, help="results folder (default: %(default)s)")
    parser.add_argument("--vm", action="store_true", help="measure in the stock-kernel VM (netem)")
    parser.add_argument("--measure-only", action="store_true", help="measure and write raw.json, no summary")
    parser.add_argument("--summarise", action="store_true", help="only summarise the raw.json in --out")


def bench_main(args, name: str, in_vm, measure, summarise) -> int:
    """Measure (in the VM with --vm), then summarise raw.json on this host:
    `summarise(raw)` gives the table and other files to write into --out."""
    if args.repeat < 1:
        print(f"{name}: --repeat must be at least 1", file=sys.stderr)
        return 2
    try:
        started = time.monotonic()
        rc = 0 if args.summarise else in_vm(args) if args.vm else measure(args)
        if rc or args.measure_only:
            return rc
        raw_file = args.out / "raw.json"
        if not raw_file.is_file():
            raise CollapsarError(f"{raw_file}: no measurement to summarise (measure first, without --summarise)")
        table, files = summarise(json.loads(raw_file.read_text()))
        table += f"\nwall time {time.monotonic() - started:.0f} s" + (" (VM boot included)" if args.vm else "")
        (args.out / "table.txt").write_text(table + "\n")
        for file_name, text in files.items():
            (args.out / file_name).write_text(text)
        print(table)
        return 0
    except CollapsarError as error:
        print(f"{name}: {error}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("file", nargs="?", type=Path, default=DEFAULT_FILE, help="scenario (default: %(default)s)")
    parser.add_argument("--settle", default="8s", help="left out at the start of each stage (default: 8s)")
    parser.add_argument("--guard", default="1s", help="left out at the end of each stage (default: 1s)")
    parser.add_argument(
        "--systems",
        type=systems_list,
        default=SYSTEMS,
        help="which to run, comma-separated (default: collapsar,reference)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="run a variant of the scenario with one property set, as `collapsar run --sweep` names it\n"
        "(e.g. experiment.congestion-control=reno); repeatable; the variant is written to OUT/scenario.yaml",
    )
    parser.add_argument(
        "--reference-from",
        type=Path,
        metavar="DIR",
        help="summarise with the reference runs of DIR/raw.json (the same scenario, measured before:\n"
        "Collapsar's runs of OUT set against them; OUT's own reference runs, if any, are left out)",
    )
    bench_options(parser, DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.set and not args.summarise:
        try:
            args.file = write_variant(args.file, args.set, args.out)
        except CollapsarError as error:
            print(f"fidelity_bench: {error}", file=sys.stderr)
            return 2
    elif args.set:
        args.file = args.out / "scenario.yaml"

    def summary_files(raw: dict) -> tuple[str, dict[str, str]]:
        if args.reference_from is not None:
            raw = with_reference_from(raw, args.reference_from)
        table, summary = summarise(
            raw, parse_file(args.file), parse_duration_us(args.settle) / 1e6, parse_duration_us(args.guard) / 1e6
        )
        return table, {"summary.json": json.dumps(summary, indent=1)}

    return bench_main(args, "fidelity_bench", in_vm, measure, summary_files)


if __name__ == "__main__":
    sys.exit(main())
