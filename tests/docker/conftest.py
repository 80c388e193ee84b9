"""Docker tier: a real Docker engine (Debian's docker.io, deps/apt-docker.txt).

Fixtures (module scope: the tier has one test module, and a dockerd this
tier starts must not outlive it while the other tiers run): `engine` uses
the running daemon or starts dockerd (and stops it after if it started it); `images` builds Collapsar's images
with `make -C docker images` (cached: seconds when nothing changed);
`swarm` initialises a single-node swarm on loopback when this engine is not
in one, and leaves it at the end.  COLLAPSAR_SKIP_DOCKER=1 skips the tier.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest
from dockerlib import ROOT, docker, log

DOCKERD_LOG = "/tmp/collapsar-test-dockerd.log"


@pytest.fixture(autouse=True, scope="session")
def _need_root():
    if os.geteuid() != 0:
        pytest.fail(
            "tests/docker needs root (nsenter into containers, dockerd); run as root or set COLLAPSAR_SKIP_DOCKER=1"
        )


def _daemon_up() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode == 0


@pytest.fixture(scope="module")
def engine():
    if shutil.which("dockerd") is None or shutil.which("docker") is None:
        pytest.fail(
            "no Docker engine: apt-get install docker.io (deps/apt-docker.txt, "
            "installed by `scripts/setup.sh test`), or set COLLAPSAR_SKIP_DOCKER=1"
        )
    started = None
    if not _daemon_up():
        logfile = open(DOCKERD_LOG, "w")
        started = subprocess.Popen(["dockerd"], stdout=logfile, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while not _daemon_up():
            if started.poll() is not None or time.monotonic() > deadline:
                started.kill()
                tail = open(DOCKERD_LOG).read()[-800:]
                pytest.fail(
                    f"dockerd did not start (log {DOCKERD_LOG}):\n{tail}\nfix: make sure no other "
                    f"dockerd/containerd owns /var/run/docker.sock and the kernel has overlayfs, "
                    f"veth, bridge and iptables"
                )
            time.sleep(0.5)
        log(f"started dockerd (pid {started.pid}) for this tier")
    yield
    if started is not None:
        started.terminate()
        try:
            started.wait(timeout=30)
        except subprocess.TimeoutExpired:
            started.kill()
        log("stopped the dockerd this tier started")


@pytest.fixture(scope="module")
def images(engine):
    began = time.monotonic()
    done = subprocess.run(
        ["make", "-s", "-C", str(ROOT / "docker"), "images"], capture_output=True, text=True, timeout=900
    )
    if done.returncode != 0:
        pytest.fail(f"make -C docker images failed:\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}")
    log(f"images built in {time.monotonic() - began:.1f} s")
    return True


@pytest.fixture(scope="module")
def swarm(engine):
    state = docker("info", "-f", "{{.Swarm.LocalNodeState}}").strip()
    joined_here = False
    if state != "active":
        # Loopback only: a single-node swarm needs no other address, and no
        # traffic of this test leaves the machine.
        docker("swarm", "init", "--advertise-addr", "127.0.0.1", "--listen-addr", "127.0.0.1:2377")
        joined_here = True
    yield
    if joined_here:
        docker("swarm", "leave", "--force")


@pytest.fixture(scope="session")
def netem_note():
    from collapsar.errors import EnvironmentProblem
    from collapsar.tcal import check_kernel

    try:
        check_kernel(need_netem=True)
        return True
    except EnvironmentProblem:
        log(
            "this kernel has no sch_netem: container mode is checked with a rate-only topology "
            "(htb classes per destination); delay, jitter and loss are not checked here"
        )
        return False


def pytest_terminal_summary(terminalreporter):
    from dockerlib import NOTES

    if NOTES:
        terminalreporter.section("docker tier notes")
        for line in NOTES:
            terminalreporter.write_line(line)
