"""Packet duplication through a real TcTree on this host's kernel: the eBPF
duplicator (collapsar.tcal.duplicate) at clsact egress, with the pfifo leaves
of a tree without netem (this kernel has none; tests/vm has the netem leaf).

Numbered UDP datagrams (tests/udpseq.py) go to two destinations at once; a
number that arrives twice was copied.  Copies are independent per packet, so
their count is held within the binomial band (false-failure odds 1e-4)."""

from __future__ import annotations

import json
import time

import pytest
from binomial import binomial_band
from tcal_traffic import classes, run, send_udp
from udpseq import Stream, stream

from collapsar.impairments import Extras
from collapsar.tcal import Shaping, ShapingChange
from collapsar.tcal.active import ActiveTcTree
from collapsar.tcal.counters import Counters
from collapsar.tcal.duplicate import DUPLICATOR_PRIORITY
from collapsar.tcal.prepared import PreparedStep

# timing: a host starved for over a millisecond can let a CPU's backlog fall
# behind another's and reorder two datagrams (see send_all): a retry, not a pass.
pytestmark = [pytest.mark.root, pytest.mark.timing]

COUNT, INTERVAL_S = 4000, 0.001
RATE_BPS = 100_000_000


def dup(ratio: float) -> Extras:
    return Extras(duplicate_ratio=ratio)


def send_all(pair, counts: dict[str, int]) -> dict[str, Stream]:
    """One paced stream per destination, one after the other: two at once can
    arrive reordered (a veth hands each packet to the backlog of the CPU that
    sent it, and either sender's CPU may send the other's packets), which would
    hide where a copy goes."""
    return {ip: stream(pair.src_ns, pair.dst_ns, ip, count, INTERVAL_S) for ip, count in counts.items()}


def check_copies(got: Stream, ratio: float) -> int:
    """Every number arrived, at most twice, a copy right next to its original;
    the count of copies is in the binomial band of `ratio`.  Returns it."""
    seen: dict[int, int] = {}
    first: dict[int, int] = {}  # number -> where it first arrived
    for i, number in enumerate(got.numbers):
        seen[number] = seen.get(number, 0) + 1
        # The copy is enqueued just before its original, in the same FIFO leaf.
        assert first.setdefault(number, i) in (i, i - 1), f"{number}'s two arrivals are apart"
    assert sorted(seen) == list(range(got.count))  # nothing lost on the way
    assert max(seen.values()) <= 2  # a copy is never copied again
    copies = got.duplicated()
    assert len(got.numbers) == got.count + copies
    assert got.late() == 0
    if ratio == 0:
        assert copies == 0
    else:
        low, high = binomial_band(got.count, ratio)
        assert low <= copies <= high, f"{copies} copies of {got.count} at ratio {ratio}: expected {low}..{high}"
    return copies


def egress_filters(pair) -> list[tuple[int, str]]:
    """(priority, program name) of the BPF filters at clsact egress."""
    if "clsact" not in run("tc", "qdisc", "show", "dev", pair.src_if, ns=pair.src_ns):
        return []
    out = json.loads(run("tc", "-j", "filter", "show", "dev", pair.src_if, "egress", ns=pair.src_ns))
    return sorted((f["pref"], f["options"]["bpf_name"].split(":")[0]) for f in out if "options" in f)


@pytest.fixture
def counted(tree_factory):
    """A two-destination pair, its tree (not set up) and the eBPF counters
    on the sender, attached first, as the emulation manager does."""
    pair, tree = tree_factory(n_dst=2)
    counters = Counters(pair.src_if, pair.src_ns).attach()
    yield pair, tree, counters
    tree.teardown()
    counters.detach()


def test_copies_one_destination_at_its_ratio_and_not_the_other(counted):
    pair, tree, counters = counted
    a, b = pair.dst_ips
    tree.setup([Shaping(a, RATE_BPS, extras=dup(0.10)), Shaping(b, RATE_BPS)])
    assert tree.duplicating == {a: 0.10}
    # The duplicator's filter runs behind the counters', which see a copy marked.
    assert egress_filters(pair) == [(49152, "cx_count_egress"), (DUPLICATOR_PRIORITY, "cx_dup_egress")]
    got = send_all(pair, {a: COUNT, b: COUNT})
    copies = check_copies(got[a], 0.10)
    check_copies(got[b], 0.0)
    read = counters.read()
    # What the instance sent, without the copies ...
    assert (read[a].packets, read[b].packets) == (COUNT, COUNT)
    # ... while each copy went through the destination's own class.
    sent = classes(pair.src_ns, pair.src_if)
    assert (sent["1:10"]["packets"], sent["1:11"]["packets"]) == (COUNT + copies, COUNT)


