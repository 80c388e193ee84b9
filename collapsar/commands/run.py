"""`collapsar run FILE`: emulate an experiment on this host (local mode).

Makes one network namespace per instance joined by a bridge, shapes every
path at the sender's egress through the TCAL, starts each service's command
in its namespace, plays the timeline and tears everything down at the end
(see collapsar.manager.local.run for the order of things).

- netem is used only if some path, at t=0 or after any event, has delay,
  jitter or loss; a bandwidth-only experiment runs on htb with fifo leaves,
  so it also runs on kernels without sch_netem.  Where netem is needed and
  missing, the run stops before creating anything and names both fixes.
- Names: every namespace gets /etc/netns/NAME/hosts listing all instances;
  commands start through `ip netns exec`, which binds it over /etc/hosts.
- The run directory (default /run/collapsar/RUNID) holds plan.json, logs/
  (stdout and stderr per instance), events.json (scheduled, applied and
  lateness per timeline step), instances.json, flows.json and the journal.
- `--probe N` pings every pair N times before t=0 (after shaping, before
  any command) and prints measured RTT, jitter and loss next to the
  configured values; the run's end prints measured throughput per pair.
- `--dry-run` prints the tc plan and changes nothing.
- Programs: each command's argv[0] must be found as its instances will
  look for it (collapsar.manager.programs: this host's PATH, then the built
  wl-node and wl-client in workload-node/build); otherwise the run stops
  with `FILE:LINE: service X: program ...` (exit 2) before anything exists.
- Exit status: 0 when the run went to its end; 6 when some instance's
  command exited with an error or could not start without the timeline or
  the run's end stopping it (a leave's or crash's signal, or the SIGTERM at
  teardown): one line per such instance with its exit code and the last
  lines of its log (collapsar.manager.local.outputs).  2 bad input, 3 a missing
  kernel feature or privilege, 4 the kernel refused a change, 5 the run
  could not go on.
- Workload: every instance writes its traces to RUNDIR/workload/
  (COLLAPSAR_TRACE_DIR); at the end each wl-client's summary is printed
  next to the network share its chain should see, and written to
  RUNDIR/workload.json (collapsar.manager.measure.workload).
- Control (collapsar.manager.status.control): the run prints a random token
  (`control token: ...`, also RUNDIR/control-token, 0600) that POST
  /control/stop, /control/start (with `--wait-start`: network and t=0
  shaping are set up, commands and timeline wait) and /control/link (an
  ad-hoc link change, checked like a `set` event) require.  `--dashboard`
  serves the web page from the status API at /dashboard/.
- `--repeat N` and `--sweep PATH=V1,V2,...` make a set of runs, aggregated
  at the end (collapsar.commands.runset).
- `--vm` runs this same command inside a throwaway VM with Debian's stock
  kernel (which has sch_netem) through collapsar.vm; the run directory base
  is shared back.  Cost: about a minute to boot under software emulation
  (KVM does not work on this project's hosts), and shaping runs on emulated
  CPUs, so rates above ~100 Mbit/s are not trustworthy there.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from collapsar.commands.runopts import add_run_options, run_options
from collapsar.manager.run.options import ACTIVE_TREE_FROM, TREES

VM_BOOT_ALLOWANCE_S = 600  # qemu without KVM boots in about a minute; leave room


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="Experiment file (YAML)")
    add_run_options(
        parser,
        status_port=0,
        duration_help="Stop after this long from t=0 (e.g. 30s); default: when every command has exited, or on Ctrl-C",
    )
    parser.add_argument("--subnet", default="10.77.0.0/16", help="IPv4 subnet for instance addresses")
    parser.add_argument(
        "--run-dir", metavar="DIR", default=None, help="Put the run directory under DIR instead of /run/collapsar"
    )
    parser.add_argument("--dry-run", action="store_true", help="Print the per-instance tc plan and change nothing")
    parser.add_argument(
        "--vm",
        action="store_true",
        help="Run inside a throwaway VM with Debian's stock kernel (has sch_netem; about a minute to boot without KVM)",
    )
    parser.add_argument(
        "--probe",
        type=int,
        default=0,
        metavar="N",
        help="Before t=0, ping every pair N times and print the measured RTT, "
        "jitter and loss next to the configured ones (probe.json)",
    )
    parser.add_argument(
        "--probe-every",
        metavar="INTERVAL",
        help="From t=0 to the end, ping the probed pairs (as --probe) every INTERVAL (e.g. 200ms; 10ms to 60s) "
        "and write their RTT per second to series/rtt.csv; one ping process per pair, off by default",
    )
    parser.add_argument(
        "--wait-start",
        action="store_true",
        help="Set up the network and t=0 shaping, then wait for POST /control/start "
        "(or the dashboard's start button) before commands and timeline run",
    )
    parser.add_argument(
        "--dashboard", action="store_true", help="Also serve the web dashboard from the status API (/dashboard/)"
    )
    parser.add_argument(
        "--keep-awake",
        choices=("auto", "on", "off"),
        default="auto",
        help="Run an idle-priority busy process on each CPU during the run, so no CPU "
        "halts: a virtual machine's halted CPU can wake milliseconds late, and "
        "timeline steps and shaping wait on timers (auto: on a virtual machine)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="Run the experiment N times, one run after the other, and aggregate the runs' figures "
        "(means, spread, 95%% confidence intervals) in a set directory (collapsar report draws it)",
    )
    parser.add_argument(
        "--sweep",
        metavar="PATH=V1,V2,...",
        help="Run once (or --repeat N times) for each value of one property, e.g. "
        "'links[sw,core].latency=10ms,20ms,40ms'; PATH: keys, list indices or links[A,B], dot-separated",
    )
    parser.add_argument(
        "--tree",
        choices=TREES,
        default="auto",
        help="Each instance's tc tree: 'full' makes a class per destination at t=0; 'active' "
        "makes one per distinct path and gives a destination its own class the period after "
        "its first bytes (needs the eBPF counters; the kernel's cost per class grows with every "
        f"class on the host); auto: active from {ACTIVE_TREE_FROM} instances (docs/scale.md)",
    )


PROBE_EVERY_US = (10_000, 60_000_000)  # the interval --probe-every takes


def _probe_every_us(text: str | None) -> int:
    """--probe-every's interval in us (0: off), or one line saying what it takes."""
    from collapsar.errors import CollapsarError
    from collapsar.units import parse_duration_us

    if text is None:
        return 0
    try:
        us = parse_duration_us(text)
    except CollapsarError as error:
        raise CollapsarError(f"--probe-every {text}: {error}") from None
    low, high = PROBE_EVERY_US
    if not low <= us <= high:
        raise CollapsarError(f"--probe-every {text}: expected an interval from 10ms to 60s")
    return us


