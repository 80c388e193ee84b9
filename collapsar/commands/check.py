"""`collapsar check [FILE]`: can this host run experiments (or this one)?

Probes the kernel for real (collapsar.tcal.check: htb, u32, clsact, BTF and,
where asked, netem) in a scratch namespace, and says what is missing with
the fix.  With FILE, netem is required only if the experiment uses delay,
jitter or loss somewhere on its timeline, exactly as `collapsar run` decides;
without FILE, netem is reported but not required.  Exit 0 when the host can
run it, 3 (an environment problem) otherwise, so scripts can choose `--vm`.
With FILE, every command's program must also be found as local mode's
instances look for it (collapsar.manager.programs); one missing is
`FILE:LINE: service X: program ...` and exit 2, as `collapsar run` refuses
it (a VM would not help: it sees this host's files).  Its limits (cpus,
cpuset, cpu-speed, memory) are checked as a run checks them at its start:
the cgroup controllers they need, the CPUs a cpuset names
(collapsar.manager.local.limits); each limited service's are printed, with
the quota its cpu-speed gives.
"""

from __future__ import annotations

import argparse


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", nargs="?", help="Experiment file (YAML) to check for")


def run(args: argparse.Namespace) -> int:
    import os

    from collapsar.errors import EnvironmentProblem
    from collapsar.tcal.check import check_kernel

    if os.geteuid() != 0:
        raise EnvironmentProblem(
            "collapsar check needs root (it creates a scratch network namespace)", "run it as root, e.g. with sudo"
        )
    if args.file is not None:
        from collapsar.manager.core import needs_netem
        from collapsar.manager.experiment import all_instances, timeline_paths
        from collapsar.manager.local.limits import RunGroups, describe_limits
        from collapsar.manager.programs import require_programs
        from collapsar.parser import parse_file
        from collapsar.timeline import build_timeline

        experiment = parse_file(args.file)
        require_programs(experiment)
        timeline = build_timeline(experiment)
        netem = needs_netem(timeline_paths(timeline))
        check_kernel(need_netem=netem)
        # Its limits (cpus, cpuset, cpu-speed, memory) as a run checks them at its start.
        RunGroups.plan(experiment, all_instances(timeline), "000000")
        for service in experiment.services:
            if describe_limits(service):
                print(f"limits of each instance of {service.name}: {describe_limits(service)}")
        what = "delay/jitter/loss (netem) and rates (htb)" if netem else "rates only (htb)"
        print(f"ok: this host can run {args.file} ({what})")
        return 0
    check_kernel(need_netem=False)
    try:
        check_kernel(need_netem=True)
        print("ok: htb, u32, clsact, BTF and netem: every experiment runs here")
    except EnvironmentProblem as problem:
        print("ok: htb, u32, clsact and BTF: rate-only experiments run here")
        for line in problem.lines():
            print(f"missing: {line}")
    return 0
