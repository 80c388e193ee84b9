"""ActiveTcTree on this host's kernel: destinations share one class per
distinct record until they are activated, then shape exactly as TcTree's.
Pfifo leaves (this kernel has no sch_netem; tests/vm covers netem)."""

import threading
import time

import pytest
from tcal_traffic import Iperf, classes, filters, ping_loss, send_udp

from collapsar.errors import CollapsarError
from collapsar.tcal import Shaping, ShapingChange
from collapsar.tcal.active import ActiveTcTree

pytestmark = pytest.mark.timing  # goodput through shared and own classes, measured with iperf3


@pytest.fixture
def active(make_netns_pair):
    made = []

    def make(n_dst=3):
        pair = make_netns_pair(n_dst=n_dst)
        tree = ActiveTcTree(pair.src_if, pair.src_ns, netem=False)
        made.append(tree)
        return pair, tree

    yield make
    for tree in made:
        tree.teardown()


def _bytes_by_class(pair, before: dict) -> dict[str, int]:
    after = classes(pair.src_ns, pair.src_if)
    return {h: after[h]["bytes"] - before.get(h, {"bytes": 0})["bytes"] for h in after}


def test_destinations_of_one_record_share_a_class_until_activated(active):
    pair, tree = active(n_dst=5)
    a, b, c, d, e = pair.dst_ips
    fast, slow = 100_000_000, 20_000_000
    tree.setup([Shaping(a, fast), Shaping(b, fast), Shaping(c, fast), Shaping(d, slow), Shaping(e, slow)])
    got = classes(pair.src_ns, pair.src_if)
    assert set(got) == {"1:1", "1:2", "1:10", "1:11"}  # default, blackhole, one class per record
    assert (got["1:10"]["rate"], got["1:11"]["rate"]) == ("98439Kbit", "19687Kbit")
    assert tree.shared_classes == {"1:10": 3, "1:11": 2}
    assert tree.dormant == {a, b, c, d, e}
    assert tree.shapings == {ip: Shaping(ip, fast if ip in (a, b, c) else slow) for ip in pair.dst_ips}
    for ip in pair.dst_ips:  # neighbours first: ARP goes to the default class
        assert ping_loss(pair.src_ns, ip, count=1) == 0
    before = classes(pair.src_ns, pair.src_if)
    sent = {ip: send_udp(pair.src_ns, ip, count=10 * (i + 1), payload_bytes=400) for i, ip in enumerate(pair.dst_ips)}
    delta = _bytes_by_class(pair, before)
    assert delta["1:10"] == sent[a] + sent[b] + sent[c] == 60 * 442
    assert delta["1:11"] == sent[d] + sent[e] == 90 * 442

    assert tree.activate([b, d, e, "10.9.9.9"]) == 3  # an address not in the tree is skipped
    assert tree.activate([b]) == 0  # already active
    got = classes(pair.src_ns, pair.src_if)
    # d and e left 1:11 empty: it is deleted (after the new classes, which
    # therefore take the next minors)
    assert tree.shared_classes == {"1:10": 2}
    assert set(got) == {"1:1", "1:2", "1:10", "1:12", "1:13", "1:14"}
    assert [got[h]["rate"] for h in ("1:12", "1:13", "1:14")] == ["98439Kbit", "19687Kbit", "19687Kbit"]
    own = {b: "1:12", d: "1:13", e: "1:14"}
    text = filters(pair.src_ns, pair.src_if)
    assert text.count("*flowid 1:10") == 2  # a and c still share
    before = classes(pair.src_ns, pair.src_if)
    sent = {ip: send_udp(pair.src_ns, ip, count=7, payload_bytes=300) for ip in pair.dst_ips}
    delta = _bytes_by_class(pair, before)
    assert delta["1:10"] == sent[a] + sent[c] == 14 * 342
    for ip, handle in own.items():
        assert delta[handle] == sent[ip] == 7 * 342


