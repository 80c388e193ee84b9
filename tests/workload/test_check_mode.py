"""--check: the binaries' own parser validates a chain before a run (issue
14 item 2).  It parses exactly as a run would (-f files, distributions,
chains), prints one JSON line, and opens no socket, resolves no name,
creates no file and starts no thread; --names makes any other target host
an error.  A bad command line is one line on stderr and exit 2."""

import json
import os
import shutil
import subprocess

import pytest
from dw_support import free_port, run
from wl_support import sanitizer_env


def check(binaries, *args, prog="client"):
    proc = run(binaries, prog, "--check", *args)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.count("\n") == 1
    return json.loads(proc.stdout)


def test_client_chain_as_written(binaries):
    got = check(
        binaries,
        "--names",
        "front,db,db-2",
        "--to",
        "front",
        "-C",
        "10ms",
        "-F",
        "db,db-2:7000,nack=1",
        "-S",
        "sync,10k",
        "-L",
        "size=[unif:min=0:max=1023],offset=[unif:min=0:max=3071]",
        "-R",
        "--skip",
        "1,prob=0.5,every=2",
        "-C",
        "5ms,wall",
    )
    assert got == {
        "program": "wl-client",
        "to": "front",
        "port": 7891,
        "proto": "tcp",
        "chain": [
            {"op": "compute", "time": "10ms"},
            {
                "op": "forward",
                "to": ["db", "db-2"],
                "port": 7891,
                "nack": 1,
                "proto": "tcp",
                "ports": [7891, 7000],
                "chain": [
                    {"op": "store", "bytes": "10k", "sync": "sync"},
                    {"op": "load", "bytes": "unif:min=0:max=1023", "offset": "unif:min=0:max=3071"},
                ],
            },
            {"op": "skip", "count": 1, "prob": 0.5, "every": 2},
            {"op": "compute", "time": "5ms", "clock": "wall"},
        ],
    }


def test_branches_nest_one_chain_per_target(binaries):
    got = check(
        binaries,
        "--to",
        "udp://10.0.0.1:9000",
        "-F",
        "a,branch,nack=2",
        "-S",
        "nosync,1k",
        "-F",
        "b,c,branch",
        "-F",
        "d",
        "-C",
        "1",
        "-R",
        "-R",
        "-S",
        "psync,2k",
    )
    fwd_d = {
        "op": "forward",
        "to": ["d"],
        "port": 7891,
        "nack": 1,
        "proto": "tcp",
        "chain": [{"op": "compute", "time": "1"}],
    }
    assert got == {
        "program": "wl-client",
        "to": "10.0.0.1",
        "port": 9000,
        "proto": "udp",
        "chain": [
            {
                "op": "forward",
                "to": ["a", "b", "c"],
                "port": 7891,
                "nack": 2,
                "proto": "tcp",
                "branches": [[{"op": "store", "bytes": "1k", "sync": "nosync"}], [fwd_d], [fwd_d]],
            },
            {"op": "store", "bytes": "2k", "sync": "psync"},
        ],
    }


def test_our_branch_form_and_paper_quorum(binaries):
    got = check(binaries, "--to", "node0", "-F", "node1,node2,node3,2", "-S", "10k,sync")
    assert got["chain"] == [
        {
            "op": "forward",
            "to": ["node1", "node2", "node3"],
            "port": 7891,
            "nack": 2,
            "proto": "tcp",
            "chain": [{"op": "store", "bytes": "10k", "sync": "sync"}],
        }
    ]
    got = check(binaries, "-F", "a,b,c,branch", "-C", "1", "--next-branch", "-C", "2")
    assert got["chain"][0]["branches"] == [[{"op": "compute", "time": "1"}], [{"op": "compute", "time": "2"}], []]


def test_script_files_and_resolve_are_read(binaries, tmp_path):
    inner = tmp_path / "inner.dw"
    inner.write_text("-S 1k   # a STORE, synced\n")
    outer = tmp_path / "outer.dw"
    outer.write_text(f"# the chain\n-C 2ms\n-f {inner}\n--rs=1024\n")
    got = check(binaries, "--resolve", "front=10.1.2.3:7000", "--to", "front", "-f", str(outer), "-C", "3ms")
    assert got == {
        "program": "wl-client",
        "to": "front",
        "port": 7000,
        "proto": "tcp",
        "chain": [
            {"op": "compute", "time": "2ms"},
            {"op": "store", "bytes": "1k", "sync": "sync"},
            {"op": "compute", "time": "3ms"},
        ],
    }


