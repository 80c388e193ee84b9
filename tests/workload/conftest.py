"""Fixtures for the workload tier: the sanitizer build of wl-node/wl-client
(built once per session; a build failure fails the tier), nodes started on
free loopback ports and stopped by PID, and a client runner that parses the
JSON summary.  Every node's stderr is checked for sanitizer reports."""

import json
import signal
import subprocess
import time

import pytest
from wl_support import BUILD, LISTEN_RE, STATS_RE, WORKLOAD, sanitizer_env


@pytest.fixture(scope="session")
def binaries():
    result = subprocess.run(["make", "-C", str(WORKLOAD), "asan"], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.fail(f"make -C workload-node asan failed:\n{result.stdout}\n{result.stderr}")
    return {"node": BUILD / "wl-node", "client": BUILD / "wl-client"}


class Node:
    """A running wl-node; .addr is 127.0.0.1:PORT, .stats() asks for SIGUSR1 counters."""

    def __init__(self, proc, log_path, port, udp_port):
        self.proc = proc
        self.log_path = log_path
        self.port = port
        self.udp_port = udp_port
        self.addr = f"127.0.0.1:{port}"

    def log(self):
        return self.log_path.read_text(errors="replace")

    def stats(self):
        before = len(STATS_RE.findall(self.log()))
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            found = STATS_RE.findall(self.log())
            if len(found) > before:
                return {k: int(v) for k, v in (kv.split("=") for kv in found[-1][1].split())}
            time.sleep(0.02)
        raise AssertionError(f"wl-node pid {self.proc.pid} printed no stats after SIGUSR1:\n{self.log()}")

    def stop(self, sig=signal.SIGTERM, timeout=10):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"wl-node pid {self.proc.pid} ignored signal {sig}") from None
        return self.proc.returncode


@pytest.fixture
def start_node(binaries, tmp_path):
    """start_node(*args, storage=True, env=None) -> Node bound to 127.0.0.1 on a free port;
    storage=False leaves the node its default storage file, env adds to its environment."""
    nodes = []

    def start(*args, udp=False, storage=True, env=None):
        index = len(nodes)
        log_path = tmp_path / f"node{index}.log"
        cmd = [str(binaries["node"]), "-b", "127.0.0.1:0"]
        if storage:
            cmd += ["-s", str(tmp_path / f"node{index}.storage")]
        cmd += list(args)
        with open(log_path, "w") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=log, env={**sanitizer_env(), **(env or {})})
        deadline = time.monotonic() + 10
        ports = {}
        while time.monotonic() < deadline and "tcp" not in ports:
            if proc.poll() is not None:
                raise AssertionError(f"wl-node exited with {proc.returncode}:\n{log_path.read_text()}")
            ports = {m[0]: int(m[2]) for m in LISTEN_RE.findall(log_path.read_text())}
            time.sleep(0.02)
        if "tcp" not in ports:
            proc.kill()
            raise AssertionError(f"wl-node did not report its port:\n{log_path.read_text()}")
        node = Node(proc, log_path, ports["tcp"], ports.get("udp"))
        nodes.append(node)
        return node

    yield start
    problems = []
    for node in nodes:
        code = node.stop()
        text = node.log()
        if code != 0 or "Sanitizer" in text or "runtime error" in text:
            problems.append(f"wl-node pid {node.proc.pid} exit {code}:\n{text[-4000:]}")
    assert not problems, "\n".join(problems)


class ClientResult:
    def __init__(self, proc, summary):
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.summary = summary

    def __getitem__(self, key):
        return self.summary[key]

    @property
    def lat(self):
        return self.summary["latency_us"]


@pytest.fixture
def run_client(binaries):
    """run_client(*args, timeout=60) -> ClientResult with the parsed --json summary."""

    def run(*args, timeout=120, check=True):
        cmd = [str(binaries["client"]), *map(str, args), "--json"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=sanitizer_env())
        assert "Sanitizer" not in proc.stderr and "runtime error" not in proc.stderr, proc.stderr
        if check:
            assert proc.returncode == 0, f"{cmd} exited {proc.returncode}:\n{proc.stderr}"
        summary = None
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if lines:
            summary = json.loads(lines[-1])
        return ClientResult(proc, summary)

    return run
