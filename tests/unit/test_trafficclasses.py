"""Traffic classes: the language (collapsar.parse_classes), the
classification rule (collapsar.trafficclasses) and the u32 nodes that put it
in the kernel (collapsar.tcal.classes), checked against the rule on every
kind of header a packet can have by evaluating the nodes as u32 does."""

import itertools
import struct

import pytest
from parse_support import problems

from collapsar.parser import parse_text
from collapsar.tcal import Shaping, plan_tree
from collapsar.tcal.classes import ClassLayout, match_keys
from collapsar.tcal.layout import FIRST_DEST_MINOR, LAST_DEST_MINOR
from collapsar.trafficclasses import PROTOCOLS, Match, TrafficClass, TrafficClasses
from collapsar.yamlout import to_yaml

TCP, UDP, ICMP = PROTOCOLS["tcp"], PROTOCOLS["udp"], PROTOCOLS["icmp"]


def service(classes: str) -> str:
    return f"services:\n  web:\n    command: [x]\n    traffic-classes: {classes}\n"


def classes_of(text: str) -> TrafficClasses | None:
    return parse_text(service(text), "t.yaml").services[0].traffic_classes


def test_classes_read_as_written_with_dscp_names_and_protocols():
    got = classes_of(
        "[{name: rpc, priority: 0, match: [{src-port: 7000}, {dscp: ef}]},"
        " {name: bulk, priority: 1, weight: 3, match: {dscp: AF41, protocol: udp}},"
        " {name: rest, priority: 1}]"
    )
    assert got == TrafficClasses(
        (
            TrafficClass("rpc", 0, 1, (Match(src_port=7000), Match(dscp=46))),
            TrafficClass("bulk", 1, 3, (Match(dscp=34, protocol=UDP),)),
            TrafficClass("rest", 1, 1, ()),
        )
    )
    assert got.default_index == 2


def test_without_a_class_for_unmatched_traffic_an_implicit_one_is_the_lowest():
    got = classes_of("[{name: rpc, priority: 2, match: {dst-port: 53}}, {name: bulk, priority: 5, match: {dscp: 8}}]")
    assert got.classes[-1] == TrafficClass("default", 5, 1, ())
    assert got.classify(0, UDP, 1000, 80) == 2


def test_the_first_class_that_fits_takes_the_packet():
    classes = classes_of(
        "[{name: a, priority: 0, match: [{dst-port: 80, protocol: tcp}, {dscp: 46}]},"
        " {name: b, priority: 1, match: {dst-port: 80}}, {name: c, priority: 1}]"
    )
    assert classes.classify(0, TCP, 4000, 80) == 0
    assert classes.classify(0, UDP, 4000, 80) == 1  # a wants TCP
    assert classes.classify(46, UDP, 4000, 80) == 0  # EF fits a's second entry
    assert classes.classify(0, UDP, None, None) == 2  # a later fragment has no ports
    assert classes.classify(0, ICMP) == 2


def test_yaml_round_trip_keeps_the_classes():
    text = service("[{name: rpc, priority: 0, match: [{src-port: 7000}, {dscp: ef}]}, {name: bulk, priority: 3}]")
    experiment = parse_text(text, "t.yaml")
    again = parse_text(to_yaml(experiment), "again.yaml")
    assert again.services[0].traffic_classes == experiment.services[0].traffic_classes


BAD = [
    ("not a list", "{name: rpc}", "expected a list of classes like [{name: rpc, priority: 0, match: "
     "{src-port: 7000}}, {name: rest, priority: 1}], got a mapping"),
    ("no priority", "[{name: rpc}]", "class 1: missing 'priority'"),
    ("priority 8", "[{name: rpc, priority: 8}]", "class rpc: priority: expected a whole number from 0 to 7, got '8'"),
    ("weight 0", "[{name: rpc, priority: 1, weight: 0}]",
     "class rpc: weight: expected a whole number from 1 to 100, got '0'"),
    ("unknown key", "[{name: rpc, priority: 1, prio: 2}]",
     "class 1: unknown key 'prio' (did you mean 'priority'?)"),
    ("dscp 64", "[{name: rpc, priority: 0, match: {dscp: 64}}]",
     "class rpc: match: dscp: expected a DSCP value from 0 to 63 or a name like ef, af41, cs1, got '64'"),
    ("port 0", "[{name: rpc, priority: 0, match: {dst-port: 0}}]",
     "class rpc: match: dst-port: expected a whole number from 1 to 65535, got '0'"),
    ("port with icmp", "[{name: rpc, priority: 0, match: {dst-port: 80, protocol: icmp}}]",
     "class rpc: match: a port match needs protocol tcp or udp (or none: either)"),
    ("protocol name", "[{name: rpc, priority: 0, match: {protocol: sctpx}}]",
     "class rpc: match: protocol: expected tcp, udp, icmp or an IP protocol number 0-255, got 'sctpx'"),
    ("empty match", "[{name: rpc, priority: 0, match: {}}]",
     "class rpc: match: expected a mapping like {dst-port: 5001} or a list of them (any may fit), got a mapping"),
    ("match key", "[{name: rpc, priority: 0, match: {port: 80}}]",
     "class rpc: match: unknown key 'port' (did you mean 'src-port'?)"),
    ("two defaults", "[{name: a, priority: 0}, {name: b, priority: 1}]",
     "class 'b' has no match, nor has 'a': only one class takes the unmatched traffic"),
    ("same name", "[{name: a, priority: 0, match: {dscp: 1}}, {name: a, priority: 1}]",
     "class 2: the name 'a' is taken by an earlier class"),
    ("nine classes", "[" + ", ".join(f"{{name: c{i}, priority: 1, match: {{dscp: {i}}}}}" for i in range(9)) + "]",
     "at most 8 classes, got 9"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "classes", "message"), BAD, ids=[case[0] for case in BAD])
