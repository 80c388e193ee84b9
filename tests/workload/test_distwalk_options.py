"""What each option DistWalk gained after the paper means in wl-client and
wl-node, measured on real nodes: -R, -f, client -b, --retry-num and
--retry-period, -n auto, -L/-S with size=[..],offset=[..], -S sync/nosync
and its default, --skip every=, --nd, --ws, --stag-send, --conn-times,
--non-block, node --thread-affinity auto, --sync in ms, --wss,
--loops-per-usec, and a UDP request to a closed port (an error at once)."""

import json
import os
import pathlib
import re
import resource
import shutil
import socket
import subprocess
import threading
import time

import pytest
from dw_support import dw_node, free_port, run  # noqa: F401 (dw_node is a fixture)
from wl_support import LISTEN_RE, read_records, sanitizer_env

pytestmark = pytest.mark.timing  # retry periods, CPU time of spinners, send times


def test_retry_num_retries_a_dead_target(binaries):
    port = free_port()
    started = time.monotonic()
    proc = run(binaries, "client", f"--to=tcp://127.0.0.1:{port}", "--retry-num", 2, "--retry-period", 200, "--json")
    elapsed = time.monotonic() - started
    assert proc.returncode == 0 and '"err":1' in proc.stdout
    assert proc.stderr.count(f"127.0.0.1:{port}: Connection refused") == 3  # the try and 2 retries
    assert elapsed >= 0.4  # two periods of 200 ms (a bare number is ms)


def test_retries_reach_a_node_that_comes_up_later(binaries, dw_node):
    port = free_port()
    cmd = [
        str(binaries["client"]),
        "--to",
        f"127.0.0.1:{port}",
        "--retry-num",
        "20",
        "--retry-period",
        "100ms",
        "--json",
    ]
    client = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=sanitizer_env())
    time.sleep(0.5)
    dw_node("-b", f"127.0.0.1:{port}")
    out, err = client.communicate(timeout=30)
    assert client.returncode == 0 and '"ok":1' in out, err
    assert err.count("Connection refused") >= 2


@pytest.mark.parametrize(
    "pacing, requests",
    [
        (["-r", "aseq:min=10:max=30:step=10", "--rss", "200ms"], 2 + 4 + 6),
        (["-r", "gseq:min=10:max=40", "--rate-step-secs", "0.1"], 1 + 2 + 4),  # step 2 by default
        (["-r", "aseq:min=30:max=10:step=-10", "--rss", "200ms"], 6 + 4 + 2),  # DistWalk's ramp-down
        (["-p", "aseq:min=1ms:max=5ms:step=1ms"], 5),
    ],
)
def test_n_auto_is_one_pass_of_the_ramp(dw_node, run_client, pacing, requests):
    node = dw_node()
    res = run_client("--to", node.addr, "-n", "auto", *pacing)
    assert res["requests"] == requests == res["ok"]


def test_n_auto_from_a_file_of_rates(dw_node, run_client, tmp_path):
    rates = tmp_path / "rates.csv"
    rates.write_text("rate\n10\n20\n")  # a header row, then 2 steps
    node = dw_node()
    res = run_client("--to", node.addr, "-n", "auto", "-r", f"file:{rates}", "--rss", "100ms")
    assert res["requests"] == 1 + 2


def test_reply_closes_the_forward_and_sizes_its_reply(dw_node, run_client):
    a, b, c = dw_node(), dw_node(), dw_node()
    res = run_client(
        "--to",
        a.addr,
        "-F",
        f":{b.port}",
        "-C",
        "1ms",
        "-R",
        "3000",
        "-F",
        f":{c.port}",
        "-C",
        "1ms",
        "-R",
        "-C",
        "2ms",
        "--rs",
        "2048",
    )
    assert res["ok"] == 1 and res.lat["min"] >= 4000
    sa, sb, sc = a.stats(), b.stats(), c.stats()
    assert (sa["forwards"], sb["requests"], sc["requests"]) == (2, 1, 1)  # one after the other, not nested
    # b replies 3000 bytes, c the smallest reply; a replies 2048 and sent b and c a 62-byte request each
    assert (sb["bytes_out"], sc["bytes_out"], sa["bytes_out"]) == (3000, 48, 2048 + 2 * 62)