def test_changes_move_dormant_destinations_between_shared_classes(active):
    pair, tree = active(n_dst=3)
    a, b, c = pair.dst_ips
    tree.setup([Shaping(ip, 50_000_000) for ip in pair.dst_ips])
    assert tree.shared_classes == {"1:10": 3}
    tree.change_many({a: ShapingChange.of(rate_bps=10_000_000), b: ShapingChange.of(rate_bps=10_000_000)})
    assert tree.shared_classes == {"1:10": 1, "1:11": 2}
    assert classes(pair.src_ns, pair.src_if)["1:11"]["rate"] == "9843Kbit"
    tree.change(c, rate_bps=10_000_000)  # the last member leaves 1:10: deleted
    assert tree.shared_classes == {"1:11": 3}
    assert "1:10" not in classes(pair.src_ns, pair.src_if)
    tree.activate([a])
    tree.change(a, rate_bps=30_000_000)  # an active destination changes its own class in place
    got = classes(pair.src_ns, pair.src_if)
    assert got["1:10"]["rate"] == "29531Kbit" and got["1:11"]["rate"] == "9843Kbit"
    assert tree.shapings[a].rate_bps == 30_000_000 and tree.shapings[b].rate_bps == 10_000_000
    with pytest.raises(CollapsarError, match=f"destination '{b}': loss_ratio must lie in"):
        tree.change(b, loss_ratio=2.0)
    assert tree.shapings[b] == Shaping(b, 10_000_000)
    # Every member of 1:11 (b, c) takes one new record: the class changes in place.
    tree.change_many({ip: ShapingChange.of(rate_bps=5_000_000) for ip in (b, c)})
    assert tree.shared_classes == {"1:11": 2}
    assert classes(pair.src_ns, pair.src_if)["1:11"]["rate"] == "4921Kbit"
    assert tree.shapings[c] == Shaping(c, 5_000_000)
    before = classes(pair.src_ns, pair.src_if)
    sent = send_udp(pair.src_ns, c, count=5, payload_bytes=200)
    assert _bytes_by_class(pair, before)["1:11"] == sent


def test_cut_restore_remove_and_add_of_dormant_destinations(active):
    pair, tree = active(n_dst=2)
    a, b = pair.dst_ips
    tree.setup([Shaping(a, 100_000_000), Shaping(b, 100_000_000)])
    tree.cut(a)
    assert ping_loss(pair.src_ns, a) == 1.0
    assert ping_loss(pair.src_ns, b) == 0
    tree.activate([a])  # activated while cut: its class is made, its packets still dropped
    assert ping_loss(pair.src_ns, a) == 1.0
    tree.restore(a)
    assert ping_loss(pair.src_ns, a) == 0
    tree.remove(b)
    assert ping_loss(pair.src_ns, b) == 1.0  # removed: dropped, never sent unshaped
    assert tree.shared_classes == {}  # b was the last in 1:10
    with pytest.raises(CollapsarError, match=f"destination {b} was removed"):
        tree.change(b, rate_bps=10**6)
    tree.add(Shaping(b, 20_000_000))
    assert ping_loss(pair.src_ns, b) == 0
    assert tree.dormant == {b} and tree.shapings[b] == Shaping(b, 20_000_000)
    assert classes(pair.src_ns, pair.src_if)[next(iter(tree.shared_classes))]["rate"] == "19687Kbit"


def _class_rates_bps(pair, ips: list[str], handles: list[str]) -> dict[str, float]:
    """Bytes per second through each class, as tc counts them (layer 2), over
    a window in which a TCP flow runs to each of `ips` (iperf3, 7 s; the
    window starts after 2.5 s, once both flows have left slow start)."""
    servers = [Iperf(pair.dst_ns, ip, port=5301 + i) for i, ip in enumerate(ips)]
    try:
        threads = [threading.Thread(target=s.client, args=(pair.src_ns, 7)) for s in servers]
        for t in threads:
            t.start()
        time.sleep(2.5)
        before, began = classes(pair.src_ns, pair.src_if), time.monotonic()
        time.sleep(3.0)
        after, took = classes(pair.src_ns, pair.src_if), time.monotonic() - began
        for t in threads:
            t.join()
    finally:
        for s in servers:
            s.close()
    return {h: (after[h]["bytes"] - before[h]["bytes"]) * 8 / took for h in handles}