def test_bad_values_are_one_line_each(case, classes, message):
    assert problems(service(classes)) == [f"t.yaml:4: service web: traffic-classes: {message}"]


def ipv4_header(dscp: int, protocol: int, ihl: int, frag_offset: int, sport: int, dport: int) -> bytes:
    header = struct.pack(
        ">BBHHHBBH4s4s", 0x40 | ihl, dscp << 2, 60, 1, frag_offset, 64, protocol, 0, b"\n" * 4, b"\x0b" * 4
    )
    header += b"\0" * (ihl * 4 - 20)
    return header + struct.pack(">HH", sport, dport) + b"\0" * 16


def u32_fits(keys: list[tuple[int, int, int]], packet: bytes) -> bool:
    """One u32 node with no offset mask: every 32-bit word at its offset, masked, equals its value."""
    return all(struct.unpack_from(">I", packet, off)[0] & mask == value for mask, value, off in keys)


def kernel_class(layout: ClassLayout, packet: bytes) -> int:
    return next(index for keys, index in layout.rules if u32_fits(keys, packet))


def test_the_u32_nodes_classify_as_the_rule_on_every_kind_of_header():
    classes = TrafficClasses.of(
        [
            TrafficClass("a", 0, 1, (Match(src_port=7000), Match(dscp=46, protocol=UDP))),
            TrafficClass("b", 1, 2, (Match(dst_port=80, protocol=TCP), Match(protocol=ICMP))),
            TrafficClass("c", 1, 1, (Match(src_port=5000, dst_port=5001), Match(dscp=8))),
        ]
    )
    layout = ClassLayout(classes, wire_overhead=True)
    checked = 0
    for dscp, protocol, ihl, frag, sport, dport in itertools.product(
        (0, 8, 46), (TCP, UDP, ICMP, 47), (5, 6), (0, 0x2000, 0x0010), (7000, 5000, 1), (80, 5001, 2)
    ):
        ports = ihl == 5 and frag & 0x1FFF == 0  # ports are read from plain headers and first fragments
        rule = classes.classify(dscp, protocol, sport if ports else None, dport if ports else None)
        assert kernel_class(layout, ipv4_header(dscp, protocol, ihl, frag, sport, dport)) == rule, (
            dscp,
            protocol,
            ihl,
            frag,
            sport,
            dport,
        )
        checked += 1
    assert checked == 3 * 4 * 2 * 3 * 3 * 3


def test_a_port_match_without_a_protocol_is_a_node_for_tcp_and_one_for_udp():
    assert [k[-1] for k in match_keys(Match(dst_port=53))] == [(0x00FF0000, TCP << 16, 8), (0x00FF0000, UDP << 16, 8)]
    assert match_keys(Match(dscp=46)) == [[(0x00FC0000, 46 << 18, 0)]]


def test_children_take_minors_above_the_destinations_and_the_plan_names_them():
    classes = TrafficClasses.of([TrafficClass("rpc", 0, 1, (Match(dst_port=7000),)), TrafficClass("bulk", 2, 4)])
    layout = ClassLayout(classes, wire_overhead=True)
    stride = (LAST_DEST_MINOR - FIRST_DEST_MINOR + 1) // 3
    assert layout.child_minors(FIRST_DEST_MINOR) == [FIRST_DEST_MINOR + stride, FIRST_DEST_MINOR + 2 * stride]
    assert max(layout.child_minors(layout.last_parent)) <= LAST_DEST_MINOR
    (rate_rpc, ceil), (rate_bulk, _) = layout.children
    assert (rate_rpc.rate_bytes_ps, rate_rpc.prio, rate_rpc.quantum_bytes) == (1, 0, 1514)
    assert (rate_bulk.prio, rate_bulk.quantum_bytes) == (2, 4 * 1514)
    assert ceil.rate_bytes_ps == round(100e9 * 1514 / 1538 / 8)
    plan = plan_tree([Shaping("10.0.0.2", rate_bps=10**7)], netem=False, last_minor=layout.last_parent)
    assert plan.dests[0].minor == FIRST_DEST_MINOR
    text = "\n".join(plan.describe(layout.describe()))
    assert f"child 1:N+{stride:x} rpc: priority 0, weight 1, dst-port 7000" in text
    assert "a leaf per traffic class: pfifo limit" in text
