"""DistWalk's own command lines, as its current test scripts write them
(github.com/tomcucinotta/distwalk, test/*.sh and script/test_sendfile.sh),
run by wl-client against real wl-nodes on loopback, each checked for the
replies it must get.  Only addresses change: DistWalk's fixed ports (:7891,
:7892, ..., -b :8000) become free loopback ports (dw_support.localize) and a
line without --to gets one.  Lines that would run for long are shortened,
and say so.  DPDK, TLS (ssl://, --ssl-*) and dw_proxy lines are out of
scope: wl-client and wl-node speak plain TCP and UDP.  The node lines of the
same scripts are in test_distwalk_node.py, each new option's meaning in
test_distwalk_options.py."""

import re
import shlex

import pytest
from dw_support import DW_PORTS, dw_node, free_port, localize, run  # noqa: F401 (dw_node is a fixture)

pytestmark = pytest.mark.timing  # latencies of COMPUTE chains on a shared box

STORE_OFFSETS = (
    "size=[1024],offset=[unif:min=0:max=3071]",
    "offset=[unif:min=0:max=3071],size=[1024]",
    "size=[unif:min=0:max=1023],offset=[unif:min=0:max=3071]",
    "offset=[unif:min=0:max=3071],size=[unif:min=0:max=1023]",
    "offset=[unif:min=0:max=3071],1024",
    "offset=[unif:min=0:max=3071],unif:min=0:max=3071",
)

