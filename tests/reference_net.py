"""A hop-by-hop reference network in the kernel: build, run, tear down.

    with ReferenceNet(parse_file("topologies/x.yaml")) as net:
        net.run(duration_s=30)            # every command at t=0 or at its join
        net.sh("client", "ping", "-c", "3", "server")

`reference_plan` decides everything (namespaces, veths, addresses, routes,
queues: read its docstring); this module only makes it so, with batched
`ip` and `tc` commands (one process per namespace and tool; process starts
are slow in the VM tier's emulated CPU) and runs each service's command in
its instance's namespace through `ip netns exec`, which bind-mounts
/etc/netns/<namespace>/hosts over /etc/hosts so commands name each other as
in Collapsar.  Jitter uses Collapsar's own distribution tables
(collapsar.tcal.dist), written as tc .dist files in a private TC_LIB_DIR.

Cleanup: every namespace, /etc/netns directory and process is recorded as
it is made, and `teardown()` removes exactly those (process groups by PID,
namespaces by name), also after a failed build; SIGINT and SIGTERM wait
until it is done.  It never touches what it did not make, and refuses to
build over a namespace or /etc/netns directory that already exists.

Standard library and collapsar only: the VM tier imports it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from reference_plan import DEFAULT_SUBNET, GSO_MAX_SEGS, Hop, ReferencePlan, delay_line_pkts, plan_reference, run_tag

from collapsar.errors import CollapsarError, EnvironmentProblem
from collapsar.model import DISTRIBUTIONS, Experiment

NETNS_RUN = Path("/run/netns")
NETNS_ETC = Path("/etc/netns")
DEFAULT_GRACE_S = 3.0


class ReferenceNet:
    """One reference network for one experiment (see the module docstring)."""

    def __init__(
        self,
        experiment: Experiment,
        *,
        tag: str | None = None,
        subnet: str = DEFAULT_SUBNET,
        log_dir: str | os.PathLike | None = None,
        grace_s: float = DEFAULT_GRACE_S,
    ):
        self.plan: ReferencePlan = plan_reference(experiment, tag or run_tag(), subnet)
        self.grace_s = grace_s
        self._given_logs = log_dir is not None
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self._netns: list[str] = []
        self._etc_dirs: list[Path] = []
        self._procs: list[tuple[str, subprocess.Popen]] = []  # (what, process); group leaders
        self._tc_lib: str | None = None
        self._t0: float | None = None
        self._pending = list(self.plan.launches)
        self.started: dict[str, subprocess.Popen] = {}  # instance -> its command
        self.started_at_s: dict[str, float] = {}  # instance -> when its command started, from t=0

    # ---- building -----------------------------------------------------------

    def __enter__(self) -> ReferenceNet:
        try:
            self.build()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.teardown()

    def build(self) -> None:
        if os.geteuid() != 0:
            raise EnvironmentProblem("the reference network needs root (CAP_NET_ADMIN)", "run as root")
        nodes = list(self.plan.nodes.values())
        for node in nodes:
            if (NETNS_RUN / node.netns).exists() or (NETNS_ETC / node.netns).exists():
                raise CollapsarError(f"namespace {node.netns} exists already: not ours, not touched")
        self._tc_lib = tempfile.mkdtemp(prefix=f"{self.plan.tag}-tc-")
        self._write_dist_tables()
        if self.log_dir is None:
            self.log_dir = Path(tempfile.mkdtemp(prefix=f"{self.plan.tag}-logs-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for node in nodes:
            _run(["ip", "netns", "add", node.netns])
            self._netns.append(node.netns)
            etc = NETNS_ETC / node.netns
            etc.mkdir(parents=True)
            self._etc_dirs.append(etc)
            (etc / "hosts").write_text(self.plan.hosts_text())
            _run(
                [
                    "ip",
                    "netns",
                    "exec",
                    node.netns,
                    "sysctl",
                    "-q",
                    "-w",
                    *_sysctls(node.kind, self.plan.congestion_control),
                ]
            )
        _batch(
            ["ip"],
            [
                f"link add {i} netns {self.netns(a)} type veth peer name {i} netns {self.netns(b)}"
                for i, a, b in self.plan.veths
            ],
        )
        for node in nodes:
            _batch(["ip", "-n", node.netns], self._ip_lines(node.name))
            lines = [line for hop in self.plan.hops if hop.src == node.name for line in self._tc_lines(hop)]
            if lines:
                _batch(["tc", "-n", node.netns], lines, env={**os.environ, "TC_LIB_DIR": self._tc_lib})

    def _write_dist_tables(self) -> None:
        from collapsar.tcal.dist import table_values

        assert self._tc_lib is not None
        for name in DISTRIBUTIONS:
            values = table_values(name)
            rows = (" ".join(str(v) for v in values[i : i + 8]) for i in range(0, len(values), 8))
            Path(self._tc_lib, f"{name}.dist").write_text("\n".join(rows) + "\n")

    def _ip_lines(self, name: str) -> list[str]:
        ip = self.plan.ip(name)
        lines = ["link set dev lo up"]
        for ifname, a, b in self.plan.veths:
            if name in (a, b):
                lines.append(f"addr add {ip}/32 dev {ifname}")
                lines.append(f"link set dev {ifname} up gso_max_segs {GSO_MAX_SEGS}")
        tables = set()
        for route in self.plan.routes:
            if route.node == name:
                table = f" table {route.table}" if route.table else ""
                lines.append(f"route add {route.dst_ip}/32 via {route.via_ip} dev {route.ifname} onlink{table}")
                if route.table and (route.table, route.src_ip) not in tables:
                    tables.add((route.table, route.src_ip))
                    lines.append(f"rule add from {route.src_ip}/32 lookup {route.table} pref {route.table}")
        return lines

    def _tc_lines(self, hop: Hop) -> list[str]:
        """htb class at the rate over a pfifo or netem leaf; a root netem without a rate."""
        from collapsar.tcal.plan import HtbCalculator, leaf_sizes

        props, dev = hop.props, f"dev {hop.ifname}"
        netem = " ".join(_netem_args(props))
        if props.rate_bps is None:
            limit = leaf_sizes(None, props.delay_us, props.jitter_us).limit_pkts
            return [f"qdisc add {dev} root handle 10: netem limit {limit} {netem}"] if netem else []
        assert hop.queue_pkts is not None
        htb = HtbCalculator(wire_overhead=self.plan.wire_overhead)(props.rate_bps)
        rate = f"{htb.rate_bytes_ps * 8}bit"
        lines = [
            f"qdisc add {dev} root handle 1: htb default 1",
            f"class add {dev} parent 1: classid 1:1 htb rate {rate} ceil {rate} burst {htb.burst_bytes}b "
            f"cburst {htb.burst_bytes}b quantum {htb.quantum_bytes} mpu {htb.mpu_bytes}",
        ]
        if netem:
            limit = hop.queue_pkts + delay_line_pkts(props.rate_bps, props.delay_us)
            lines.append(f"qdisc add {dev} parent 1:1 handle 10: netem limit {limit} {netem}")
        else:
            lines.append(f"qdisc add {dev} parent 1:1 handle 10: pfifo limit {hop.queue_pkts}")
        return lines

    # ---- running ------------------------------------------------------------

    def netns(self, name: str) -> str:
        return self.plan.netns(name)

    def ip(self, name: str) -> str:
        return self.plan.ip(name)

    def popen(self, node: str, argv: list[str], **kwargs) -> subprocess.Popen:
        """Start `argv` in `node`'s namespace in its own process group; torn down with the network."""
        proc = subprocess.Popen(["ip", "netns", "exec", self.netns(node), *argv], start_new_session=True, **kwargs)
        self._procs.append((f"{node}: {argv[0]}", proc))
        return proc

    def sh(self, node: str, *argv: str, timeout_s: float = 60, check: bool = True) -> subprocess.CompletedProcess:
        """Run `argv` in `node`'s namespace and wait for it; text output captured."""
        proc = self.popen(node, list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop(proc, 0)
            raise
        if check and proc.returncode:
            raise CollapsarError(f"{node}: {' '.join(argv)} exited {proc.returncode}: {err.strip()[-500:]}")
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)

    @property
    def elapsed_s(self) -> float:
        return 0.0 if self._t0 is None else time.monotonic() - self._t0

    def start(self) -> None:
        """t=0: start every command due then (later ones wait for `play`)."""
        self._t0 = time.monotonic()
        self._launch_due()

    def play(self, duration_s: float | None = None, poll_s: float = 0.02) -> dict[str, int | None]:
        """Start joining instances on time until every command has exited, or
        until `duration_s` after t=0; returns each started command's exit code
        (None: still running, stopped at teardown)."""
        if self._t0 is None:
            self.start()
        while self._pending or any(exit_status(p) is None for p in self.started.values()):
            if duration_s is not None and self.elapsed_s >= duration_s:
                break
            next_s = self._pending[0].at_us / 1e6 if self._pending else float("inf")
            end_s = float("inf") if duration_s is None else duration_s
            time.sleep(max(0.0, min(poll_s, next_s - self.elapsed_s, end_s - self.elapsed_s)))
            self._launch_due()
        return {name: exit_status(proc) for name, proc in self.started.items()}

    def run(self, duration_s: float | None = None) -> dict[str, int | None]:
        self.start()
        return self.play(duration_s)

    def log_paths(self, instance: str) -> tuple[Path, Path]:
        assert self.log_dir is not None
        return self.log_dir / f"{instance}.out", self.log_dir / f"{instance}.err"

    def _launch_due(self) -> None:
        while self._pending and self._pending[0].at_us / 1e6 <= self.elapsed_s:
            launch = self._pending.pop(0)
            self.started_at_s[launch.instance] = self.elapsed_s
            out_path, err_path = self.log_paths(launch.instance)
            with open(out_path, "ab") as out, open(err_path, "ab") as err:
                self.started[launch.instance] = self.popen(
                    launch.instance,
                    list(launch.argv),
                    env={**os.environ, **dict(launch.env)},
                    cwd=launch.workdir,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                )

    # ---- teardown -----------------------------------------------------------

    def teardown(self) -> None:
        """Remove what this network made, last made first; safe to call again."""
        problems = []
        with _signals_deferred():
            while self._procs:
                _, proc = self._procs.pop()
                _stop(proc, self.grace_s)
            while self._netns:
                ns = self._netns.pop()
                done = subprocess.run(["ip", "netns", "del", ns], capture_output=True, text=True)
                if done.returncode:
                    problems.append(f"ip netns del {ns}: {done.stderr.strip()}")
            while self._etc_dirs:
                etc = self._etc_dirs.pop()
                with contextlib.suppress(FileNotFoundError):
                    (etc / "hosts").unlink()
                try:
                    etc.rmdir()
                except OSError as error:
                    problems.append(f"{etc}: {error}")
            if self._tc_lib:
                shutil.rmtree(self._tc_lib, ignore_errors=True)
                self._tc_lib = None
            if self.log_dir is not None and not self._given_logs:
                shutil.rmtree(self.log_dir, ignore_errors=True)
                self.log_dir = None
        if problems:
            raise CollapsarError("reference network teardown: " + "; ".join(problems))