@pytest.mark.parametrize(
    "skip, n, skipped",
    [("1,every=2", 10, 5), ("1,every=3", 9, 3), ("1,prob=0,every=2", 10, 0), ("2,every=5", 10, 2 * 2)],
)
def test_skip_every_skips_on_every_nth_request(dw_node, run_client, skip, n, skipped):
    """Requests 0, every, 2*every, ... skip; the others run both STOREs."""
    node = dw_node()
    run_client("--to", node.addr, "--skip", skip, "-S", "nosync,1k", "-S", "nosync,1k", "-n", n)
    assert node.stats()["stores"] == 2 * n - skipped


def test_skip_every_on_the_forward_shows_in_latencies(dw_node, run_client, tmp_path):
    a, b = dw_node(), dw_node()
    out = tmp_path / "recs.csv"
    run_client(
        "--to", a.addr, "-C", "1000", "--skip=1,every=2", "-F", f"localhost:{b.port}", "-C", "10ms", "-n", 10, "-o", out
    )
    lat = [r["latency_us"] for r in read_records(out)]
    assert all(x < 10000 for x in lat[0::2]) and all(x >= 10000 for x in lat[1::2]), lat  # DistWalk's check


def test_script_file_options_stand_where_f_stands(dw_node, run_client, tmp_path):
    inner = tmp_path / "inner.dw"
    inner.write_text("-S nosync,1k\n")
    outer = tmp_path / "outer.dw"
    outer.write_text(f"# requests\n-n 3   # three of them\n--ps 256\n-f {inner}\n-C 1ms\n")
    node = dw_node()
    res = run_client("--to", node.addr, "-f", outer, "--rs=1024")
    assert res["ok"] == 3 and res.lat["min"] >= 1000
    stats = node.stats()
    assert (stats["stores"], stats["bytes_in"], stats["bytes_out"]) == (3, 3 * 256, 3 * 1024)


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed (deps/apt-workload.txt)")
@pytest.mark.parametrize("op, call", [("-L", "pread64"), ("-S", "pwrite64")])
def test_sizes_and_offsets_are_drawn_within_their_bounds(binaries, run_client, tmp_path, op, call):
    trace, log = tmp_path / "strace.txt", tmp_path / "node.log"
    env = sanitizer_env()
    env["ASAN_OPTIONS"] += ":detect_leaks=0"  # LeakSanitizer cannot run under ptrace
    cmd = [
        "strace",
        "-f",
        "-qq",
        "-e",
        f"trace={call}",
        "-o",
        str(trace),
        str(binaries["node"]),
        "-b",
        "127.0.0.1:0",
        "-s",
        str(tmp_path / "data"),
    ]
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=f, env=env)
    try:
        for _ in range(500):
            found = LISTEN_RE.findall(log.read_text())
            if found:
                break
            time.sleep(0.02)
        spec = "size=[unif:min=0:max=1023],offset=[unif:min=0:max=3071]"
        run_client("--to", f"127.0.0.1:{found[0][2]}", op, spec if op == "-L" else f"nosync,{spec}", "-n", 60)
    finally:
        for pid in pathlib.Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split():
            os.kill(int(pid), 15)
        proc.wait(timeout=20)
    calls = [tuple(map(int, m)) for m in re.findall(rf"{call}\(\d+, .*?, (\d+), (\d+)\)", trace.read_text())]
    assert 55 <= len(calls) <= 64  # a size drawn as 0 makes no call; an interrupted call is made again
    assert all(size <= 1023 and offset <= 3071 for size, offset in calls), calls
    assert len({size for size, _ in calls}) > 30 and len({offset for _, offset in calls}) > 30  # drawn each time


def test_store_syncs_unless_told_not_to(dw_node, run_client):
    node = dw_node()
    fsyncs = []
    for spec in ("65536", "sync,65536", "65536,sync", "nosync,65536", "65536,nosync"):
        before = node.stats()["fsyncs"]
        assert run_client("--to", node.addr, "--store-offset", 0, "-S", spec, "-n", 5)["ok"] == 5
        fsyncs.append(node.stats()["fsyncs"] - before)
    assert fsyncs == [5, 5, 5, 0, 0]


def test_node_sync_period_in_ms_takes_over_syncing_stores(dw_node, run_client):
    node = dw_node("--sync=100")  # DistWalk: milliseconds; syncing stores wait for the period's fsync
    assert run_client("--to", node.addr, "-S", "4k", "-r", 100, "-n", 40)["ok"] == 40
    time.sleep(0.25)
    assert 1 <= node.stats()["fsyncs"] <= 8  # about one per 100 ms over 0.4 s, not 40


