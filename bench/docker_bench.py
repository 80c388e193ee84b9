"""Docker Swarm benchmark: time from `docker stack deploy` to every instance
shaped, for N services, and the sizes of Collapsar's images.

Each case writes a star topology of N one-replica services (idle iperf3
servers; bandwidth-only links, so it runs without sch_netem), generates its
stack file, deploys it under a fresh stack name, and polls the manager's
status API until every instance is shaped (htb tree installed inside its
container).  Then `docker stack rm`, and waits until every container and the
experiment network are gone before the next run.  Needs root, a running
dockerd in an active swarm (`docker swarm init --advertise-addr 127.0.0.1`)
and the images (`make -C docker images`).  Reports medians of --repeat runs
and the load average; `--json` for scripts.

    python bench/docker_bench.py --sizes 10 50 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

CLI = [sys.executable, "-m", "collapsar.cli"]
STATUS = "http://127.0.0.1:7077/status"


def topology(n: int) -> str:
    lines = ["experiment: {name: dockerbench}", "services:"]
    lines += [f"  s{i}: {{command: [iperf3, --server]}}" for i in range(n)]
    lines += ["bridges: [hub]", "links:"]
    lines += [f"  - {{from: s{i}, to: hub, bandwidth: {10 + i}Mbps}}" for i in range(n)]
    return "\n".join(lines) + "\n"


def sh(*argv: str, timeout: float = 600) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"docker_bench: {' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def shaped(experiment: str, n: int) -> bool:
    try:
        with urllib.request.urlopen(STATUS, timeout=2) as reply:
            snapshot = json.load(reply)
    except OSError:
        return False
    return snapshot.get("run_id") == experiment and sum(i["shaped"] for i in snapshot["instances"]) == n


def wait(what: str, predicate, timeout_s: float) -> float:
    began = time.monotonic()
    while not predicate():
        if time.monotonic() - began > timeout_s:
            raise SystemExit(f"docker_bench: timed out waiting for {what}")
        time.sleep(0.1)
    return time.monotonic() - began


def gone(experiment: str) -> bool:
    label = f"label=org.collapsar.experiment={experiment}"
    return not (
        sh("docker", "ps", "-aq", "--filter", label).split()
        or sh("docker", "network", "ls", "-q", "--filter", label).split()
    )


def remove_stack(name: str, experiment: str) -> None:
    """`docker stack rm` removes the network while tasks are still stopping
    (the bootstrapper waits for the manager's teardown) and then fails with
    "network ... is in use"; once the tasks are gone a second rm takes it."""
    subprocess.run(["docker", "stack", "rm", name], capture_output=True, timeout=600)
    label = f"label=org.collapsar.experiment={experiment}"
    wait("the stack's containers to go", lambda: not sh("docker", "ps", "-aq", "--filter", label).split(), 600)
    if sh("docker", "network", "ls", "-q", "--filter", label).split():
        sh("docker", "stack", "rm", name)
    wait("the stack to go", lambda: gone(experiment), 600)


def one_run(n: int, index: int, workdir: Path) -> dict:
    topo = workdir / f"bench{n}.yaml"
    topo.write_text(topology(n))
    stack_file = workdir / f"bench{n}.yml"
    sh(*CLI, "generate", str(topo), "--swarm", "-o", str(stack_file))
    experiment = next(
        line.split()[2].rstrip(":") for line in stack_file.read_text().splitlines() if line.startswith("# experiment ")
    )
    name = f"cxbench{n}r{index}"
    began = time.monotonic()
    sh("docker", "stack", "deploy", "-c", str(stack_file), name)
    try:
        wait(f"{n} instances shaped", lambda: shaped(experiment, n), 600)
        deploy_to_shaped = time.monotonic() - began
    finally:
        removing = time.monotonic()
        remove_stack(name, experiment)
    return {"services": n, "deploy_to_shaped_s": deploy_to_shaped, "removal_s": time.monotonic() - removing}


def image_sizes() -> dict[str, int]:
    out = sh("docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}")
    sizes = {}
    for line in out.splitlines():
        ref, image_id = line.split()
        if ref.startswith("collapsar/"):
            sizes[ref] = int(sh("docker", "image", "inspect", "-f", "{{.Size}}", image_id).strip())
    return sizes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 50])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("docker_bench: needs root")
    results = []
    with tempfile.TemporaryDirectory(prefix="cx-docker-bench-") as tmp:
        # Interleaved: a load spike on this shared machine hits every size alike.
        for index in range(args.repeat):
            for n in args.sizes:
                results.append(one_run(n, index, Path(tmp)))
                if not args.json:
                    print(
                        f"  run {index + 1}: {n} services: shaped {results[-1]['deploy_to_shaped_s']:.1f} s "
                        f"after deploy, removed in {results[-1]['removal_s']:.1f} s",
                        flush=True,
                    )
    summary = {"load_average": os.getloadavg(), "images_bytes": image_sizes(), "cases": {}}
    for n in args.sizes:
        times = [r["deploy_to_shaped_s"] for r in results if r["services"] == n]
        summary["cases"][n] = {"median_deploy_to_shaped_s": statistics.median(times), "runs_s": times}
    if args.json:
        print(json.dumps(summary, indent=1))
        return 0
    for n, case in summary["cases"].items():
        runs = ", ".join(f"{t:.1f}" for t in case["runs_s"])
        print(f"{n} services: deploy -> all shaped, median {case['median_deploy_to_shaped_s']:.1f} s ({runs})")
    for ref, size in sorted(summary["images_bytes"].items()):
        print(f"image {ref}: {size / 1e6:.0f} MB")
    print("load average: " + " ".join(f"{x:.2f}" for x in summary["load_average"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
