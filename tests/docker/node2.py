"""A second Docker engine on this machine, to be a second Swarm node.

Node 2 is a dockerd (with the containerd it starts) in a network namespace
of its own, joined to the host by a veth pair, and in a mount namespace of
its own where a private directory is bound over /run and /etc/docker:
containers bind-mount /var/run/docker.sock by path (the bootstrapper does),
so on node 2 that path must be node 2's socket; the host reaches the same
socket through the private directory.  PID and cgroup namespaces stay the
host's: the manager finds a container's network namespace through
/proc/PID/ns/net with the engine's pids, on either node.

Everything is created here with names and addresses of its own and removed
by `stop()` (dockerd by its pid, then the namespace, the veth and the
directories); a failure half-way through start() still lets stop() run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request

from dockerlib import log, run

from collapsar.manager.nsexec import InNetns

NETNS = "cxnode2"
HOST_VETH, NODE_VETH = "cxn2-host", "cxn2-node"
HOST_IP, NODE_IP, PREFIX = "10.251.0.1", "10.251.0.2", 30
ROOT = "/var/lib/collapsar-test-node2"  # on the disk: overlay2 needs a real filesystem under it
START_TIMEOUT_S = 60


class Node2:
    def __init__(self, root: str = ROOT):
        self.root = root
        self.run_dir = os.path.join(root, "run")  # node 2's /run (so its /var/run)
        self.socket = os.path.join(self.run_dir, "docker.sock")
        self.log_path = os.path.join(root, "dockerd.log")
        self.dockerd: subprocess.Popen | None = None
        self._made: list[str] = []  # what stop() has to undo, in the order it was made

    # ---- the engine -------------------------------------------------------------

    def docker(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        return run("docker", "-H", f"unix://{self.socket}", *args, timeout=timeout, check=check)

    def cli(self, *args: str, timeout: float = 300) -> str:
        """Like dockerlib.docker, on node 2: its output, or AssertionError."""
        return self.docker(*args, timeout=timeout).stdout

    def _up(self) -> bool:
        return os.path.exists(self.socket) and self.docker("info", timeout=30, check=False).returncode == 0

    def start(self) -> None:
        if os.path.exists(self.root) or os.path.exists(f"/run/netns/{NETNS}"):
            raise AssertionError(
                f"{self.root} or netns {NETNS} exists: a node 2 of an earlier run is left "
                f"over; stop its dockerd, `ip netns del {NETNS}`, remove {self.root}"
            )
        for sub in ("run", "lib", "etc-docker"):
            os.makedirs(os.path.join(self.root, sub))
        self._made.append("root")
        run("ip", "netns", "add", NETNS)
        self._made.append("netns")
        run("ip", "link", "add", HOST_VETH, "type", "veth", "peer", "name", NODE_VETH)
        self._made.append("veth")
        run("ip", "link", "set", NODE_VETH, "netns", NETNS)
        run("ip", "addr", "add", f"{HOST_IP}/{PREFIX}", "dev", HOST_VETH)
        run("ip", "link", "set", HOST_VETH, "up")
        for argv in (
            ("addr", "add", f"{NODE_IP}/{PREFIX}", "dev", NODE_VETH),
            ("link", "set", NODE_VETH, "up"),
            ("link", "set", "lo", "up"),
        ):
            run("ip", "-n", NETNS, *argv)
        # The bind mounts happen in the new mount namespace only (private
        # propagation): the host keeps its /run and its dockerd's socket.
        # `exec` keeps one pid from nsenter to dockerd: stop() signals it.
        script = (
            f"mount --bind {self.run_dir} /run && mount --bind {self.root}/etc-docker /etc/docker "
            f"&& hostname collapsar-node2 && exec dockerd --data-root {self.root}/lib "
            f"--exec-root /run/docker --pidfile /run/docker.pid -H unix:///run/docker.sock"
        )
        logfile = open(self.log_path, "w")
        self.dockerd = subprocess.Popen(
            [
                "nsenter",
                f"--net=/run/netns/{NETNS}",
                "--",
                "unshare",
                "--mount",
                "--uts",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                script,
            ],
            stdout=logfile,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        logfile.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._up():
            if self.dockerd.poll() is not None or time.monotonic() > deadline:
                tail = open(self.log_path).read()[-1200:]
                raise AssertionError(f"node 2's dockerd did not start (log {self.log_path}):\n{tail}")
            time.sleep(0.5)
        log(f"node 2: dockerd pid {self.dockerd.pid} in netns {NETNS}, socket {self.socket}")

    def load_images(self, *images: str) -> None:
        """The images built on node 1, copied (no registry here)."""
        began = time.monotonic()
        save = subprocess.Popen(["docker", "save", *images], stdout=subprocess.PIPE)
        load = subprocess.run(
            ["docker", "-H", f"unix://{self.socket}", "load"],
            stdin=save.stdout,
            capture_output=True,
            text=True,
            timeout=600,
        )
        save.stdout.close()
        if save.wait(timeout=60) != 0 or load.returncode != 0:
            raise AssertionError(f"copying {images} to node 2 failed: {load.stderr[-800:]}")
        log(f"node 2: loaded {', '.join(images)} in {time.monotonic() - began:.1f} s")

    # ---- inside node 2's network ------------------------------------------------

    def status(self, port: int = 7077) -> dict | None:
        """Node 2's manager's status API (host network there = this netns)."""
        try:
            with InNetns(NETNS):  # the socket stays in the namespace it was made in
                reply = urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=2)
            with reply:
                return json.load(reply)
        except OSError:
            return None

    def netns_bindings(self) -> list[str]:
        """Namespace bindings under node 2's /run/netns (its managers' nsbind)."""
        path = os.path.join(self.run_dir, "netns")
        return sorted(os.listdir(path)) if os.path.isdir(path) else []

    # ---- teardown -----------------------------------------------------------------

    def stop(self) -> None:
        """Undo what start() did, each step even when an earlier one failed."""
        problems = []
        if self.dockerd is not None and self.dockerd.poll() is None:
            containerd = _children(self.dockerd.pid)
            self.dockerd.terminate()  # dockerd stops its containers, then its containerd
            try:
                self.dockerd.wait(timeout=60)
            except subprocess.TimeoutExpired:
                problems.append(f"dockerd {self.dockerd.pid} ignored SIGTERM for 60 s: killed")
                self.dockerd.kill()
                self.dockerd.wait(timeout=10)
            for pid in containerd:
                if not _ended(pid, 20):
                    problems.append(f"node 2's containerd {pid} outlived dockerd: killed")
                    os.kill(pid, 9)
        if "veth" in self._made:  # deleting one end removes both
            if run("ip", "link", "del", HOST_VETH, check=False).returncode != 0:
                problems.append(f"ip link del {HOST_VETH} failed")
        if "netns" in self._made:
            if run("ip", "netns", "del", NETNS, check=False).returncode != 0:
                problems.append(f"ip netns del {NETNS} failed")
        if "root" in self._made:
            # The mounts under it lived in node 2's mount namespace, gone with
            # its last process; never delete through a mount still seen here.
            mounted = [
                line.split()[4] for line in open("/proc/self/mountinfo") if line.split()[4].startswith(self.root)
            ]
            if mounted:
                problems.append(f"still mounted on the host, {self.root} kept: {mounted[:5]}")
            else:
                shutil.rmtree(self.root)
        self._made.clear()
        if problems:
            raise AssertionError("node 2 teardown: " + "; ".join(problems))


def _children(pid: int) -> list[int]:
    """The direct children of `pid` (dockerd's: the containerd it started)."""
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            found += [int(c) for c in open(f"/proc/{pid}/task/{task}/children").read().split()]
        except OSError:
            pass
    return found


def _ended(pid: int, timeout_s: float) -> bool:
    """Whether `pid` (not our child: dockerd reaps it) is gone within the timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if open(f"/proc/{pid}/stat").read().split(") ", 1)[1].startswith("Z"):
                return True
        except OSError:
            return True
        time.sleep(0.2)
    return False
