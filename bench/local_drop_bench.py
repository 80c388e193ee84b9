"""One TCP flow through a class like Collapsar's, with its queue in front of
the delay or after it, and through a router, in the stock-kernel VM
(netem): where a queue drops decides whether TCP sees a loss.

    python bench/local_drop_bench.py [--modes front:15,front:1000,after:10,router:10] [--seconds 30]

Scratch namespaces; the sender sends one frame per packet (gso_max_segs 1)
and uses CUBIC, the receiver delays its ACKs by 25 ms, and a class of htb
at 2 Mbit/s holds the queue:
- front:LIMIT, as the TCAL had it: the class's leaf is netem with 25 ms of
  delay and LIMIT packets for delay line and queue together (15: 5 frames
  of delay line and the 10 of tcal.plan.default_queue_pkts; 1000: netem's
  own, Kollaps's).  A drop at the limit is local: netem returns
  NET_XMIT_DROP to the sender's own stack, TCP enters CWR and sends the
  segment again later, with no loss seen.
- after:QUEUE, as the TCAL has it now: netem (25 ms, a limit it never
  reaches) with a pfifo of QUEUE packets as its child, filled when the
  delay is over: a drop there is the wire's.
- router:QUEUE, the hop-by-hop reference: the sender's link delays 25 ms,
  a router namespace forwards, and its egress to the receiver is the htb
  class over a pfifo of QUEUE packets.
Per mode the bench prints the sender's per-0.5 s rates, what arrived,
retransmissions, the RTTs `ss` saw (every 250 ms), TCP's timeout counters
(nstat) and the queue's drops.
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
for mode in "$@"; do
  kind=${mode%:*}; size=${mode#*:}
  ip netns add cxldA; ip netns add cxldB
  if [ "$kind" = router ]; then
    ip netns add cxldR
    ip link add cxldA0 netns cxldA type veth peer name cxldR0 netns cxldR
    ip link add cxldR1 netns cxldR type veth peer name cxldB0 netns cxldB
    ip -n cxldA addr add 10.99.0.1/24 dev cxldA0; ip -n cxldR addr add 10.99.0.254/24 dev cxldR0
    ip -n cxldR addr add 10.99.1.254/24 dev cxldR1; ip -n cxldB addr add 10.99.1.2/24 dev cxldB0
    for ns in cxldA cxldB cxldR; do ip -n $ns link set lo up; done
    ip -n cxldA link set cxldA0 up gso_max_segs 1; ip -n cxldB link set cxldB0 up
    ip -n cxldR link set cxldR0 up; ip -n cxldR link set cxldR1 up gso_max_segs 1
    ip -n cxldA route add default via 10.99.0.254; ip -n cxldB route add default via 10.99.1.254
    ip netns exec cxldR sysctl -qw net.ipv4.ip_forward=1
    ip netns exec cxldA tc qdisc add dev cxldA0 root netem delay 25ms limit 10000
    dev=cxldR1; devns=cxldR; dst=10.99.1.2
  else
    ip link add cxldA0 netns cxldA type veth peer name cxldB0 netns cxldB
    ip -n cxldA addr add 10.99.0.1/24 dev cxldA0; ip -n cxldB addr add 10.99.0.2/24 dev cxldB0
    for ns in cxldA cxldB; do ip -n $ns link set lo up; done
    ip -n cxldA link set cxldA0 up gso_max_segs 1; ip -n cxldB link set cxldB0 up
    dev=cxldA0; devns=cxldA; dst=10.99.0.2
  fi
  ip netns exec cxldB tc qdisc add dev cxldB0 root netem delay 25ms limit 1000
  ip netns exec $devns tc qdisc add dev $dev root handle 1: htb default 10
  ip netns exec $devns tc class add dev $dev parent 1: classid 1:10 htb rate 2mbit
  case $kind in
    front) ip netns exec cxldA tc qdisc add dev $dev parent 1:10 handle 10: netem delay 25ms limit "$size";;
    after) ip netns exec cxldA tc qdisc add dev $dev parent 1:10 handle 10: netem delay 25ms limit 1000
           ip netns exec cxldA tc qdisc add dev $dev parent 10:1 handle 8010: pfifo limit "$size";;
    router) ip netns exec cxldR tc qdisc add dev $dev parent 1:10 handle 10: pfifo limit "$size";;
  esac
  ip netns exec cxldA sysctl -qw net.ipv4.tcp_congestion_control=cubic
  ip netns exec cxldB iperf3 -s -1 -p 5999 >/dev/null 2>&1 &
  sleep 1
  ip netns exec cxldA nstat -n
  ip netns exec cxldA iperf3 -c $dst -p 5999 -t "$seconds" -i 0.5 -J > "$out/iperf-$kind-$size.json" &
  client=$!
  : > "$out/ss-$kind-$size.txt"
  while kill -0 $client 2>/dev/null; do
    ip netns exec cxldA ss -tin dst $dst >> "$out/ss-$kind-$size.txt"; sleep 0.25
  done
  wait $client
  ip netns exec cxldA nstat -a > "$out/nstat-$kind-$size.txt"
  ip netns exec $devns tc -s qdisc show dev $dev > "$out/tc-$kind-$size.txt"
  ip netns del cxldA; ip netns del cxldB; ip netns del cxldR 2>/dev/null || true
done
"""