# (script, command line, DistWalk ports with a node, node options, expected summary, node checks)
# node checks: {dw_port: {counter: value}} from the nodes' SIGUSR1 stats.
LINES = [
    (
        "test_accept_mode_parent.sh",
        "-C 1000 -n 3 --ns 3",
        {7891},
        "-a parent --nt 3",
        {"ok": 3},
        {7891: {"accepted": 3}},
    ),
    ("test_accept_mode_parent.sh", "-C 1s -p 1s --nt 4", {7891}, "-a parent --nt 2", {"ok": 4}, {}),
    ("test_client_opts.sh", "-C 500 -n 10 -p 1000", {7891}, "", {"ok": 10}, {}),
    ("test_client_opts.sh", "-C 500 -n 10 -r 1000", {7891}, "", {"ok": 10}, {}),
    ("test_client_opts.sh", "-C 500 -n 10 -p 100000", {7891}, "", {"ok": 10}, {}),
    ("test_client_opts.sh", "-C 500 -n 10 -r 10", {7891}, "", {"ok": 10}, {}),
    ("test_client_opts.sh", "--ps=1024", {7891}, "", {"ok": 1}, {7891: {"bytes_in": 1024}}),
    ("test_client_opts.sh", "--rs=1024", {7891}, "", {"ok": 1}, {7891: {"bytes_out": 1024}}),
    ("test_client_opts.sh", "--nd 0 -C 1000", {7891}, "", {"ok": 1}, {}),
    ("test_client_opts.sh", "--nd 1 -C 1000", {7891}, "", {"ok": 1}, {}),
    ("test_client_opts.sh", "--nd=0", {7891}, "", {"ok": 1}, {}),
    ("test_client_opts.sh", "--nd=1", {7891}, "", {"ok": 1}, {}),
    ("test_client_opts.sh", "--ws -C 0", {7891}, "", {"ok": 1}, {}),
    ("test_client_opts.sh", "--wait-spin -C 0", {7891}, "", {"ok": 1}, {}),
    ("test_client_output.sh", "-n 1 --output {tmp}/out.csv", {7891}, "", {"ok": 1}, {}),
    ("test_client_output.sh", "-n 1 --output {tmp}/out-sep.csv,sep=;", {7891}, "", {"ok": 1}, {}),
    ("test_client_output.sh", "-n 1 --output {tmp}/out-header.csv,header=true", {7891}, "", {"ok": 1}, {}),
    ("test_client_output.sh", "-n 1 --output {tmp}/out-header-one.csv,header=1", {7891}, "", {"ok": 1}, {}),
    ("test_client_output.sh", "-n 1 --output {tmp}/out-no-header-false.csv,header=false", {7891}, "", {"ok": 1}, {}),
    ("test_client_output.sh", "-n 1 --output {tmp}/out-no-header-zero.csv,header=0", {7891}, "", {"ok": 1}, {}),
    ("test_client_output.sh", "-n 1 --output {tmp}/out-sep-header.csv,sep=#,header=true", {7891}, "", {"ok": 1}, {}),
    ("test_client_output.sh", "-n 1 --nano --output {tmp}/out-nano.csv,sep=;,header=true", {7891}, "", {"ok": 1}, {}),
    (
        "test_client_output.sh",
        "-n 1 --output \"{tmp}/out-quoted-sep.csv,sep=';',header=false\"",
        {7891},
        "",
        {"ok": 1},
        {},
    ),
    ("test_client_output.sh", "-n 2 --output {tmp}/out-n2.csv", {7891}, "", {"ok": 2}, {}),
    ("test_client_output.sh", "-n 1 --output {tmp}/out.txt,sep=|", {7891}, "", {"ok": 1}, {}),
    ("test_client_output.sh", "-n 1", {7891}, "", {"ok": 1}, {}),
    (
        "test_client_ramp.sh",
        "-C 500 -n 15 -r aseq:min=1:max=10 --rate-step-secs=1  # shortened: -n 100",
        {7891},
        "",
        {"ok": 15},
        {},
    ),
    ("test_client_ramp.sh", "-C 500 -n auto -r aseq:min=1:max=10 --rate-step-secs=1", {7891}, "", {"ok": 55}, {}),
    (
        "test_client_ramp.sh",
        "-C 500 -n 5 -r file:{rates} --rate-step-secs=1  # shortened: -n 100",
        {7891},
        "",
        {"ok": 5},
        {},
    ),
    (
        "test_client_ramp.sh",
        "-C 500 -n auto -r file:{rates} --rate-step-secs=1  # rates 1..4, not 1..10",
        {7891},
        "",
        {"ok": 10},
        {},
    ),
    ("test_compute.sh", "-b :8000 -C 10000", {7891}, "", {"ok": 1}, {}),
    ("test_compute.sh", "-b :8001 -C 10000 -C 20000", {7891}, "", {"ok": 1}, {}),
    ("test_conn_drop.sh", "-n 3 -C 100000 -p 1000000", {7891}, "", {"ok": 3}, {}),
    ("test_conn_drop.sh", "-n 3 -C 800000 -p 1000000", {7891}, "", {"ok": 3}, {}),
    (
        "test_conn_drop.sh",
        "-n 20 -C 100 -p 1000 --ps=4194304  # shortened: -n 1000",
        {7891},
        "",
        {"ok": 20},
        {7891: {"bytes_in": 20 * 4194304}},
    ),
    ("test_forward.sh", "-C 1000 -F localhost:7892 -C 2000", {7891, 7892}, "", {"ok": 1}, {7892: {"requests": 1}}),
    ("test_forward.sh", "-C 1000 -F 127.0.0.1:7892 -C 2000", {7891, 7892}, "", {"ok": 1}, {7892: {"requests": 1}}),
    (
        "test_forward.sh",
        "--to=tcp://:7891 -C 1000 -F :7892 -C 2000",
        {7891, 7892},
        "",
        {"ok": 1},
        {7892: {"requests": 1}},
    ),
    ("test_forward.sh", "-C 1000 -F localhost:7895 -C 2000", {7891}, "", {"err": 1}, {7891: {"fwd_errors": 1}}),
    (
        "test_forward.sh",
        "-F :7892 -C 1000 -R -F :7893 -C 2000 -R",
        {7891, 7892, 7893},
        "",
        {"ok": 1},
        {7891: {"forwards": 2}, 7892: {"requests": 1}, 7893: {"requests": 1}},
    ),
    (
        "test_forward.sh",
        "-F :7892 -C 1000 -F :7893 -C 2000 -C 3000 -R",
        {7891, 7892, 7893},
        "",
        {"ok": 1},
        {7891: {"forwards": 1}, 7892: {"forwards": 1}, 7893: {"requests": 1}},
    ),
    ("test_forward_self.sh", "-C 1000 -F localhost -C 2000", {7891}, "", {"ok": 1}, {7891: {"requests": 2}}),
    ("test_forward_self.sh", "-C 1000 -F 127.0.0.1 -C 2000", {7891}, "", {"ok": 1}, {7891: {"requests": 2}}),
    (
        "test_forward_self.sh",
        "--to=tcp://:7891 -C 1000 -F :7891 -C 2000",
        {7891},
        "",
        {"ok": 1},
        {7891: {"requests": 2}},
    ),
    (
        "test_forward_skip.sh",
        "-C 1000 --skip=1,every=2 -F localhost:7892 -C 10ms -n 10",
        {7891, 7892},
        "",
        {"ok": 10},
        {7892: {"requests": 5}},
    ),
    ("test_forward_timeout.sh", "-C 1000 -F :7892 -C 2000", {7891}, "", {"err": 1}, {}),
    ("test_forward_timeout.sh", "-C 1000 -F :7892 -C 2000", {7891, 7892}, "", {"ok": 1}, {}),
    (
        "test_forward_timeout.sh",
        "-C 1000 -F timeout=500000,retry=50,:7892 -C 2000  # :7892 up from the start",
        {7891, 7892},
        "",
        {"ok": 1},
        {},
    ),
    (
        "test_forward_timeout.sh",
        "--to :7891 -C 100 -F :7892 -C 200 -F :7893 -C 300",
        {7891, 7892},
        "",
        {"err": 1},
        {7892: {"fwd_errors": 1}},
    ),
    (
        "test_forward_timeout.sh",
        "--to :7891 -C 100 -F :7892,:7893 -C 200  # DistWalk: TIMEOUT",
        {7891, 7892},
        "",
        {"err": 1},
        {},
    ),
    (
        "test_forward_timeout.sh",
        "--to :7891 -C 100 -F :7892,:7893,nack=1 -C 200 --rs=1000",
        {7891, 7892},
        "",
        {"ok": 1},
        {7892: {"bytes_out": 1000}},
    ),
    (
        "test_forward_timeout.sh",
        "-F :7892,branch,nack=2 -C 1000 -F :7893,:7894,branch -C 2000 -R",
        {7891, 7892, 7893},
        "",
        {"ok": 1},
        {7891: {"forwards": 3}},
    ),
    (
        "test_forward_timeout.sh",
        "-F :7892,branch,timeout=500ms,retry=50 -C 1000 -F :7893,:7894,branch -C 2000 -R  # :7894 up from the start",
        {7891, 7892, 7893, 7894},
        "",
        {"ok": 1},
        {7894: {"requests": 1}},
    ),
    ("test_loadstore.sh", "-S 32000000", {7891}, "", {"ok": 1}, {7891: {"stores": 1, "fsyncs": 1}}),
    ("test_loadstore.sh", "-L 1024", {7891}, "", {"ok": 1}, {7891: {"loads": 1}}),
    ("test_loadstore.sh", "-L unif:min=1024:max=2047", {7891}, "", {"ok": 1}, {7891: {"loads": 1}}),
    ("test_loadstore.sh", "--load-offset 0 -L 1024", {7891}, "", {"ok": 1}, {7891: {"loads": 1}}),
    ("test_loadstore.sh", "--load-offset unif:min=0:max=3071 -L 1024", {7891}, "", {"ok": 1}, {7891: {"loads": 1}}),
    *[("test_loadstore.sh", f"-L {spec}", {7891}, "", {"ok": 1}, {7891: {"loads": 1}}) for spec in STORE_OFFSETS],
    ("test_loadstore.sh", "--store-offset 17 -S 65536", {7891}, "", {"ok": 1}, {7891: {"stores": 1}}),
    ("test_loadstore.sh", "--store-offset 31 -S 65536", {7891}, "", {"ok": 1}, {7891: {"stores": 1}}),
    ("test_loadstore.sh", "--store-offset 0 -S sync,65536", {7891}, "", {"ok": 1}, {7891: {"fsyncs": 1}}),
    ("test_loadstore.sh", "--store-offset 0 -S nosync,65536", {7891}, "", {"ok": 1}, {7891: {"fsyncs": 0}}),
    ("test_loadstore.sh", "--store-offset unif:min=0:max=3071 -S 1024", {7891}, "", {"ok": 1}, {7891: {"stores": 1}}),
    *[("test_loadstore.sh", f"-S {spec}", {7891}, "", {"ok": 1}, {7891: {"stores": 1}}) for spec in STORE_OFFSETS],
    ("test_loadstore_odirect.sh", "-S 33554432", {7891}, "--odirect", {"ok": 1}, {7891: {"stores": 1}}),
    ("test_loadstore_odirect.sh", "-L 33554432", {7891}, "--odirect", {"ok": 1}, {7891: {"loads": 1}}),
    (
        "test_multi_forward.sh",
        "-F :7892,:7893 -C 1000 -C 2000 -R",
        {7891, 7892, 7893},
        "",
        {"ok": 1},
        {7892: {"requests": 1}, 7893: {"requests": 1}},
    ),
    (
        "test_multi_forward.sh",
        "-F :7892,branch -C 1111 -F:7893,branch -C 2222 -R",
        {7891, 7892, 7893},
        "",
        {"ok": 1},
        {7892: {"requests": 1}, 7893: {"requests": 1}},
    ),
    (
        "test_multi_forward.sh",
        "-F :7892,branch -C 2222 -F :7893,:7894,branch -C 3333 -R",
        {7891, 7892, 7893, 7894},
        "",
        {"ok": 1},
        {7892: {"requests": 1}, 7893: {"requests": 1}, 7894: {"requests": 1}},
    ),
    (
        "test_multi_forward.sh",
        "-F :7892,branch,nack=1 -C 5000 -F :7893,:7894,branch -C 1000000 -R",
        {7891, 7892, 7893, 7894},
        "",
        {"ok": 1},
        {},
    ),
    ("test_node_opts.sh", "", {7891}, "", {"ok": 1}, {}),
    ("test_poll_mode.sh", "-C 10ms -n 1", {7891}, "-p select", {"ok": 1}, {}),
    ("test_proxy.sh", "--to :7891 -C 0 -n 1  # no dw_proxy between", {7891}, "", {"ok": 1}, {}),
    ("test_retry_failure.sh", "--to=tcp://127.0.0.1:7894 --retry-num 2 --retry-period 200", {7891}, "", {"err": 1}, {}),
    ("test_script.sh", "-f {script}", {7891}, "", {"ok": 10}, {7891: {"bytes_in": 2560, "bytes_out": 10240}}),
    ("test_simple.sh", "", {7891}, "", {"ok": 1}, {}),
    ("test_simple.sh", "-n 10", {7891}, "", {"ok": 10}, {}),
    ("test_simple.sh", "-C 10000", {7891}, "", {"ok": 1}, {}),
    ("test_simple_ports.sh", "", {7894}, "", {"err": 1}, {}),
    ("test_simple_ports.sh", "--to=tcp://127.0.0.1:7894", {7894}, "", {"ok": 1}, {}),
    ("test_simple_ports.sh", "--to=127.0.0.0", {7894}, "", {"err": 1}, {}),
    ("test_simple_ports.sh", "--to=:7894", {7894}, "", {"ok": 1}, {}),
    ("test_skip.sh", "-C 50 --skip 1 -C 100", {7891}, "", {"ok": 1}, {}),
    ("test_skip.sh", "-C 50 --skip 2 -C 100 -C 150 -C 200", {7891}, "", {"ok": 1}, {}),
    ("test_skip.sh", "--skip 1,every=2 -C 100 -C 200 -n 2", {7891}, "", {"ok": 2}, {}),
    ("test_skip.sh", "-p 1000 -C 10 --skip 1,prob=0.5 -C 20 -n 100 --seed 17", {7891}, "", {"ok": 100}, {}),
    ("test_skip.sh", "-p 1000 -C 15 --skip 1,prob=0.3 -C 25 -n 100 --seed 17", {7891}, "", {"ok": 100}, {}),
    (
        "test_skip.sh",
        "-p 1000 -C 10 --skip 1,prob=0.5 -F :7892 -C 20 -n 100 --seed 17",
        {7891, 7892},
        "",
        {"ok": 100},
        {7891: {"requests": 100}},
    ),
    (
        "test_skip.sh",
        "-p 1000 -C 10 -F :7892 -C 20 --skip 1,prob=0.5 -F :7893 -C 30 -n 100 --seed 17",
        {7891, 7892, 7893},
        "",
        {"ok": 100},
        {7892: {"requests": 100}},
    ),
    ("test_stats.sh", "-C 1000", {7891}, "", {"ok": 1}, {}),
    ("test_stats.sh", "-C 1000 -n 200", {7891}, "", {"ok": 200}, {}),
    ("test_stats.sh", "-C 10ms -F :7892 -C 20ms", {7891, 7892}, "", {"ok": 1}, {7892: {"requests": 1}}),
    ("script/test_sendfile.sh", "-Rsendfile,16KB", {7891}, "", {"ok": 1}, {7891: {"loads": 1, "bytes_out": 16384}}),
    ("script/test_sendfile.sh", "-L 16KB -R16KB", {7891}, "", {"ok": 1}, {7891: {"loads": 1, "bytes_out": 16384}}),
]

