"""Inside the VM: the eBPF counters load and count on Debian's stock kernel.

The host builds tcal/build/libcxcounters.so (`make -C tcal`); the guest sees
the repository read-only and only loads it.  This is where compatibility with
kernel 6.1 is checked: the verifier of that kernel must accept the program
and the CO-RE object must relocate against its BTF.
"""

import json
import math
import platform
import subprocess
import sys

from netns_helpers import sh

from collapsar.tcal.counters import ETHERNET_OVERHEAD_BYTES, Counters, DestCounter

PING_FRAME = 14 + 20 + 8 + 56  # Ethernet + IPv4 + ICMP + ping's default payload
NBYTES = 300_000

RECEIVER = r"""
import socket, sys
srv = socket.socket()
srv.bind((sys.argv[1], 5301))
srv.listen(1)
print("ready", flush=True)
conn, _ = srv.accept()
total = 0
while chunk := conn.recv(1 << 16):
    total += len(chunk)
print(total, flush=True)
"""

SENDER = r"""
import socket, sys
s = socket.create_connection((sys.argv[1], 5301))
mss = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)
s.sendall(b"c" * int(sys.argv[2]))
s.shutdown(socket.SHUT_WR)
s.recv(1)
print(mss)
"""


def test_counters_load_and_count_on_the_stock_kernel(make_netns_pair):
    pair = make_netns_pair(n_dst=2)
    ping_dst, tcp_dst = pair.dst_ips
    print(f"counters on kernel {platform.release()}")
    with Counters(pair.src_if, pair.src_ns) as c:
        sh("ping", "-n", "-c", "5", "-i", "0.2", ping_dst, ns=pair.src_ns)
        recv = subprocess.Popen(
            ["ip", "netns", "exec", pair.dst_ns, sys.executable, "-c", RECEIVER, tcp_dst],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert recv.stdout.readline().strip() == "ready"
            mss = int(sh(sys.executable, "-c", SENDER, tcp_dst, str(NBYTES), ns=pair.src_ns, timeout=300).stdout)
            received = int(recv.communicate(timeout=60)[0])
        finally:
            if recv.poll() is None:
                recv.kill()
                recv.wait()
        got = c.read()
        _, _, prog_id = c.filter_id()
    assert received == NBYTES
    assert got[ping_dst] == DestCounter(5 * PING_FRAME, 5, 5 * (PING_FRAME + ETHERNET_OVERHEAD_BYTES))
    # Full-MSS segments each with their own headers and overhead, plus the
    # handshake and FIN packets.
    per_packet = pair_mtu(pair) - mss + 14 + ETHERNET_OVERHEAD_BYTES
    want = NBYTES + (math.ceil(NBYTES / mss) + 4) * per_packet
    assert abs(got[tcp_dst].wire_bytes - want) <= 0.01 * want
    assert prog_id > 0
    # Detached: the filter is gone from the stock kernel's tc too.
    shown = sh("tc", "filter", "show", "dev", pair.src_if, "egress", ns=pair.src_ns).stdout
    assert shown.strip() == ""


def pair_mtu(pair) -> int:
    link = json.loads(sh("ip", "-j", "link", "show", "dev", pair.src_if, ns=pair.src_ns).stdout)[0]
    return link["mtu"]