def run(args: argparse.Namespace) -> int:
    from collapsar.errors import CollapsarError

    shared = run_options(args)  # checked before anything else
    if not 0 <= args.probe <= 10_000:
        raise CollapsarError(f"--probe {args.probe}: expected a number of pings from 0 to 10000")
    probe_every_us = _probe_every_us(args.probe_every)
    sweep = _check_set_options(args)
    from collapsar.manager.programs import require_programs
    from collapsar.parser import parse_file
    from collapsar.timeline import build_timeline

    if args.repeat > 1 or sweep is not None:
        from collapsar.commands import runset

        # Every variant before anything is created: a bad value stops the set before its first run.
        def check(experiment) -> None:
            require_programs(experiment)
            if args.no_sharing:
                require_sharing_off_allowed(experiment)

        made = runset.variants(args.file, sweep, check)
    else:
        experiment = parse_file(args.file)
        if args.no_sharing:
            require_sharing_off_allowed(experiment)
        timeline = build_timeline(experiment)
        # Before anything is created (a VM boot included): an instance whose
        # program is missing would only fail once the network is up.
        require_programs(experiment)
    if args.vm:
        return _run_in_vm(args)
    if args.dry_run:
        from collapsar.manager.dryrun import describe_run

        for line in describe_run(experiment, timeline, args.subnet):
            print(line)
        return 0
    if os.geteuid() != 0:
        from collapsar.errors import EnvironmentProblem

        raise EnvironmentProblem(
            "collapsar run needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN for namespaces and traffic control)",
            "run it as root, e.g. with sudo",
        )
    from collapsar.manager.local.run import LocalOptions, LocalRun

    dashboard = _dashboard_assets(args)

    def options_for(run_base: Path | None, source_text: str | None = None) -> LocalOptions:
        return LocalOptions(
            **shared,
            subnet=args.subnet,
            run_base=run_base,
            probe_count=args.probe,
            probe_every_us=probe_every_us,
            wait_start=args.wait_start,
            dashboard=dashboard,
            keep_awake=args.keep_awake,
            tree=args.tree,
            source_text=source_text,
        )

    base = Path(args.run_dir).resolve() if args.run_dir else None
    if args.repeat > 1 or sweep is not None:
        return runset.run_set(args.file, args.repeat, sweep, made, base, options_for)
    return LocalRun(experiment, timeline, options_for(base)).run()