@pytest.mark.parametrize(
    "args, message",
    [
        (["--names", "front,db", "--to", "front", "-F", "dbx", "-C", "1"], "wl-client: -F: unknown target 'dbx'"),
        (["--names", "front", "--to", "back"], "wl-client: --to: unknown target 'back'"),
        (["--names", "", "--to", "10.0.0.1", "-F", "db"], "wl-client: -F: unknown target 'db'"),
        (["-C", "10xs"], "wl-client: -C: '10xs' has an unknown suffix 'xs'"),
        (["-S", "10k,sometimes"], "wl-client: -S: '10k,sometimes': unexpected word 'sometimes'"),
        (["-F", "a,b,nack=3"], "wl-client: -F 'a,b,nack=3': nack 3 is above the 2 targets"),
        (["-L", "size=[1k"], "wl-client: -L: 'size=[1k': a '[' without its closing ']'"),
        (["--skip", "1,every=0"], "wl-client: --skip '1,every=0': '0' is not a whole number within 1..4294967295"),
        (["-n", "auto"], "wl-client: -n auto: needs -r or -p with a sequence"),
        (["--nd", "2"], "wl-client: --nd: expected 0 or 1, not '2'"),
        (["--fwd-end"], "wl-client: --fwd-end: no -F is open"),
        (["--bogus"], "wl-client: unknown option '--bogus' (see --help)"),
        (["-C"], "wl-client: option '-C' needs a value"),
        (["--to", "ssl://x"], "wl-client: --to: 'ssl://x': ssl is not supported"),
        (["--ssl-cert", "c.pem"], "wl-client: --ssl-cert: TLS is not supported"),
        (["-f", "/nonexistent/script"], "wl-client: -f /nonexistent/script: No such file or directory"),
    ],
)
def test_bad_command_line_is_one_line_and_exit_2(binaries, args, message):
    proc = run(binaries, "client", "--check", *args)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert proc.stderr.startswith(message) and proc.stderr.count("\n") == 1, proc.stderr


def test_names_may_carry_ports_and_ip_literals_pass(binaries):
    got = check(binaries, "--names", "db:7000,web", "--to", "web:80", "-F", "db:7000,10.0.0.9,[::1]:9", "-C", "1")
    assert got["to"] == "web" and got["chain"][0]["to"] == ["db", "10.0.0.9", "::1"]


def test_no_name_goes_to_dns(binaries):
    got = check(binaries, "--to", "nosuchhost.invalid", "-F", "other.invalid", "-C", "1")
    assert got["to"] == "nosuchhost.invalid" and got["chain"][0]["to"] == ["other.invalid"]
    proc = run(binaries, "client", "--to", "nosuchhost.invalid")
    assert proc.returncode == 2 and "cannot resolve 'nosuchhost.invalid'" in proc.stderr


def test_node_listen_addresses(binaries, tmp_path):
    port = free_port()
    got = check(
        binaries,
        "-b",
        f"tcp://0.0.0.0:{port}",
        "-b",
        "udp://node1:7001",
        "-b",
        ":7002",
        "-s",
        str(tmp_path / "never"),
        "--nt",
        "2",
        prog="node",
    )
    assert got == {
        "program": "wl-node",
        "listen": [f"tcp://0.0.0.0:{port}", "udp://node1:7001", "tcp://127.0.0.1:7002"],
    }
    assert not (tmp_path / "never").exists()
    proc = run(binaries, "node", "--check", "-a", "sideways")
    assert proc.returncode == 2 and proc.stderr == "wl-node: -a: 'sideways' is not one of child, shared, parent\n"


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed (deps/apt-workload.txt)")
@pytest.mark.parametrize(
    "prog, args",
    [
        ("client", ["--to", "front", "-F", "db", "-C", "1", "--trace", "{tmp}/trace.json", "-o", "{tmp}/out.csv"]),
        ("node", ["-b", "127.0.0.1:7891", "-s", "{tmp}/storage", "--trace", "{tmp}/trace.json", "--nt", "4"]),
    ],
)
def test_check_opens_no_socket_creates_no_file_starts_no_thread(binaries, tmp_path, prog, args):
    log = tmp_path / "strace.txt"
    env = sanitizer_env()
    env["ASAN_OPTIONS"] += ":detect_leaks=0"  # LeakSanitizer cannot run under ptrace
    cmd = [
        "strace",
        "-f",
        "-qq",
        "-e",
        "trace=socket,connect,bind,clone,clone3,fork,vfork,openat,creat",
        "-o",
        str(log),
        str(binaries[prog]),
        "--check",
        *(a.format(tmp=tmp_path) for a in args),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    calls = log.read_text().splitlines()
    forbidden = [
        c
        for c in calls
        if any(
            f" {s}(" in c or c.split(None, 1)[-1].startswith(f"{s}(")
            for s in ("socket", "connect", "bind", "clone", "clone3", "fork", "vfork")
        )
    ]
    assert forbidden == [], forbidden
    assert [c for c in calls if "O_CREAT" in c] == []
    assert sorted(os.listdir(tmp_path)) == ["strace.txt"]