def test_storage_in_distwalk_form(dw_node, run_client, tmp_path):
    path = tmp_path / "dev0"
    node = dw_node("-s", f"file={path},size=64k,sync=50")
    res = run_client("--to", node.addr, "--store-offset", "unif:min=0,max=1m", "-S", "4k", "-r", 200, "-n", 40)
    assert res["ok"] == 40
    time.sleep(0.1)
    assert path.stat().st_size <= 64 * 1024 and node.stats()["fsyncs"] < 40


@pytest.mark.parametrize("kind", [socket.SOCK_STREAM, socket.SOCK_DGRAM])
def test_a_closed_port_is_an_error_at_once(binaries, kind):
    proto = "udp" if kind == socket.SOCK_DGRAM else "tcp"
    to = f"{proto}://127.0.0.1:{free_port(kind)}"
    for pacing in ([], ["-r", "100"]):
        started = time.monotonic()
        proc = run(binaries, "client", "--to", to, "-n", 10, *pacing, "--json")
        elapsed = time.monotonic() - started
        assert proc.returncode == 0 and '"err":10' in proc.stdout, proc.stdout
        assert elapsed < (1.0 if not pacing else 1.5), elapsed  # not 10 timeouts of 10 s


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed (deps/apt-workload.txt)")
@pytest.mark.parametrize("prog", ["client", "node"])
def test_nd_sets_tcp_nodelay(binaries, dw_node, tmp_path, prog):
    env = sanitizer_env()
    env["ASAN_OPTIONS"] += ":detect_leaks=0"
    seen = {}
    for nd in ("0", "1"):
        trace = tmp_path / f"strace{nd}.txt"
        if prog == "client":
            node = dw_node()
            cmd = [str(binaries["client"]), "--to", node.addr, f"--nd={nd}"]
            subprocess.run(
                ["strace", "-f", "-qq", "-e", "trace=setsockopt", "-o", str(trace), *cmd],
                capture_output=True,
                timeout=60,
                env=env,
                check=True,
            )
        else:
            log = tmp_path / f"node{nd}.log"
            with open(log, "w") as f:
                proc = subprocess.Popen(
                    [
                        "strace",
                        "-f",
                        "-qq",
                        "-e",
                        "trace=setsockopt",
                        "-o",
                        str(trace),
                        str(binaries["node"]),
                        "-b",
                        "127.0.0.1:0",
                        "--nd",
                        nd,
                        "-s",
                        str(tmp_path / "data"),
                    ],
                    stdout=f,
                    stderr=f,
                    env=env,
                )
            for _ in range(500):
                if LISTEN_RE.findall(log.read_text()):
                    break
                time.sleep(0.02)
            port = LISTEN_RE.findall(log.read_text())[0][2]
            run(binaries, "client", "--to", f"127.0.0.1:{port}", "--nd", "0")
            for pid in pathlib.Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split():
                os.kill(int(pid), 15)
            proc.wait(timeout=20)
        seen[nd] = trace.read_text().count("TCP_NODELAY, [1]")
    assert seen == {"0": 0, "1": 1}