def require_sharing_off_allowed(experiment) -> None:
    """Background traffic acts only through the sharing loop: --no-sharing would drop it."""
    from collapsar.errors import CollapsarError

    found = experiment.background_link()
    if found is not None:
        where, label = found
        place = f"{where.file}:{where.line}" if where is not None else experiment.source
        raise CollapsarError(
            f"{place}: {label}: background traffic takes its share through the sharing loop, "
            "which --no-sharing turns off; run without --no-sharing"
        )


def _check_set_options(args: argparse.Namespace):
    """--repeat and --sweep, checked; the sweep (or None)."""
    from collapsar.errors import CollapsarError
    from collapsar.sweep import parse_sweep

    if not 1 <= args.repeat <= 1000:
        raise CollapsarError(f"--repeat {args.repeat}: expected a number of runs from 1 to 1000")
    sweep = parse_sweep(args.sweep) if args.sweep is not None else None
    if args.repeat > 1 or sweep is not None:
        flag = "--repeat" if args.repeat > 1 else "--sweep"
        for other, on in (("--vm", args.vm), ("--dry-run", args.dry_run), ("--wait-start", args.wait_start)):
            if on:
                raise CollapsarError(f"{flag} cannot be combined with {other}")
    return sweep


def _dashboard_assets(args: argparse.Namespace) -> Path | None:
    """The built page, checked (like the flags that need the status API)
    before anything is created."""
    if args.status_port < 0 and (args.dashboard or args.wait_start):
        from collapsar.errors import CollapsarError

        flag = "--dashboard" if args.dashboard else "--wait-start"
        raise CollapsarError(f"{flag} needs the status API (POST /control/start, the page); drop --status-port -1")
    if not args.dashboard:
        return None
    from collapsar.dashboard import assets_dir

    return assets_dir()


def _run_in_vm(args: argparse.Namespace) -> int:
    """Re-run this very command (without --vm) in the VM; the run directory
    base is shared back, so logs and the event log land on the host."""
    from collapsar.units import parse_duration_us
    from collapsar.vm import run_in_vm

    base = Path(args.run_dir).resolve() if args.run_dir else Path(tempfile.mkdtemp(prefix="collapsar-vm-"))
    base.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "collapsar.cli",
        "run",
        str(Path(args.file).resolve()),
        "--subnet",
        args.subnet,
        "--run-dir",
        str(base),
        "--status-port",
        str(args.status_port),
        "--grace",
        args.grace,
        "--probe",
        str(args.probe),
        *(["--probe-every", args.probe_every] if args.probe_every else []),
        "--keep-awake",
        args.keep_awake,
        "--tree",
        args.tree,
    ]
    if args.duration:
        argv += ["--duration", args.duration]
    if args.dry_run:
        argv.append("--dry-run")
    if args.no_sharing:
        argv.append("--no-sharing")
    argv += [flag for flag, on in (("--wait-start", args.wait_start), ("--dashboard", args.dashboard)) if on]
    timeout_s = VM_BOOT_ALLOWANCE_S + (parse_duration_us(args.duration) / 1e6 if args.duration else 3600)
    # The guest does not inherit our environment: pass on what selects code and state.
    env = {name: value for name, value in os.environ.items() if name == "PYTHONPATH" or name.startswith("COLLAPSAR_")}
    print(
        f"running in a VM (stock kernel, software emulation: about a minute to boot); run directory under {base}",
        flush=True,
    )
    return run_in_vm(argv, [base], timeout_s, env, log=lambda line: print(line, flush=True))
