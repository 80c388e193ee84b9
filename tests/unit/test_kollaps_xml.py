"""Kollaps XML import: translation, round trip through YAML, and messages."""

import pathlib
import subprocess
import sys

import pytest
from model_compare import without_where

from collapsar.errors import TopologyError, Where
from collapsar.kollaps_xml import parse_xml_file, parse_xml_text, to_yaml
from collapsar.model import BridgeEvent, LinkEvent, LinkProps, LinkSetEvent, ServiceEvent
from collapsar.parser import parse_text

DATA = pathlib.Path(__file__).parent / "data"
IPERF = DATA / "kollaps_iperf.xml"


def xml_problems(text: str) -> list[str]:
    with pytest.raises(TopologyError) as error:
        parse_xml_text(text, "k.xml")
    return error.value.lines()


def test_services_bridges_and_replicas():
    experiment = parse_xml_file(IPERF)
    assert experiment.settings.name == "kollaps-iperf"
    assert [(s.name, s.image, s.command, s.replicas) for s in experiment.services] == [
        ("client1", "kollaps/iperf3-client:1.0", ("server", "0", "0"), 1),
        ("client2", "kollaps/iperf3-client:1.0", ("server", "0", "0"), 0),
        ("server", "kollaps/iperf3-server:1.0", (), 3),
    ]  # the dashboard is not imported
    assert [b.name for b in experiment.bridges] == ["s1", "s2"]
    assert experiment.services[0].where == Where(str(IPERF), 5)


def test_links_units_and_directions():
    links = parse_xml_file(IPERF).links
    assert [(link.a, link.b) for link in links] == [
        ("client1", "s1"),
        ("client2", "s1"),
        ("s1", "s2"),
        ("s2", "server"),
    ]
    assert links[1].up == LinkProps(5500, 500, "normal", 0.0, 50_000_000)
    assert links[1].down == LinkProps(5500, 500, "normal", 0.0, 20_000_000)
    assert links[2].up.loss_ratio == 0.01 and links[2].up.delay_us == 20_000
    # Two one-way links, one each way, with equal latency become one two-way link.
    assert links[3].down == LinkProps(1000, rate_bps=10**9)
    assert links[3].where == Where(str(IPERF), 17)


def test_dynamic_schedules():
    events = parse_xml_file(IPERF).events
    assert events[0] == ServiceEvent(10_000_000, "client2", "join", ("client2", "client2-2"), Where(str(IPERF), 23))
    assert isinstance(events[1], LinkSetEvent)
    # Without download, a Kollaps link change acts on origin -> dest alone.
    assert (events[1].up, events[1].down) == ({"delay_us": 40_000, "rate_bps": 500_000_000}, {})
    leave = events[2]
    assert leave.action == "leave" and len(leave.targets) == 2
    assert set(leave.targets) < {"server", "server-2", "server-3"}
    assert events[3] == ServiceEvent(45_500_000, "client1", "crash", ("client1",), Where(str(IPERF), 25))
    assert [(type(e), e.at_us // 10**6) for e in events[4:]] == [
        (LinkEvent, 60),
        (LinkEvent, 70),
        (BridgeEvent, 80),
        (LinkEvent, 90),
    ]
    assert events[-1].spec.up == LinkProps(3000, rate_bps=10_000_000)


def test_round_trip_through_yaml():
    experiment = parse_xml_file(IPERF)
    again = parse_text(to_yaml(experiment), experiment.source)
    assert without_where(again) == without_where(experiment)


def test_round_trip_of_the_language_sample():
    text = (pathlib.Path(__file__).parents[2] / "topologies" / "demo.yaml").read_text()
    experiment = parse_text(text, "demo.yaml")
    assert without_where(parse_text(to_yaml(experiment), "demo.yaml")) == without_where(experiment)


def test_to_yaml_text():
    text = to_yaml(parse_xml_file(IPERF))
    assert text.splitlines()[:8] == [
        "experiment:",
        "  name: kollaps-iperf",
        "services:",
        "  client1:",
        '    command: [server, "0", "0"]',
        '    image: "kollaps/iperf3-client:1.0"',
        "  client2:",
        '    command: [server, "0", "0"]',
    ]
    assert "  - {from: client2, to: s1, latency: 5500us, jitter: 500us, up: 50Mbps, down: 20Mbps}" in text
    assert "  - {at: 20s, link: [s1, s2], set: {up: {latency: 40ms, bandwidth: 500Mbps}}}" in text


def test_messages_name_the_line():
    assert xml_problems((DATA / "kollaps_bad.xml").read_text()) == [
        "k.xml:4: service client1: unknown attribute 'replica' (did you mean 'replicas'?)",
        "k.xml:11: link client1 -> s1: latency: expected milliseconds like 10 or 0.5, got 'ten'",
        "k.xml:12: link s1 -> server: up: expected a rate like 128Kbps, 10Mbps or 1Gbps, got "
        "unknown rate unit 'parsecs' in '10 parsecs'",
        "k.xml:13: link s1 -> sever: to: unknown element 'sever' (did you mean 'server'?)",
        "k.xml:16: schedule: time: expected seconds like 10 or 2.5, got 'soon'",
        "k.xml:17: service server: action: expected join or leave or crash or disconnect or reconnect, got 'explode'",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<experiment><services>", "k.xml:1: XML syntax: no element found (column 23)"),
        (
            "<?xml version='1.0'?>\n<!DOCTYPE x [<!ENTITY a 'aaaa'>]>\n<experiment/>",
            "k.xml:2: DTDs and entity declarations are not accepted in an experiment; remove the <!DOCTYPE ...>",
        ),
        ("<experiment>&lol;</experiment>", "k.xml:1: XML syntax: undefined entity (column 13)"),
        ("<topology/>", "k.xml:1: expected a Kollaps <experiment>, got <topology>"),
        (
            "<experiment>\n<services><service name='a' image='i'/></services><servics/></experiment>",
            "k.xml:2: <experiment>: unknown element <servics> (did you mean 'services'?)",
        ),
        (
            "<experiment><services><service name='a' image='i' command='[1,'/></services></experiment>",
            "k.xml:1: service a: command: expected a list like ['server', '0'], got '[1,'",
        ),
        (
            "<experiment><services><service image='i'/><service name='b' image='i'/></services></experiment>",
            "k.xml:1: <service>: missing attribute 'name'",
        ),
        ("<experiment>\n<services/>\n</experiment>", "k.xml:2: services: an experiment needs at least one service"),
    ],
)
def test_xml_problems(text, expected):
    assert xml_problems(text) == [expected]


def test_import_command_prints_yaml(tmp_path):
    out = tmp_path / "iperf.yaml"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from collapsar.commands import import_xml;"
            "import sys, argparse; sys.exit(import_xml.run(argparse.Namespace("
            f"file={str(IPERF)!r}, output={str(out)!r})))",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"{IPERF}: wrote {out}\n"
    assert out.read_text() == to_yaml(parse_xml_file(IPERF))


def test_replicas_attribute_counts_when_the_service_never_joins():
    experiment = parse_xml_text(
        "<experiment><services><service name='a' image='i' replicas='3'/>"
        "<service name='b' image='i' replicas='3'/></services><dynamic>"
        "<schedule name='b' time='5' action='join'/></dynamic></experiment>",
        "k.xml",
    )
    assert [s.replicas for s in experiment.services] == [3, 0]
    assert experiment.events[0].targets == ("b",)