COUNTERS = ("TcpRetransSegs", "TcpExtTCPTimeouts", "TcpExtTCPSpuriousRTOs", "TcpExtTCPLossProbes")


def summary(out: Path, mode: str) -> list[str]:
    name = mode.replace(":", "-")
    report = json.loads((out / f"iperf-{name}.json").read_text())
    halves = [i["sum"]["bits_per_second"] / 1e6 for i in report["intervals"]]
    ss = (out / f"ss-{name}.txt").read_text()
    rtts = [float(x) for x in re.findall(r" rtt:([0-9.]+)/", ss)]
    cwnds = [int(x) for x in re.findall(r" cwnd:(\d+)", ss)]
    counters = dict.fromkeys(COUNTERS, 0)
    for line in (out / f"nstat-{name}.txt").read_text().splitlines():
        parts = line.split()
        if parts and parts[0] in counters:
            counters[parts[0]] = int(parts[1])
    # the htb root's drops: every drop of the tree under it
    (dropped,) = re.findall(
        r"qdisc htb 1:.*\n Sent \d+ bytes \d+ pkt \(dropped (\d+)", (out / f"tc-{name}.txt").read_text()
    )
    return [
        f"{mode}: received {report['end']['sum_received']['bits_per_second'] / 1e6:.3f} Mbit/s, "
        f"queue drops {dropped}, retransmitted {report['end']['sum_sent'].get('retransmits')}",
        "  sender per 0.5 s (Mbit/s): " + " ".join(f"{h:.2f}" for h in halves),
        f"  half-seconds with nothing written: {sum(h == 0 for h in halves)} of {len(halves)}",
        f"  RTT ms (ss): min {min(rtts):.1f} median {statistics.median(rtts):.1f} max {max(rtts):.1f}; "
        f"cwnd median {statistics.median(cwnds):g} max {max(cwnds)}",
        "  " + ", ".join(f"{name} {value}" for name, value in counters.items()),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--modes",
        default="front:15,front:1000,after:10,router:10",
        help="queues to compare, each front:LIMIT, after:QUEUE or router:QUEUE (default: %(default)s)",
    )
    parser.add_argument("--seconds", type=int, default=30, help="each flow's length (default: 30)")
    args = parser.parse_args()
    modes = args.modes.split(",")
    for mode in modes:
        kind, _, size = mode.partition(":")
        if kind not in ("front", "after", "router") or not size.isdigit():
            parser.error(f"--modes: {mode!r}: expected front:N, after:N or router:N")
    with tempfile.TemporaryDirectory(prefix="cx-localdrop-") as tmp:
        out = Path(tmp)
        script = out / "guest.sh"
        script.write_text(GUEST)
        code = run_in_vm(["bash", str(script), str(out), str(args.seconds), *modes], [out], 1500)
        if code != 0:
            print(f"local_drop_bench: the guest script exited with {code}", file=sys.stderr)
            return 1
        for mode in modes:
            print("\n".join(summary(out, mode)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
