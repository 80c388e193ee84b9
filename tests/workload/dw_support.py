"""Helpers for the DistWalk compatibility tests: nodes started with DistWalk's
own node options (their -b, -s, or none), DistWalk's fixed ports mapped to
free loopback ports, and one-shot runs of either program."""

import re
import signal
import socket
import subprocess
import time

import pytest
from conftest import Node
from wl_support import LISTEN_RE, sanitizer_env

DW_PORTS = (7891, 7892, 7893, 7894, 7895)


def free_port(kind=socket.SOCK_STREAM):
    """A loopback port nothing listens on (bound once and released)."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def localize(args, ports):
    """DistWalk's fixed ports (and -b :8000-style client ports) become ours:
    ports maps a DistWalk port to a loopback port; a host written without a
    port in -F means DistWalk's default, 7891; a line without --to gets one."""
    out = []
    for i, arg in enumerate(args):
        arg = re.sub(r"(?<=:)(\d{4})\b", lambda m: str(ports.get(int(m.group(1)), m.group(1))), arg)
        if i and args[i - 1] == "-F" and arg in ("localhost", "127.0.0.1"):
            arg = f"{arg}:{ports[7891]}"
        out.append(arg)
    if not any(a == "--to" or a.startswith("--to=") for a in out):
        out = ["--to", f"127.0.0.1:{ports[7891]}", *out]
    return out


def run(binaries, prog, *args, timeout=60):
    """One run of wl-client or wl-node; sanitizer reports fail the test."""
    proc = subprocess.run(
        [str(binaries[prog]), *map(str, args)], capture_output=True, text=True, timeout=timeout, env=sanitizer_env()
    )
    assert "Sanitizer" not in proc.stderr and "runtime error" not in proc.stderr, proc.stderr
    return proc


def binds_of(args):
    return sum(1 for i, a in enumerate(args) if a in ("-b", "--bind-addr") or a.startswith(("--bind-addr=", "-b")))


@pytest.fixture
def dw_node(binaries, tmp_path):
    """dw_node(*args) -> Node running wl-node with DistWalk's node options as
    given; -b 127.0.0.1:0 and a private -s file are added only when absent.
    node.ports maps "tcp"/"udp" to the ports it listens on."""
    nodes = []

    def start(*args):
        args = [str(a) for a in args]
        index = len(nodes)
        if not binds_of(args):
            args = ["-b", "127.0.0.1:0", *args]
        if not any(a in ("-s", "--storage") or a.startswith("--storage=") for a in args):
            args += ["-s", str(tmp_path / f"dw-node{index}.storage")]
        log_path = tmp_path / f"dw-node{index}.log"
        with open(log_path, "w") as log:
            proc = subprocess.Popen([str(binaries["node"]), *args], stdout=log, stderr=log, env=sanitizer_env())
        deadline, found = time.monotonic() + 15, []
        while time.monotonic() < deadline and len(found) < binds_of(args):
            if proc.poll() is not None:
                raise AssertionError(f"wl-node {args} exited with {proc.returncode}:\n{log_path.read_text()}")
            found = LISTEN_RE.findall(log_path.read_text())
            time.sleep(0.02)
        if len(found) < binds_of(args):
            proc.kill()
            raise AssertionError(f"wl-node {args} did not listen:\n{log_path.read_text()}")
        ports = {proto: int(port) for proto, _, port in found}
        node = Node(proc, log_path, ports.get("tcp"), ports.get("udp"))
        node.ports = ports
        nodes.append(node)
        return node

    yield start
    problems = []
    for node in nodes:
        code = node.stop(signal.SIGTERM)
        text = node.log()
        if code != 0 or "Sanitizer" in text or "runtime error" in text:
            problems.append(f"wl-node pid {node.proc.pid} exit {code}:\n{text[-3000:]}")
    assert not problems, "\n".join(problems)
