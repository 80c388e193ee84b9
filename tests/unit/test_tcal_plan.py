"""The tc plan, the netem tables and the message encoders: no kernel, no root."""

import socket
import statistics
import struct

import pytest

from collapsar.errors import CollapsarError
from collapsar.tcal import Shaping, plan_tree
from collapsar.tcal import nlmsg as m
from collapsar.tcal.dist import NETEM_DIST_SCALE, TABLE_SIZE, table_bytes, table_values
from collapsar.tcal.layout import U32Layout
from collapsar.tcal.plan import (
    HtbCalculator,
    HtbParams,
    LeafParams,
    LeafSizes,
    default_queue_pkts,
    gso_max_segs,
    gso_rates_seen,
    htb_params,
    leaf_params,
    leaf_sizes,
)


def test_sizes_for_100mbit_at_200ms_hold_twice_the_delay_line_and_a_round_trip_of_queue():
    # 12.5 MB/s x 0.2 s = 2.5 MB = 1651.25 frames of 1514 B in flight; the
    # queue is the round trip, 0.4 s: 3302.5 frames.
    assert leaf_sizes(100_000_000, 200_000, 0) == LeafSizes(2 * 1652 + 3303, 3303)
    assert default_queue_pkts(100_000_000, 200_000) == 3303


def test_the_default_queue_is_at_least_a_burst_and_ten_packets():
    # 10 ms each way at 10 Mbit/s: 9 frames in flight, and the queue is one
    # burst (20 ms: 16.5 frames), not the 20 ms round trip's (also 16.5).
    assert leaf_sizes(10_000_000, 10_000, 5_000) == (2 * 9 + 17, 17)  # jitter does not move the mean
    assert leaf_sizes(10_000_000, 0, 0) == (17, 17)
    assert default_queue_pkts(10_000_000, 0) == 17
    assert default_queue_pkts(10_000_000, 30_000) == 50  # 60 ms at 10 Mbit/s: 49.5 frames
    assert default_queue_pkts(1_000_000, 0) == 10  # 20 ms at 1 Mbit/s is 1.7 frames
    assert default_queue_pkts(1_000_000_000, 0, mtu_bytes=9000) == 278  # 20 ms of 9014-byte frames


def test_a_path_without_a_rate_keeps_its_delay_line_with_headroom_and_a_base_queue():
    # 10 Gbit/s x 1 ms = 825.6 frames, x 1.5 -> 1239; + 1000
    assert leaf_sizes(None, 1_000, 0) == (2239, 2239)  # the queue never limits more than the line
    assert leaf_sizes(None, 0, 0) == (1000, 1000)


def test_htb_for_10mbit_charges_wire_overhead_as_a_rate():
    p = htb_params(10_000_000, wire_overhead=True)
    assert p.rate_bytes_ps == 1_230_494  # 1.25 MB/s x 1514/1538
    assert p.burst_bytes == 24_610  # 20 ms at the rate (more than two frames)
    assert p.buffer_ticks == 312_502  # 20 ms in 64 ns ticks, rounded up
    assert (p.overhead_bytes, p.mpu_bytes, p.quantum_bytes, p.prio) == (0, 83, 1514, 1)


def test_htb_without_overhead_uses_the_plain_rate():
    p = htb_params(10_000_000, wire_overhead=False)
    assert (p.rate_bytes_ps, p.burst_bytes, p.buffer_ticks, p.mpu_bytes) == (1_250_000, 25_000, 312_500, 0)


def test_htb_for_jumbo_frames_rounds_burst_and_buffer_up():
    # 125 MB/s x 9014/9038 = 124_668_068.2 B/s; 20 ms of it = 2_493_361.4 B;
    # 2_493_362 B at that rate = 312_500.2 ticks of 64 ns; mpu 84 x 9014/9038 = 83.8.
    p = HtbCalculator(wire_overhead=True, mtu_bytes=9000)(10**9)
    assert p == HtbParams(124_668_068, 2_493_362, 312_501, 9014, 0, 84, 1)


def test_low_rate_burst_is_two_frames_unless_that_overflows_htbs_buffer():
    assert htb_params(1_000_000, wire_overhead=True).burst_bytes == 3028
    tiny = htb_params(8, wire_overhead=False)  # 1 byte/s: two frames would take 3028 s
    assert (tiny.rate_bytes_ps, tiny.burst_bytes, tiny.buffer_ticks) == (1, 200, 3_125_000_000)