# The lines of test_client_output.sh that DistWalk refuses, and why.
REFUSED = [
    ("--output {tmp}/out.data,sep=|", "need a .csv or .txt file"),
    ("--output {tmp}/bad-header.txt,header=true", "header= is for .csv files"),
    ("--output {tmp}/bad-header.csv,header=maybe", "header= expects true, false, 1 or 0, not 'maybe'"),
    ("--output {tmp}/bad-sep.csv,sep=", "sep= needs a separator character"),
    ("--output {tmp}/bad-sep.txt,sep=_", "'_' cannot separate the fields of a .txt file"),
    ("--output {tmp}/bad-colon.txt,sep=:", "':' cannot separate the fields of a .txt file"),
    ("--output {tmp}/bad-sep.csv,sep=_", "'_' cannot separate the fields of a .csv file"),
    ("--output ,sep=;", "no file name"),
]


def case_id(case):
    return f"{case[0]}: {case[1].split('  #')[0] or '(no options)'}"


def files(tmp_path):
    script = tmp_path / "script.dw"
    script.write_text("\n--ps 256\n-n 10\n-C 10000\n--rs=1024\n")
    rates = tmp_path / "rates.txt"
    rates.write_text("1\n2\n3\n4\n")
    return {"tmp": tmp_path, "script": script, "rates": rates}