def _sysctls(kind: str, congestion_control: str | None) -> list[str]:
    # rp_filter off: routes may differ per direction.  default.* before any veth
    # exists, so the veths inherit it.  No IPv6: no router solicitations in the queues.
    # The experiment's TCP congestion control where TCP ends (instances), as Collapsar sets it.
    values: dict[str, object] = {
        "net.ipv4.ip_forward": 1 if kind == "bridge" else 0,
        "net.ipv4.conf.all.rp_filter": 0,
        "net.ipv4.conf.default.rp_filter": 0,
        "net.ipv4.conf.all.send_redirects": 0,
        "net.ipv4.conf.default.send_redirects": 0,
        "net.ipv6.conf.all.disable_ipv6": 1,
        "net.ipv6.conf.default.disable_ipv6": 1,
    }
    if congestion_control is not None and kind != "bridge":
        values["net.ipv4.tcp_congestion_control"] = congestion_control
    return [f"{key}={value}" for key, value in values.items()]


def _netem_args(props) -> list[str]:
    args = []
    if props.delay_us:
        args += ["delay", f"{props.delay_us}us"]
        if props.jitter_us:
            args += [f"{props.jitter_us}us", "distribution", props.distribution]
    if props.loss_ratio:
        args += ["loss", "random", f"{props.loss_ratio * 100:.10g}%"]
    return args