def test_goodput_ratio_matches_real_ethernet():
    p = htb_params(100_000_000, wire_overhead=True)
    goodput_bps = p.rate_bytes_ps * 8 * 1448 / 1514
    assert goodput_bps / 100_000_000 == pytest.approx(1448 / 1538, abs=1e-6)


def test_gso_limit_follows_the_slowest_path():
    assert gso_max_segs([10**6, 10**9]) == 2  # not 1 beside a fast path: a segment per skb costs too much CPU
    assert gso_max_segs([10**6, 20_000_000]) == 1  # every path slow: a frame per packet, as on a link
    assert gso_max_segs([10**6, None]) == 2
    assert gso_max_segs([20_000_001]) == 33
    assert gso_max_segs([10_000_000, None]) == 16  # 20 ms at 10 Mbit/s = 25000 B = 16 frames
    assert gso_max_segs([25_000_000]) == 41
    assert gso_max_segs([27_000_000]) is None  # 43 frames: a full 64 KB super-packet fits a burst
    assert gso_max_segs([None, None]) is None


def test_unlimited_rate_needs_rate64():
    p = htb_params(None, wire_overhead=False)
    assert p.rate_bytes_ps == 12_500_000_000 > 2**32
    opts = m.htb_class_options(p)
    attrs = m.parse_attrs(m.parse_attrs(opts)[m.TCA_OPTIONS])
    assert struct.unpack("=Q", attrs[m.TCA_HTB_RATE64])[0] == 12_500_000_000
    assert struct.unpack("=Q", attrs[m.TCA_HTB_CEIL64])[0] == 12_500_000_000
    assert struct.unpack_from("=I", attrs[m.TCA_HTB_PARMS], 8)[0] == 2**32 - 1  # rate32 saturated


def test_htb_class_message_is_small_and_has_no_rate_table():
    body = m.ClassTemplate(7, 0x10010, 0x10000).body(htb_params(10_000_000, wire_overhead=True))
    assert len(body) == 20 + 8 + 4 + 48  # tcmsg + kind "htb" + options + parms
    ifindex, handle, parent, attrs = m.parse_tcmsg(body)
    assert (ifindex, handle, parent) == (7, 0x10010, 0x10000)
    parms = m.parse_attrs(attrs[m.TCA_OPTIONS])[m.TCA_HTB_PARMS]
    cell_log, linklayer, overhead, _, mpu, rate = struct.unpack_from("=BBHhHI", parms)
    assert (linklayer, overhead, mpu, rate) == (1, 0, 83, 1_230_494)


def test_netem_options_carry_every_parameter_and_the_table_only_when_asked():
    leaf = LeafParams("netem", 1234, delay_us=10_000, jitter_us=1_000, distribution="normal", loss_ratio=0.01)
    with_table = m.parse_attrs(m.netem_options(leaf, True))[m.TCA_OPTIONS]
    latency, limit, loss, gap, dup, jitter = struct.unpack_from("=6I", with_table)
    assert (latency, limit, gap, dup, jitter) == (156_250, 1234, 0, 0, 15_625)  # 64 ns ticks
    assert loss == round(0.01 * 0xFFFFFFFF)
    attrs = m.parse_attrs(with_table, 24)
    assert struct.unpack("=q", attrs[m.TCA_NETEM_LATENCY64])[0] == 10_000_000
    assert struct.unpack("=q", attrs[m.TCA_NETEM_JITTER64])[0] == 1_000_000
    assert attrs[m.TCA_NETEM_DELAY_DIST] == table_bytes("normal")
    without = m.parse_attrs(m.parse_attrs(m.netem_options(leaf, False))[m.TCA_OPTIONS], 24)
    assert m.TCA_NETEM_DELAY_DIST not in without


def test_u32_match_node_selects_full_destination_in_its_bucket():
    slot = U32Layout().place("10.0.1.2")
    body = m.u32_match(3, 0x10000, slot, "10.0.1.2", 0x10010, create=True)
    _, handle, parent, attrs = m.parse_tcmsg(body)
    assert handle == slot.handle == (0x101 << 20) | (2 << 12) | 1
    opts = m.parse_attrs(attrs[m.TCA_OPTIONS])
    assert struct.unpack("=I", opts[m.TCA_U32_CLASSID])[0] == 0x10010
    assert struct.unpack("=I", opts[m.TCA_U32_HASH])[0] == (0x101 << 20) | (2 << 12)
    sel = opts[m.TCA_U32_SEL]
    assert sel[0] == m.TC_U32_TERMINAL and sel[2] == 1  # flags, nkeys
    mask, val, off, _ = struct.unpack_from("=4s4sii", sel, 16)
    assert (mask, val, off) == (b"\xff" * 4, socket.inet_aton("10.0.1.2"), 16)


