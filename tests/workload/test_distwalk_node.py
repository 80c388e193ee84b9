"""DistWalk's node command lines, as its current test scripts write them
(github.com/tomcucinotta/distwalk test/*.sh): each accepted line starts a
wl-node that serves a request; each line DistWalk refuses is refused with
one line on stderr and exit 2.  Fixed ports become free loopback ports
(dw_support.localize); a line without -b gets -b 127.0.0.1:0 and one
without -s a private storage file.  TLS (ssl://, --ssl-*) and DPDK lines
are out of scope."""

import os
import re
import shlex
import socket

import pytest
from dw_support import DW_PORTS, dw_node, free_port, run  # noqa: F401 (dw_node is a fixture)

# (script, node options, what the node's announcement or threads must show)
ACCEPTED = [
    ("test_accept_mode.sh", "-a child", "accept mode child"),
    ("test_accept_mode.sh", "--accept-mode child", "accept mode child"),
    ("test_accept_mode.sh", "-a parent", "accept mode parent"),
    ("test_accept_mode.sh", "--accept-mode parent", "accept mode parent"),
    ("test_accept_mode.sh", "-a shared", "accept mode shared"),
    ("test_accept_mode.sh", "--accept-mode shared", "accept mode shared"),
    ("test_accept_mode.sh", "-a child --num-threads=2", "(2 workers, accept mode child)"),
    ("test_accept_mode.sh", "-a parent --num-threads=2", "(2 workers, accept mode parent)"),
    ("test_accept_mode.sh", "-a shared --num-threads=2", "(2 workers, accept mode shared)"),
    ("test_accept_mode_parent.sh", "-a parent --nt 3", "(3 workers, accept mode parent)"),
    ("test_accept_mode_parent.sh", "-a parent --nt 2", "(2 workers, accept mode parent)"),
    ("test_forward.sh", "-b :7891", "listening on tcp://127.0.0.1:"),
    ("test_forward.sh", "-b :7892", "listening on tcp://127.0.0.1:"),
    ("test_loadstore.sh", "-s {tmp}/store", "listening"),
    ("test_loadstore.sh", "-s {tmp}/store --sync=100", "listening"),
    ("test_loadstore_odirect.sh", "-s {tmp}/store --odirect", "listening"),
    ("test_node_affinity.sh", "--thread-affinity=auto", "(1 workers"),
    ("test_node_affinity.sh", "--num-threads=2 --thread-affinity=auto", "(2 workers"),
    ("test_node_affinity.sh", "--num-threads=4 --thread-affinity=auto", "(4 workers"),
    ("test_node_affinity.sh", "--thread-affinity=2-2", "listening"),
    ("test_node_affinity.sh", "--thread-affinity=2", "listening"),
    ("test_node_opts.sh", "", "(1 workers"),
    ("test_node_opts.sh", "--num-threads=2", "(2 workers"),
    ("test_node_opts.sh", "-b :7000", "listening on tcp://127.0.0.1:"),
    ("test_node_opts.sh", "-b udp://:7000", "listening on udp://127.0.0.1:"),
    ("test_node_opts.sh", "--nd=0", "listening"),
    ("test_node_opts.sh", "--nd=1", "listening"),
    ("test_node_opts.sh", "--ws", "listening"),
    ("test_node_opts.sh", "--wss", "listening"),
    ("test_poll_mode.sh", "-p select", "listening"),
    ("test_poll_mode.sh", "--poll-mode select", "listening"),
    ("test_poll_mode.sh", "-p poll", "listening"),
    ("test_poll_mode.sh", "--poll-mode poll", "listening"),
    ("test_poll_mode.sh", "-p epoll", "listening"),
    ("test_poll_mode.sh", "--poll-mode epoll", "listening"),
    ("test_sched.sh", "--sched-policy=other", "listening"),
    ("test_sched.sh", "--sched-policy=rr:7", "listening"),
    ("test_sched.sh", "--sched-policy=rr:7 --nt=2", "(2 workers"),
    ("test_sched.sh", "--sched-policy=fifo:7", "listening"),
    ("test_sched.sh", "--sched-policy=fifo:7 --nt=2", "(2 workers"),
    ("test_simple_ports.sh", "-b tcp://:7894", "listening on tcp://127.0.0.1:"),
    ("test_simple_udp.sh", "-b udp://:7891", "listening on udp://127.0.0.1:"),
]