def _run(argv: list[str], **kwargs) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if done.returncode:
        raise CollapsarError(f"{' '.join(argv)}: exited {done.returncode}: {done.stderr.strip()[-800:]}")


def _batch(prefix: list[str], lines: list[str], env: dict[str, str] | None = None) -> None:
    """`ip -batch` / `tc -batch` of `lines`; an error names the failing line."""
    if not lines:
        return
    done = subprocess.run(
        [*prefix, "-batch", "-"], input="\n".join(lines) + "\n", capture_output=True, text=True, env=env
    )
    if done.returncode:
        raise CollapsarError(f"{' '.join(prefix)} -batch: {done.stderr.strip()[-800:]}")


def exit_status(proc: subprocess.Popen) -> int | None:
    """The exit code of `proc` once it has ended (negative: its signal), without
    reaping it: an unreaped process's PID, and so its group's id, stay ours."""
    if proc.returncode is not None:
        return proc.returncode
    info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _stop(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the process group `proc` leads, SIGKILL what is left of it after `grace_s`, then reap."""
    if proc.returncode is not None:
        return  # reaped already: its group id may not be ours any more
    if exit_status(proc) is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while exit_status(proc) is None and time.monotonic() < deadline:
            time.sleep(0.02)
    # The leader is at most a zombie, so the group id is still this group's;
    # members it left behind (a shell's background jobs) go with it.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@contextlib.contextmanager
def _signals_deferred():
    """Hold SIGINT and SIGTERM until the block ends, so a second Ctrl-C does not cut a teardown short."""
    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