def test_u32_layout_hashes_last_two_octets_and_chains_collisions():
    layout = U32Layout()
    a, b, c = layout.place("10.0.1.2"), layout.place("10.9.1.2"), layout.place("10.0.7.200")
    assert (a.level1_bucket, a.level2_htid, a.level2_bucket, a.node) == (1, 0x101, 2, 1)
    assert (b.level2_htid, b.level2_bucket, b.node) == (0x101, 2, 2)
    assert (c.level1_bucket, c.level2_htid, c.level2_bucket) == (7, 0x107, 200)
    assert layout.level2_tables() == {0x101, 0x107}


def test_plan_assigns_classes_leaves_and_describes_them():
    plan = plan_tree([Shaping("10.0.1.2", 10_000_000, 10_000, 1_000, "pareto", 0.001), Shaping("10.0.1.3", None)])
    assert [d.classid for d in plan.dests] == [0x10010, 0x10011]
    assert [d.leaf_handle for d in plan.dests] == [0x100000, 0x110000]
    assert plan.dests[0].leaf == LeafParams("netem", 2 * 9 + 17, 10_000, 1_000, "pareto", 0.001, queue_pkts=17)
    lines = plan.describe()
    assert lines[0] == "qdisc 1: root htb default 1:1 (wire overhead on, mtu 1500)"
    assert any(
        line.startswith("class 1:10 -> 10.0.1.2: rate=ceil 10Mbps (1230494 B/s), burst=cburst 24610 B")
        and "netem delay 10ms jitter 1ms pareto loss 0.001 limit 35 then queue pfifo limit 17" in line
        for line in lines
    )
    assert "  filter u32 ht 1: bucket 1 -> ht 101: bucket 3 node 1: dst 10.0.1.3/32 -> 1:11" in lines


def test_without_netem_the_leaf_is_a_pfifo_and_delay_is_rejected():
    plan = plan_tree([Shaping("10.0.1.2", 10_000_000)], netem=False)
    assert plan.dests[0].leaf == LeafParams("pfifo", 17)  # one burst: 20 ms at 10 Mbit/s
    assert plan.blackhole_leaf == LeafParams("pfifo", 0)
    with pytest.raises(
        CollapsarError,
        match=r"10.0.1.2: delay, jitter and loss \(burst loss, reordering and corruption too\) need sch_netem",
    ):
        plan_tree([Shaping("10.0.1.2", 10_000_000, delay_us=1000)], netem=False)
    with pytest.raises(CollapsarError, match="loss_ratio=0.5"):
        leaf_params(Shaping("10.0.1.2", None, loss_ratio=0.5), netem=False)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(dst_ip="10.0.0", rate_bps=1), "expected an IPv4 address"),
        (dict(dst_ip="10.0.0.1", rate_bps=4), "rate_bps must be an integer >= 8"),
        (dict(dst_ip="10.0.0.1", rate_bps=None, jitter_us=5), "jitter needs a delay"),
        (dict(dst_ip="10.0.0.1", rate_bps=None, delay_us=5, distribution="gauss"), "distribution must be one of"),
        (dict(dst_ip="10.0.0.1", rate_bps=None, loss_ratio=1.5), r"loss_ratio must lie in \[0, 1\]"),
        (dict(dst_ip="10.0.0.1", rate_bps=None, delay_us=-1), "delay_us must be an integer >= 0"),
    ],
)
def test_bad_shapings_are_rejected(kwargs, message):
    with pytest.raises(CollapsarError, match=message):
        Shaping(**kwargs)


def test_duplicate_destination_is_rejected():
    with pytest.raises(CollapsarError, match="10.0.0.1 appears twice"):
        plan_tree([Shaping("10.0.0.1", None), Shaping("10.0.0.1", 10**6)])


@pytest.mark.parametrize("name", ["normal", "pareto", "paretonormal"])
def test_tables_have_zero_mean_and_unit_deviation(name):
    values = [v / NETEM_DIST_SCALE for v in table_values(name)]
    assert len(values) == TABLE_SIZE
    assert statistics.fmean(values) == pytest.approx(0, abs=2e-3)
    assert statistics.pstdev(values) == pytest.approx(1, abs=2e-3)
    assert values == sorted(values)


