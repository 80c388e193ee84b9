"""Inside the VM: the stock kernel has what the TCAL needs, netem included.

The raw `tc` check is the kernel sanity test: it fails if the kernel's netem
itself misbehaves, independently of the TCAL, so a TCAL failure elsewhere in
this tier can be told apart from a broken VM.
"""

import statistics

from netns_helpers import sh

DELAY_MS = 10


def test_check_kernel_passes_with_netem():
    from collapsar.tcal import check_kernel

    check_kernel(need_netem=True)


def test_raw_netem_delays_ping(netns_pair, probe):
    pair, dst = netns_pair, netns_pair.dst_ips[0]
    base = probe.ping(pair.src_ns, dst, count=200, interval_s=0.005)
    sh("tc", "qdisc", "add", "dev", pair.src_if, "root", "netem", "delay", f"{DELAY_MS}ms", ns=pair.src_ns)
    shaped = probe.ping(pair.src_ns, dst, count=200, interval_s=0.005)
    assert base.received == base.sent == 200
    assert shaped.received == shaped.sent == 200
    base_ms, shaped_ms = statistics.median(base.rtt_ms), statistics.median(shaped.rtt_ms)
    print(f"raw netem: base median {base_ms:.3f} ms, with {DELAY_MS} ms delay {shaped_ms:.3f} ms")
    assert base_ms < 2.0
    # The emulated machine adds its round trip and netem's timer lateness (test_netem.EXCESS_MS).
    assert DELAY_MS <= shaped_ms <= DELAY_MS + 2.5
    # netem never releases a packet early: every RTT is at least the delay.
    assert min(shaped.rtt_ms) >= DELAY_MS
