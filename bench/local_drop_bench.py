"""One TCP flow through a class like Collapsar's, with a short and a long
leaf limit, in the stock-kernel VM (netem): does TCP live with the class's
local drops?

    python bench/local_drop_bench.py [--limits 15,1000] [--seconds 30]

Two scratch namespaces joined by a veth; the sender shapes as the TCAL
does (htb at 2 Mbit/s, under it netem with 25 ms of delay and the leaf
limit), the receiver delays its ACKs by 25 ms, the sender sends one frame
per packet (gso_max_segs 1) and uses CUBIC.  The default queue of such a
path (tcal.plan.default_queue_pkts) gives limit 15: 5 frames of delay line
and 10 of queue.  A drop at that limit is local: netem returns
NET_XMIT_DROP to the sender's own stack.  Per limit the bench prints the
sender's per-0.5 s rates, what arrived, retransmissions, the RTTs `ss`
saw (every 250 ms), TCP's timeout counters (nstat) and the leaf's drops.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from collapsar.vm import run_in_vm  # noqa: E402

GUEST = r"""
set -eu
out=$1; seconds=$2; shift 2
for limit in "$@"; do
  ip netns add cxldA; ip netns add cxldB
  ip link add cxldA0 netns cxldA type veth peer name cxldB0 netns cxldB
  ip -n cxldA addr add 10.99.0.1/24 dev cxldA0; ip -n cxldB addr add 10.99.0.2/24 dev cxldB0
  for ns in cxldA cxldB; do ip -n $ns link set lo up; done
  ip -n cxldA link set cxldA0 up gso_max_segs 1; ip -n cxldB link set cxldB0 up
  ip netns exec cxldB tc qdisc add dev cxldB0 root netem delay 25ms limit 1000
  ip netns exec cxldA tc qdisc add dev cxldA0 root handle 1: htb default 10
  ip netns exec cxldA tc class add dev cxldA0 parent 1: classid 1:10 htb rate 2mbit
  ip netns exec cxldA tc qdisc add dev cxldA0 parent 1:10 handle 10: netem delay 25ms limit "$limit"
  ip netns exec cxldA sysctl -qw net.ipv4.tcp_congestion_control=cubic
  ip netns exec cxldB iperf3 -s -1 -p 5999 >/dev/null 2>&1 &
  sleep 1
  ip netns exec cxldA nstat -n
  ip netns exec cxldA iperf3 -c 10.99.0.2 -p 5999 -t "$seconds" -i 0.5 -J > "$out/iperf-$limit.json" &
  client=$!
  : > "$out/ss-$limit.txt"
  while kill -0 $client 2>/dev/null; do
    ip netns exec cxldA ss -tin dst 10.99.0.2 >> "$out/ss-$limit.txt"; sleep 0.25
  done
  wait $client
  ip netns exec cxldA nstat -a > "$out/nstat-$limit.txt"
  ip netns exec cxldA tc -s qdisc show dev cxldA0 > "$out/tc-$limit.txt"
  ip netns del cxldA; ip netns del cxldB
done
"""

COUNTERS = ("TcpRetransSegs", "TcpExtTCPTimeouts", "TcpExtTCPSpuriousRTOs", "TcpExtTCPLossProbes")


def summary(out: Path, limit: int) -> list[str]:
    report = json.loads((out / f"iperf-{limit}.json").read_text())
    halves = [i["sum"]["bits_per_second"] / 1e6 for i in report["intervals"]]
    ss = (out / f"ss-{limit}.txt").read_text()
    rtts = [float(x) for x in re.findall(r" rtt:([0-9.]+)/", ss)]
    cwnds = [int(x) for x in re.findall(r" cwnd:(\d+)", ss)]
    counters = dict.fromkeys(COUNTERS, 0)
    for line in (out / f"nstat-{limit}.txt").read_text().splitlines():
        parts = line.split()
        if parts and parts[0] in counters:
            counters[parts[0]] = int(parts[1])
    (dropped,) = re.findall(
        r"qdisc netem 10:.*\n Sent \d+ bytes \d+ pkt \(dropped (\d+)", (out / f"tc-{limit}.txt").read_text()
    )
    return [
        f"limit {limit}: received {report['end']['sum_received']['bits_per_second'] / 1e6:.3f} Mbit/s, "
        f"leaf drops {dropped}, retransmitted {report['end']['sum_sent'].get('retransmits')}",
        "  sender per 0.5 s (Mbit/s): " + " ".join(f"{h:.2f}" for h in halves),
        f"  half-seconds with nothing written: {sum(h == 0 for h in halves)} of {len(halves)}",
        f"  RTT ms (ss): min {min(rtts):.1f} median {statistics.median(rtts):.1f} max {max(rtts):.1f}; "
        f"cwnd median {statistics.median(cwnds):g} max {max(cwnds)}",
        "  " + ", ".join(f"{name} {value}" for name, value in counters.items()),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limits", default="15,1000", help="leaf limits to compare (default: 15,1000)")
    parser.add_argument("--seconds", type=int, default=30, help="each flow's length (default: 30)")
    args = parser.parse_args()
    limits = [int(x) for x in args.limits.split(",")]
    with tempfile.TemporaryDirectory(prefix="cx-localdrop-") as tmp:
        out = Path(tmp)
        script = out / "guest.sh"
        script.write_text(GUEST)
        code = run_in_vm(["bash", str(script), str(out), str(args.seconds), *map(str, limits)], [out], 900)
        if code != 0:
            print(f"local_drop_bench: the guest script exited with {code}", file=sys.stderr)
            return 1
        for limit in limits:
            print("\n".join(summary(out, limit)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