def test_normal_table_quantiles_and_pareto_skew():
    normal = table_values("normal")
    assert normal[TABLE_SIZE // 2] == round(0.000306 * NETEM_DIST_SCALE)  # just above the median
    assert normal[int(0.8413 * TABLE_SIZE)] == pytest.approx(NETEM_DIST_SCALE, rel=2e-3)  # +1 sigma
    pareto = table_values("pareto")
    assert -pareto[0] < pareto[-1]  # long right tail, short left one
    assert pareto[-1] == 32767  # held at the s16 bound


def test_uniform_table_is_netems_own_plus_minus_jitter():
    uniform = table_values("uniform")
    assert (uniform[0], uniform[-1]) == (-8190, 8190)
    assert len(table_bytes("uniform")) == 2 * TABLE_SIZE


def test_minor_allocator_always_hands_out_the_lowest_free_minor():
    """Against a brute-force model, through takes, frees and claims in any order."""
    import random

    from collapsar.tcal.layout import FIRST_DEST_MINOR, MinorAllocator

    allocator, model, rng = MinorAllocator(), set(), random.Random(3)
    for _ in range(5000):
        op = rng.random()
        if op < 0.5:
            lowest = next(m for m in range(FIRST_DEST_MINOR, 0xFFFF) if m not in model)
            assert allocator.take() == lowest
            model.add(lowest)
        elif op < 0.8 and model:
            minor = rng.choice(sorted(model))
            allocator.free(minor)
            model.discard(minor)
        else:
            minor = rng.randrange(FIRST_DEST_MINOR, 400)
            if minor not in model:
                allocator.claim(minor)
                model.add(minor)
    assert allocator.used == model


def test_u32_nodes_count_per_bucket():
    layout = U32Layout()
    # Same last two octets, different /16s: one bucket, nodes 1, 2, 3.
    assert [layout.place(ip).node for ip in ("10.1.3.4", "10.2.3.4", "10.3.3.4")] == [1, 2, 3]
    assert layout.place("10.1.3.5").node == 1 and layout.place("10.2.3.4").node == 2


@pytest.mark.parametrize("bad", ["10.1.2.256", "010.1.2.3", "10.1", "fe80::1"])
def test_u32_placement_refuses_what_is_not_a_canonical_ipv4_address(bad):
    with pytest.raises(ValueError):
        U32Layout().place(bad)


def test_a_netem_leaf_gets_its_queue_after_the_delay_as_a_child_pfifo():
    from collapsar.tcal.requests import TreeRequests

    plan = plan_tree([Shaping("10.0.1.2", 10_000_000, delay_us=10_000)])
    dest = plan.dests[0]
    made = TreeRequests(7).leaf(dest.minor, dest.leaf, True, m.CREATE, "10.0.1.2")
    assert [r.what for r in made] == [
        "destination 10.0.1.2: create leaf 10: netem",
        "destination 10.0.1.2: create queue 8010: pfifo",
    ]
    _, handle, parent, attrs = m.parse_tcmsg(made[1].body)
    assert (handle, parent, made[1].flags) == (0x80100000, 0x100001, m.CREATE)  # under netem 10:'s class 10:1
    assert struct.unpack("=I", attrs[m.TCA_OPTIONS])[0] == 17
    changed = TreeRequests(7).leaf(dest.minor, dest.leaf._replace(queue_pkts=40), True, m.CHANGE, None)
    assert [(r.what, r.flags) for r in changed] == [("change leaf 10: netem", 0), ("change queue 8010: pfifo", 0)]
    # the blackhole drops everything itself: no queue under it
    assert len(TreeRequests(7).leaf(2, plan.blackhole_leaf, True, m.CREATE, None)) == 1


@pytest.mark.parametrize(
    "rates",
    [
        [5_000_000, 2_000_000, 10_000_000],  # all slow: a frame per packet
        [5_000_000, 100_000_000, 1_000_000],  # beside a fast path: the slowest decides
        [5_000_000, None, 2_000_000],  # an unlimited path
        [None, None],
        [300_000_000, 400_000_000],  # none slow enough to care
    ],
)
def test_what_a_tree_keeps_of_its_rates_gives_the_same_gso_limit(rates):
    kept = gso_rates_seen(rates)
    assert len(kept) <= 3 and gso_max_segs(kept) == gso_max_segs(rates)
    assert gso_rates_seen(kept + rates) == kept  # adding them again changes nothing


def test_the_gso_limits_of_the_cases_above():
    assert [
        gso_max_segs(r) for r in ([5_000_000, 2_000_000], [5_000_000, 100_000_000, 1_000_000], [5_000_000, None])
    ] == [1, 2, 8]
