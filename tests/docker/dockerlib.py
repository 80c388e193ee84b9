"""Helpers of the Docker tier: the docker CLI, waiting, and the host-wide
views that show whether a deployment left anything behind."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOPOLOGY = ROOT / "tests" / "docker" / "data" / "rates.yaml"
STATUS_URL = "http://127.0.0.1:7077"
NOTES: list[str] = []  # printed in pytest's summary (conftest.pytest_terminal_summary)


def log(line: str) -> None:
    NOTES.append(line)
    print(line, flush=True)


def run(*argv: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


def docker(*args: str, timeout: float = 300) -> str:
    return run("docker", *args, timeout=timeout).stdout


def collapsar(*args: str) -> subprocess.CompletedProcess:
    return run(sys.executable, "-m", "collapsar.cli", *args, check=False)


def wait_for(what: str, predicate, timeout_s: float, every_s: float = 0.25):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}")
        time.sleep(every_s)


def status() -> dict | None:
    try:
        with urllib.request.urlopen(f"{STATUS_URL}/status", timeout=2) as reply:
            return json.load(reply)
    except OSError:
        return None


def labelled_containers(experiment: str) -> list[str]:
    return docker("ps", "-aq", "--filter", f"label=org.collapsar.experiment={experiment}").split()


def container_pid(name_or_id: str) -> int:
    return int(docker("inspect", "-f", "{{.State.Pid}}", name_or_id).strip())


def netns_inodes() -> set[int]:
    """Every network namespace some process on the host is in."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                found.add(int(os.readlink(f"/proc/{entry}/ns/net")[5:-1]))
            except OSError:
                pass
    return found


def collapsar_processes() -> list[str]:
    """Command lines of Collapsar managers and bootstrappers on the host."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                argv = pathlib.Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            words = [w.decode(errors="replace") for w in argv if w]
            if "manager" in words and any(w.endswith("collapsar") for w in words):
                found.append(" ".join(words))
    return found


def tc_in(pid: int, *args: str) -> list[dict]:
    """`tc -j ARGS` inside the network namespace of `pid`."""
    out = run("nsenter", "-t", str(pid), "-n", "tc", "-j", *args).stdout
    return json.loads(out) if out.strip() else []


def ifname_of(pid: int, ip: str) -> str:
    for link in json.loads(run("nsenter", "-t", str(pid), "-n", "ip", "-j", "addr").stdout):
        if any(a.get("local") == ip for a in link.get("addr_info", [])):
            return link["ifname"]
    raise AssertionError(f"no interface holds {ip} in the namespace of pid {pid}")


def mtu_of(pid: int, ifname: str) -> int:
    return json.loads(run("nsenter", "-t", str(pid), "-n", "ip", "-j", "link", "show", ifname).stdout)[0]["mtu"]


def htb_rates(pid: int, ifname: str) -> dict[str, int]:
    """classid ("1:10") -> htb rate in bytes/s, read over netlink inside the
    namespace of `pid` (iproute2 6.1 prints htb classes rounded, never as JSON)."""
    import ctypes
    import threading

    from pyroute2 import IPRoute

    result: dict[str, int] = {}
    failure: list[BaseException] = []

    def body() -> None:  # setns changes this thread only
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
            try:
                if libc.setns(fd, 0x40000000) != 0:
                    raise OSError(ctypes.get_errno(), f"setns into pid {pid}")
            finally:
                os.close(fd)
            with IPRoute() as ipr:
                index = ipr.link_lookup(ifname=ifname)[0]
                for cls in ipr.get_classes(index):
                    parms = cls.get_attr("TCA_OPTIONS").get_attr("TCA_HTB_PARMS")
                    handle = cls["handle"]
                    result[f"{handle >> 16:x}:{handle & 0xFFFF:x}"] = parms["rate"]
        except BaseException as error:  # re-raised on the caller's thread
            failure.append(error)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result


def classes_by_destination(pid: int, ifname: str) -> dict[str, str]:
    """destination IPv4 -> the class its u32 filter sends it to."""
    found = {}
    for entry in tc_in(pid, "filter", "show", "dev", ifname):
        options = entry.get("options", {})
        match = options.get("match")
        if "flowid" in options and match and match.get("off") == 16 and match.get("mask") == "ffffffff":
            value = int(match["value"], 16)
            ip = ".".join(str((value >> shift) & 0xFF) for shift in (24, 16, 8, 0))
            found[ip] = options["flowid"]
    return found


def wait_listening(container: str, ports: tuple[int, ...], timeout_s: float = 30) -> None:
    """Until `container` has a TCP socket listening on each of `ports`: the
    workload image's commands start only once the manager has marked the
    container, at t=0 (hostsfile.py), so a server is not up the moment its
    container is shaped."""

    def listening() -> bool:
        # iperf3 listens on `::` (dual stack): its socket is in tcp6.
        table = run("docker", "exec", container, "cat", "/proc/net/tcp", "/proc/net/tcp6", check=False).stdout
        found = {
            int(cols[1].split(":")[1], 16)
            for cols in (line.split() for line in table.splitlines()[1:])
            if len(cols) > 3 and cols[3] == "0A"
        }  # 0A: LISTEN
        return set(ports) <= found

    wait_for(f"{container[:12]} listening on {ports}", listening, timeout_s)


def remove_trace_volume(stack: str, cli=None) -> None:
    """The volume a Swarm stack of the workload image leaves on a node for
    its traces (deploy-generator/stack.py keeps it for gathering; these
    tests gather none).  Removed once no container uses it any more."""
    cli = cli or docker
    name = f"{stack}_collapsar-workload"

    def gone() -> bool:
        if name not in cli("volume", "ls", "-q", "--filter", f"name={name}").split():
            return True
        try:
            cli("volume", "rm", name)
        except AssertionError:  # still in use by a task on its way out
            pass
        return False

    wait_for(f"the stack's trace volume {name} removed", gone, 120, every_s=1)