def test_two_flows_share_the_class_of_their_record_until_each_has_its_own(active):
    """Dormant, two flows to destinations of one record go through its one
    class at its rate together; once activated each class carries the whole
    rate, as in TcTree."""
    pair, tree = active(n_dst=2)
    rate = 20_000_000
    at_layer2 = rate * 1514 / 1538  # the class's rate counts the wire overhead tc does not see
    tree.setup([Shaping(ip, rate) for ip in pair.dst_ips])
    shared = _class_rates_bps(pair, pair.dst_ips, ["1:10"])
    assert shared["1:10"] == pytest.approx(at_layer2, rel=0.05)
    tree.activate(pair.dst_ips)
    own = _class_rates_bps(pair, pair.dst_ips, ["1:11", "1:12"])
    assert own["1:11"] == pytest.approx(at_layer2, rel=0.05)
    assert own["1:12"] == pytest.approx(at_layer2, rel=0.05)


def test_groups_keep_destinations_that_change_alike_in_a_class_changed_in_place(active):
    pair, tree = active(n_dst=4)
    a, b, c, d = pair.dst_ips
    # One record for all four; a and b go through the run's link changes
    # together (play.player.lineages): a class of their own from the start.
    tree.setup([Shaping(ip, 50_000_000) for ip in pair.dst_ips], {a: "across", b: "across"})
    assert tree.shared_classes == {"1:10": 2, "1:11": 2}
    text = filters(pair.src_ns, pair.src_if)
    assert text.count("*flowid 1:10") == 2 and text.count("*flowid 1:11") == 2
    change = ShapingChange.of(rate_bps=10_000_000)  # the link across: one change for both
    tree.change_groups([([a, b], change)])
    got = classes(pair.src_ns, pair.src_if)
    assert tree.shared_classes == {"1:10": 2, "1:11": 2}  # changed in place: no class made, no node moved
    assert (got["1:10"]["rate"], got["1:11"]["rate"]) == ("9843Kbit", "49219Kbit")
    assert filters(pair.src_ns, pair.src_if) == text
    assert tree.shapings == {ip: Shaping(ip, 10_000_000 if ip in (a, b) else 50_000_000) for ip in pair.dst_ips}
    # c alone takes the same record: it moves to a class of its group (none), not into a and b's
    tree.change(c, rate_bps=10_000_000)
    assert tree.shared_classes == {"1:10": 2, "1:11": 1, "1:12": 1}
    before = classes(pair.src_ns, pair.src_if)
    sent = {ip: send_udp(pair.src_ns, ip, count=4, payload_bytes=300) for ip in pair.dst_ips}
    delta = _bytes_by_class(pair, before)
    assert delta["1:10"] == sent[a] + sent[b] and delta["1:12"] == sent[c] and delta["1:11"] == sent[d]
    # One change for a (in 1:10 with b) and d (all of 1:11): split by class, d's
    # class changes in place, a moves to a class of its record and group.
    tree.change_groups([([d, a], ShapingChange.of(rate_bps=5_000_000))])
    assert tree.shared_classes == {"1:10": 1, "1:11": 1, "1:12": 1, "1:13": 1}
    got = classes(pair.src_ns, pair.src_if)
    assert (got["1:11"]["rate"], got["1:13"]["rate"], got["1:10"]["rate"]) == ("4921Kbit", "4921Kbit", "9843Kbit")
    assert tree.shapings[a] == Shaping(a, 5_000_000) and tree.shapings[b] == Shaping(b, 10_000_000)