@pytest.mark.parametrize("case", LINES, ids=case_id)
def test_distwalk_command_line(case, dw_node, run_client, tmp_path):
    script, line, live, node_opts, expect, node_expect = case
    nodes = {p: dw_node(*shlex.split(node_opts)) for p in sorted(live)}
    ports = {p: nodes[p].port if p in nodes else free_port() for p in DW_PORTS}
    ports.update({8000: free_port(), 8001: free_port()})
    args = localize(shlex.split(line.split("  #")[0].format(**files(tmp_path))), ports)
    res = run_client(*args, timeout=120)
    requests = sum(expect.values())
    assert res["requests"] == requests and res["unsent"] == 0, (args, res.summary)
    assert {k: res[k] for k in expect} == expect, (args, res.summary)
    for port, counters in node_expect.items():
        stats = nodes[port].stats()
        assert {k: stats[k] for k in counters} == counters, (args, stats)


def test_the_script_lines_mean_what_distwalk_means(dw_node, run_client, tmp_path):
    """The values the scripts check: compute times add up along the chain,
    a forward that waits for one reply does not wait for the slow branch,
    and DistWalk's record layouts are what its grep expects."""
    node = dw_node()
    two = run_client("--to", node.addr, "-C", "10000", "-C", "20000")
    assert two.lat["min"] >= 30000
    fast, slow = dw_node(), dw_node()
    res = run_client(
        "--to",
        node.addr,
        "-F",
        f":{fast.port},branch,nack=1",
        "-C",
        "5000",
        "-F",
        f":{slow.port},branch",
        "-C",
        "1000000",
        "-R",
    )
    assert res["ok"] == 1 and 5000 <= res.lat["max"] < 100000
    run_client("--to", node.addr, "-n", 2, "--output", f"{tmp_path}/n2.txt,sep=|")
    rows = (tmp_path / "n2.txt").read_text().splitlines()
    assert len(rows) == 2
    for i, row in enumerate(rows):
        assert re.fullmatch(rf"t:\d+\|elapsed:\d+\|req_id:{i}\|thr_id:0\|sess_id:0", row), rows
    run_client("--to", node.addr, "-n", 1, "--nano", "--output", f"{tmp_path}/nano.csv,sep=;,header=true")
    header, row = (tmp_path / "nano.csv").read_text().splitlines()
    assert header == "t(ns);elapsed(ns);req_id;thr_id;sess_id"
    assert re.fullmatch(r"\d+;\d+;0;0;0", row) and int(row.split(";")[1]) > 1000  # nanoseconds


@pytest.mark.parametrize("line, message", REFUSED, ids=[r[0] for r in REFUSED])
def test_distwalk_refuses_these_and_so_do_we(line, message, binaries, tmp_path):
    proc = run(binaries, "client", *shlex.split(line.format(tmp=tmp_path)))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
