"""Guards on this host's kernel (collapsar.tcal.guard): the drop program at
clsact egress cuts every IPv4 packet towards an instance in one message,
lifts it in one, and leaves nothing behind."""

import pytest
from netns_helpers import sh
from tcal_traffic import ping_loss, qdisc_kinds, send_udp

from collapsar.errors import KernelError
from collapsar.tcal.guard import Guards


def _egress_filters(ns: str, dev: str) -> str:
    return sh("tc", "filter", "show", "dev", dev, "egress", ns=ns).stdout


def _kinds(pair) -> list[str]:
    return [kind for kind, _, _ in qdisc_kinds(pair.src_ns, pair.src_if)]


def _sent_packets(ns: str, dev: str) -> int:
    return int(sh("cat", f"/sys/class/net/{dev}/statistics/tx_packets", ns=ns).stdout)


def test_a_guard_cuts_every_ipv4_packet_to_its_instance_and_is_lifted_whole(make_netns_pair):
    pair = make_netns_pair(n_dst=2)
    # The sender's veth stands for the instance's bridge port: packets to
    # the instance leave through it.
    guards = Guards({"d": pair.src_if}, netns=pair.src_ns)
    try:
        assert ping_loss(pair.src_ns, pair.dst_ips[0]) == 0
        guards.set(on=["d"])
        assert guards.on == {"d"}
        assert "clsact" in _kinds(pair)
        text = _egress_filters(pair.src_ns, pair.src_if)
        assert "protocol ip" in text and "cx_guard" in text and "direct-action" in text
        for ip in pair.dst_ips:  # every address of the instance
            assert ping_loss(pair.src_ns, ip, count=3) == 1.0
        # Dropped before the interface: nothing leaves it.
        before = _sent_packets(pair.src_ns, pair.src_if)
        send_udp(pair.src_ns, pair.dst_ips[1], count=20, payload_bytes=100)
        assert _sent_packets(pair.src_ns, pair.src_if) - before == 0
        # ARP is not IPv4: the neighbour is still resolved across the guard.
        sh("ip", "neigh", "flush", "dev", pair.src_if, ns=pair.src_ns)
        ping_loss(pair.src_ns, pair.dst_ips[0], count=1)
        neigh = sh("ip", "neigh", "show", pair.dst_ips[0], "dev", pair.src_if, ns=pair.src_ns).stdout
        assert "lladdr" in neigh

        guards.set(on=["d"])  # already on: nothing sent, nothing changes
        guards.set(off=["d"])
        assert guards.on == set()
        assert "cx_guard" not in _egress_filters(pair.src_ns, pair.src_if)
        assert ping_loss(pair.src_ns, pair.dst_ips[0]) == 0
        guards.set(on=["d"])  # again, on the clsact made the first time
        assert ping_loss(pair.src_ns, pair.dst_ips[1], count=2) == 1.0
    finally:
        guards.close()
    assert "clsact" not in _kinds(pair)
    assert ping_loss(pair.src_ns, pair.dst_ips[0]) == 0
    guards.close()  # a second close does nothing


def test_a_clsact_someone_else_made_is_used_and_left_in_place(make_netns_pair):
    pair = make_netns_pair()
    sh("tc", "qdisc", "add", "dev", pair.src_if, "clsact", ns=pair.src_ns)
    guards = Guards({"d": pair.src_if}, netns=pair.src_ns)
    guards.set(on=["d"])
    assert guards.on == {"d"}
    assert ping_loss(pair.src_ns, pair.dst_ips[0], count=2) == 1.0
    guards.close()
    assert "clsact" in _kinds(pair)  # not ours to delete
    assert "cx_guard" not in _egress_filters(pair.src_ns, pair.src_if)
    assert ping_loss(pair.src_ns, pair.dst_ips[0]) == 0


def test_a_refused_guard_is_raised_and_not_counted_on(make_netns_pair):
    pair = make_netns_pair()
    guards = Guards({"d": pair.src_if, "gone": "cxnosuchif0"}, netns=pair.src_ns)
    try:
        with pytest.raises(KernelError, match="interface 'cxnosuchif0' not found"):
            guards.set(on=["gone"])
        assert guards.on == set()
        # Someone else's filter of another kind at the guard's place: the
        # kernel refuses ours, and the guard is not counted on.
        sh("tc", "qdisc", "add", "dev", pair.src_if, "clsact", ns=pair.src_ns)
        sh(
            "tc", "filter", "add", "dev", pair.src_if, "egress", "prio", "1", "protocol", "ip",
            "u32", "match", "u32", "0", "0", ns=pair.src_ns,
        )  # fmt: skip
        with pytest.raises(KernelError, match=r"d: guard \(cut every path to it\): .*EINVAL"):
            guards.set(on=["d"])
        assert guards.on == set()
        assert ping_loss(pair.src_ns, pair.dst_ips[0]) == 0
    finally:
        guards.close()