def test_ratio_changes_in_place_and_a_tree_without_copies_has_no_program(counted):
    pair, tree, _ = counted
    a, b = pair.dst_ips
    tree.setup([Shaping(a, RATE_BPS), Shaping(b, RATE_BPS)])
    assert egress_filters(pair) == [(49152, "cx_count_egress")]  # nothing of the duplicator's
    tree.change(a, extras=dup(0.30))
    tree.change(a, rate_bps=RATE_BPS // 2)  # the sharing loop's fast path keeps the ratio
    assert tree.duplicating == {a: 0.30}
    check_copies(send_all(pair, {a: COUNT})[a], 0.30)
    tree.change_many({a: ShapingChange.of(extras=dup(0.0)), b: ShapingChange.of(extras=dup(0.05))})
    assert tree.duplicating == {b: 0.05}
    got = send_all(pair, {a: COUNT, b: COUNT})
    check_copies(got[a], 0.0)
    check_copies(got[b], 0.05)
    tree.remove(b)
    assert tree.duplicating == {}
    tree.teardown()
    assert egress_filters(pair) == [(49152, "cx_count_egress")]  # the counters' filter is left alone


def test_shared_classes_copy_per_destination(make_netns_pair):
    """ActiveTcTree: dormant destinations share a class; copies still follow
    each one's own record, and a link change moves them all."""
    pair = make_netns_pair(n_dst=2)
    a, b = pair.dst_ips
    tree = ActiveTcTree(pair.src_if, pair.src_ns, netem=False)
    try:
        tree.setup([Shaping(a, RATE_BPS, extras=dup(0.5)), Shaping(b, RATE_BPS, extras=dup(0.5))])
        assert tree.shared_classes == {"1:10": 2} and tree.duplicating == {a: 0.5, b: 0.5}
        got = send_all(pair, {a: 1000, b: 1000})
        check_copies(got[a], 0.5)
        check_copies(got[b], 0.5)
        tree.change_groups([([a, b], ShapingChange.of(extras=dup(0.0)))])
        assert tree.duplicating == {} and tree.dormant == {a, b}
        got = send_all(pair, {a: 1000, b: 1000})
        check_copies(got[a], 0.0)
        check_copies(got[b], 0.0)
    finally:
        tree.teardown()
    assert egress_filters(pair) == []


def test_a_tree_set_up_without_copies_attaches_nothing(tree_factory):
    pair, tree = tree_factory(n_dst=1)
    tree.setup([Shaping(pair.dst_ips[0], RATE_BPS)])
    assert egress_filters(pair) == [] and tree.duplicating == {}


def test_a_prepared_step_puts_a_ratio_in_force_at_its_instant(tree_factory):
    """A ratio-only change sends no netlink message; it still waits for the
    step's instant (collapsar.tcal.prepared), as the step's other changes do."""
    pair, tree = tree_factory(n_dst=1)
    ip = pair.dst_ips[0]
    tree.setup([Shaping(ip, RATE_BPS)])
    step = PreparedStep(time.monotonic_ns() + 50_000_000)
    with step:
        tree.change(ip, extras=dup(0.25))
    assert tree.duplicating == {}  # not in force before the instant,
    assert egress_filters(pair) == [(DUPLICATOR_PRIORITY, "cx_dup_egress")]  # though attached ahead of it
    _, _, errors = step.fire()
    assert errors == [] and tree.duplicating == {ip: 0.25}
    check_copies(send_all(pair, {ip: COUNT})[ip], 0.25)


def test_a_cut_path_drops_the_copies_with_the_originals(tree_factory):
    pair, tree = tree_factory(n_dst=1)
    ip = pair.dst_ips[0]
    tree.setup([Shaping(ip, RATE_BPS, extras=dup(0.5))])
    run("ping", "-c1", ip, ns=pair.src_ns)  # the neighbour resolved: ARP is no IPv4
    tree.cut(ip)
    before = classes(pair.src_ns, pair.src_if)
    send_udp(pair.src_ns, ip, count=400, payload_bytes=100)
    after = classes(pair.src_ns, pair.src_if)
    copies = after["1:2"]["drops"] - before["1:2"]["drops"] - 400  # the blackhole's pfifo holds none
    low, high = binomial_band(400, 0.5)
    assert low <= copies <= high and after["1:10"]["packets"] == before["1:10"]["packets"]
    tree.restore(ip)
    assert tree.duplicating == {ip: 0.5}  # cut and restore leave the duplicator alone
    before = classes(pair.src_ns, pair.src_if)
    send_udp(pair.src_ns, ip, count=400, payload_bytes=100)
    after = classes(pair.src_ns, pair.src_if)
    assert low <= after["1:10"]["packets"] - before["1:10"]["packets"] - 400 <= high