def child_cpu_seconds(cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([str(c) for c in cmd], capture_output=True, timeout=60, env=sanitizer_env(), check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def process_cpu_seconds(pid):
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_wait_spin_client_spins_between_sends(binaries, dw_node):
    node = dw_node()
    base = [str(binaries["client"]), "--to", node.addr, "-p", "200ms", "-n", 4]
    sleeping, spinning = child_cpu_seconds(base), child_cpu_seconds([*base, "--ws"])
    assert spinning >= 0.1 and spinning > 3 * sleeping, (sleeping, spinning)


@pytest.mark.parametrize("option", ["--ws", "--wait-spin-storage"])
def test_wait_spin_node_threads_spin_while_idle(dw_node, option):
    quiet, busy = dw_node(), dw_node(option)
    t0 = (process_cpu_seconds(quiet.proc.pid), process_cpu_seconds(busy.proc.pid))
    time.sleep(1.0)
    used = (process_cpu_seconds(quiet.proc.pid) - t0[0], process_cpu_seconds(busy.proc.pid) - t0[1])
    assert used[1] >= 0.1 and used[1] > 3 * used[0], used


def test_client_bind_addr_is_the_source_address(binaries):
    port, peers = free_port(), []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(10)

        def accept():
            conn, addr = server.accept()
            peers.append(addr)
            conn.close()

        t = threading.Thread(target=accept)
        t.start()
        run(binaries, "client", "--to", f"127.0.0.1:{server.getsockname()[1]}", "-b", f":{port}", "--timeout", "1s")
        t.join()
    assert peers == [("127.0.0.1", port)]


def test_stag_send_spreads_the_pairs_over_a_period(dw_node, run_client, tmp_path):
    node = dw_node()
    out = tmp_path / "recs.csv"
    run_client("--to", node.addr, "--nt", 2, "-p", "100ms", "-n", 3, "--stag-send", "-o", out)
    recs = read_records(out)
    first = {t: min(r["send_us"] for r in recs if r["thread"] == t) for t in ("0", "1")}
    assert 35000 <= first["1"] - first["0"] <= 70000, first  # half of the 100 ms period


def test_conn_times_and_non_block(dw_node, run_client):
    node = dw_node()
    res = run_client("--to", node.addr, "--ns", 3, "-n", 3, "--conn-times", "--non-block")
    assert res["ok"] == 3
    lines = re.findall(r"conn_time: [\d.]+ us, thr_id: 0, sess_id: (\d)", res.stdout)
    assert lines == ["0", "1", "2"]


def test_thread_affinity_auto_pins_workers_to_the_allowed_cpus(dw_node):
    allowed = sorted(os.sched_getaffinity(0))
    node = dw_node("--num-threads=2", "--thread-affinity=auto")
    pinned = []
    for task in pathlib.Path(f"/proc/{node.proc.pid}/task").iterdir():
        cpus = re.search(r"Cpus_allowed_list:\s*(\S+)", (task / "status").read_text()).group(1)
        if cpus.isdigit():
            pinned.append(int(cpus))
    assert sorted(pinned) == [allowed[0], allowed[1 % len(allowed)]]


def test_loops_per_usec_makes_every_compute_a_loop(dw_node, run_client):
    calibrated = dw_node("--loops-per-usec", 0)
    assert "every COMPUTE runs a loop of" in calibrated.log()
    assert run_client("--to", calibrated.addr, "-C", "5ms")["latency_us"]["min"] >= 4500
    tiny = dw_node("--loops-per-usec", 1)  # 20 ms of COMPUTE is 20000 iterations: microseconds
    assert run_client("--to", tiny.addr, "-C", "20ms")["latency_us"]["max"] < 10000


@pytest.mark.parametrize("options", [["--backlog-length", "16"], ["--bl", "16"], ["--no-defrag"]])
def test_other_node_options_are_accepted(dw_node, run_client, options):
    assert run_client("--to", dw_node(*options).addr, "-C", "0")["ok"] == 1


def test_usage_and_help(binaries):
    usage = run(binaries, "client", "--usage")
    assert usage.returncode == 0 and usage.stdout.startswith("usage: wl-client [--to ADDR] [-b ADDR]")
    helped = run(binaries, "client", "-h").stdout
    assert "  -R, --rs, --reply[=[sendfile,]BYTES]" in helped and "--retry-num N" in helped


@pytest.mark.parametrize(
    "spec, mean",
    [  # test_distrib.sh's specs, DistWalk's syntax
        ("15K", 15000),
        ("aseq:1000:max=2000", 1499.5),
        ("aseq:min=1000:max=2000:step=250", 1500),
        ("gseq:1:max=16", 6.2),
        ("gseq:min=1:max=16:step=2", 6.2),
        ("aseq:min=1:max=4:step=-1", 2.5),
        ("exp:20", 20),
        ("exp:20:min=10:max=40", None),
        ("norm:20:std=5", 20),
        ("lognorm:3:std=1", 3),
        ("lognorm:xavg=3:xstd=1", 33.115),
        ("gamma:20:k=2:scale=2", 4),
        ("unif:min=20:max=40", 30),
    ],
)
def test_distwalk_value_specs(binaries, spec, mean):
    got = json.loads(run(binaries, "client", "--sample", spec, "-n", 20000, "--seed", 5).stdout)
    if mean is None:
        assert 10 <= got["min"] and got["max"] <= 40
    else:
        assert got["mean"] == pytest.approx(mean, rel=0.03)


def test_distwalk_file_spec_counts_columns_from_zero(binaries, tmp_path):
    data = tmp_path / "d.txt"
    data.write_text("1;10\n2;20\n3;30\n")
    first = run(binaries, "client", "--sample", f"file:{data}:sep=;", "-n", 3).stdout
    second = run(binaries, "client", "--sample", f"file:{data}:sep=;:col=1:unit=k", "-n", 3).stdout
    assert '"mean":2.000000' in first and '"mean":20000.000000' in second