# Lines DistWalk's scripts expect to fail ("! node_bg ..."), and what we say.
REFUSED = [
    ("test_accept_mode.sh", "-a xxx --num-threads=2", "-a: 'xxx' is not one of child, shared, parent"),
    ("test_accept_mode.sh", "--accept-mode xxx --num-threads=2", "--accept-mode: 'xxx' is not one of child"),
    ("test_accept_mode.sh", "-a child1 --num-threads=2", "'child1' is not one of child, shared, parent"),
    ("test_accept_mode.sh", "-a parent1 --num-threads=2", "'parent1' is not one of child, shared, parent"),
    ("test_node_opts.sh", "-b udp::7000", "expected udp://host:port or udp:host:port"),
    ("test_node_opts.sh", "-b udp:tcp://:7000", "unknown protocol 'udp:tcp'"),
    ("test_node_opts.sh", "-b :7000://:tcp", "unknown protocol ':7000'"),
    ("test_poll_mode.sh", "-p xxx", "-p: 'xxx' is not one of epoll, poll, select"),
    ("test_poll_mode.sh", "--poll-mode xxx", "--poll-mode: 'xxx' is not one of epoll, poll, select"),
    ("test_poll_mode.sh", "-p select1", "'select1' is not one of epoll, poll, select"),
    ("test_poll_mode.sh", "--poll-mode poll1", "'poll1' is not one of epoll, poll, select"),
    ("test_sched.sh", "--sched-policy=xxx", "expected other:NICE, rr:PRIO, fifo:PRIO or deadline"),
    ("test_sched.sh", "--sched-policy=rr", "expected other:NICE, rr:PRIO, fifo:PRIO or deadline"),
    ("test_sched.sh", "--sched-policy=fifo", "expected other:NICE, rr:PRIO, fifo:PRIO or deadline"),
    ("test_sched.sh", "--sched-policy=dl", "expected other:NICE, rr:PRIO, fifo:PRIO or deadline"),
    ("test_sched.sh", "--sched-policy=dl:10000", "dl needs RUNTIME,DEADLINE[,PERIOD]"),
]


def localized(options, tmp_path):
    args = shlex.split(options.format(tmp=tmp_path))
    udp = any("udp://" in a for a in args)
    ports = {p: free_port(socket.SOCK_DGRAM if udp else socket.SOCK_STREAM) for p in (*DW_PORTS, 7000)}
    return [re.sub(r"(?<=:)(\d{4})\b", lambda m: str(ports.get(int(m.group(1)), m.group(1))), a) for a in args]


@pytest.mark.parametrize("case", ACCEPTED, ids=lambda c: f"{c[0]}: {c[1] or '(no options)'}")
def test_distwalk_node_line(case, dw_node, run_client, tmp_path):
    script, options, shown = case
    if re.search(r"rr:|fifo:", options) and os.geteuid() != 0:
        pytest.skip("real-time policies need root (CAP_SYS_NICE)")
    node = dw_node(*localized(options, tmp_path))
    assert shown in node.log()
    to = f"udp://127.0.0.1:{node.udp_port}" if "udp" in node.ports else node.addr
    ops = ["-S", "256"] if "--wss" in options else ["-C", "100us"]
    assert run_client("--to", to, *ops)["ok"] == 1


def test_sched_deadline_dl_form(binaries, dw_node, run_client):
    """DistWalk's dl:RUNTIME,DEADLINE: the period is the deadline, times in us."""
    try:
        node = dw_node("--sched-policy=dl:10000,20000", "--nt=2")
    except AssertionError as refused:  # not every kernel admits SCHED_DEADLINE here
        assert "sched_setattr SCHED_DEADLINE 10000000/20000000/20000000 ns" in str(refused)
        return
    assert run_client("--to", node.addr, "-C", "100us")["ok"] == 1


def test_no_options_and_udp_default_port_listen_where_expected(binaries):
    """Without -b: every address (0.0.0.0, a deliberate difference from
    DistWalk's localhost, so that other emulated hosts reach the node);
    "-b udp://" is DistWalk's localhost and default port."""
    assert run(binaries, "node", "--check").stdout == '{"program":"wl-node","listen":["tcp://0.0.0.0:7891"]}\n'
    out = run(binaries, "node", "--check", "-b", "udp://").stdout
    assert out == '{"program":"wl-node","listen":["udp://127.0.0.1:7891"]}\n'


@pytest.mark.parametrize("options", ["--help", "-h", "--usage"])
def test_help_and_usage(options, binaries):
    proc = run(binaries, "node", options)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: wl-node") and proc.stderr == ""


@pytest.mark.parametrize("script, options, message", REFUSED, ids=[f"{r[0]}: {r[1]}" for r in REFUSED])
def test_distwalk_refuses_these_and_so_do_we(script, options, message, binaries):
    proc = run(binaries, "node", *shlex.split(options))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
