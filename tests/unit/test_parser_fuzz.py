"""Property tests: no input makes the parsers raise anything but TopologyError,
and every valid generated experiment parses and survives a YAML round trip."""

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from model_compare import without_where

from collapsar.errors import TopologyError
from collapsar.kollaps_xml import parse_xml_text, to_yaml
from collapsar.parser import parse_file, parse_text

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TOKENS = [
    "services:",
    "bridges:",
    "links:",
    "events:",
    "experiment:",
    "web",
    "s1",
    "db-2",
    "{",
    "}",
    "[",
    "]",
    ",",
    ": ",
    "- ",
    "\n",
    "  ",
    "from",
    "to",
    "latency",
    "10ms",
    "jitter",
    "bandwidth",
    "1Gbps",
    "up",
    "down",
    "loss",
    "0.1%",
    "at",
    "action",
    "join",
    "leave",
    "crash",
    "set",
    "flap",
    "every",
    "until",
    "partition",
    "amount",
    "&a ",
    "*a",
    "<<",
    "!!str ",
    "!x ",
    "!!bool ",
    "!!int ",
    "!!float ",
    "!!null ",
    "!!binary ",
    "!!timestamp ",
    "!!set ",
    "!!omap ",
    "0x",
    "0b",
    "1:30",
    "yes",
    "'",
    '"',
    "#",
    "-1",
    "1e999",
    ".nan",
    "~",
    "command",
    "replicas",
    "direction",
    "one-way",
    "instance",
    "bridge",
    "link",
]


def only_topology_errors(parse, text):
    try:
        parse(text)
    except TopologyError as error:
        assert error.problems, "a TopologyError must carry at least one problem"
        assert all(str(problem) for problem in error.problems)


@FUZZ
@given(st.text())
def test_any_text(text):
    only_topology_errors(lambda t: parse_text(t, "f.yaml"), text)


@FUZZ
@given(st.lists(st.sampled_from(TOKENS), max_size=60).map("".join))
def test_yaml_ish_text(text):
    only_topology_errors(lambda t: parse_text(t, "f.yaml"), text)


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=12),
    st.sampled_from(["10ms", "1Gbps", "0.1%", "web", "s1", "join", "leave", "one-way", "-5s"]),
)
KEYS = st.sampled_from(
    [
        "services",
        "bridges",
        "links",
        "events",
        "experiment",
        "web",
        "db",
        "s1",
        "from",
        "to",
        "latency",
        "jitter",
        "bandwidth",
        "up",
        "down",
        "at",
        "service",
        "instance",
        "link",
        "bridge",
        "partition",
        "action",
        "amount",
        "set",
        "flap",
        "every",
        "until",
        "command",
        "replicas",
        "env",
        "seed",
        "period",
        "name",
        "direction",
        "distribution",
        "loss",
        "reorder",
        "duplicate",
        "corrupt",
        "in-order",
        "queue",
        "rate",
        "burst",
        "correlation",
        "to-bad",
        "to-good",
        "loss-in-bad",
        "background",
        "mean",
    ]
)
DOCUMENTS = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(KEYS, inner, max_size=6)),
    max_leaves=40,
)


@FUZZ
@given(st.dictionaries(KEYS, DOCUMENTS, max_size=6))
def test_structured_documents(document):
    text = yaml.safe_dump(document, allow_unicode=True)
    only_topology_errors(lambda t: parse_text(t, "f.yaml"), text)


@FUZZ
@given(st.binary(max_size=200))
def test_any_bytes_in_a_file(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "f.yaml"
    path.write_bytes(data)
    only_topology_errors(parse_file, path)


XML_TOKENS = [
    "<experiment>",
    "</experiment>",
    "<services>",
    "</services>",
    "<service ",
    "name='a' ",
    "image='i' ",
    "command='[1]' ",
    "/>",
    ">",
    "<bridges>",
    "</bridges>",
    "<bridge name='s'/>",
    "<links>",
    "</links>",
    "<link ",
    "origin='a' ",
    "dest='s' ",
    "latency='1' ",
    "upload='1Mbps' ",
    "drop='x' ",
    "<dynamic>",
    "</dynamic>",
    "<schedule ",
    "time='1' ",
    "action='leave' ",
    "amount='2' ",
    "&amp;",
    "&x;",
    "<!DOCTYPE x>",
    "\n",
    "<?xml version='1.0'?>",
]


@FUZZ
@given(st.one_of(st.text(), st.lists(st.sampled_from(XML_TOKENS), max_size=40).map("".join)))
def test_kollaps_xml_any_text(text):
    only_topology_errors(lambda t: parse_xml_text(t, "f.xml"), text)


# ---- valid documents ---------------------------------------------------------

NAMES = [f"n{i}" for i in range(8)]


@st.composite
def experiments(draw):
    count = draw(st.integers(2, 8))
    names = NAMES[:count]
    services = draw(st.integers(1, count))
    service_names, bridge_names = names[:services], names[services:]
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=10)) if pairs else []
    links = []
    for a, b in chosen:
        latency_us = draw(st.integers(0, 10**6))
        link = {"from": a, "to": b}
        if latency_us:
            link["latency"] = f"{latency_us}us"
            jitter_us = draw(st.integers(0, latency_us))
            if jitter_us:
                link["jitter"] = f"{jitter_us}us"
                link["distribution"] = draw(st.sampled_from(["normal", "pareto", "uniform"]))
        if draw(st.booleans()):
            link["loss"] = draw(st.floats(0, 1))
        elif draw(st.booleans()):  # burst loss, as the chain itself
            chain = {"to-bad": draw(st.floats(0, 1)), "to-good": draw(st.floats(0.001, 1))}
            if draw(st.booleans()):
                chain["loss-in-bad"] = draw(st.floats(0, 1))
            link["loss"] = chain
        for key in ("duplicate", "corrupt") + (("reorder",) if latency_us else ()):
            if draw(st.booleans()):
                link[key] = draw(st.floats(0, 1))
        if "jitter" in link and draw(st.booleans()):
            link["in-order"] = draw(st.booleans())
        rates = draw(st.sampled_from(["none", "both", "split", "one-way"]))
        if rates == "both":
            link["bandwidth"] = f"{draw(st.integers(1, 10**10))}bps"
            if draw(st.booleans()):
                link["queue"] = draw(st.one_of(st.integers(1, 10**6), st.integers(1, 60 * 10**6).map("{}us".format)))
            if draw(st.booleans()):
                link["background"] = {
                    "mean": f"{draw(st.integers(1, 10**9))}bps",
                    "every": f"{draw(st.integers(1, 99))}s",
                }
                if draw(st.booleans()):
                    link["background"]["sd"] = f"{draw(st.integers(0, 10**9))}bps"
                if draw(st.booleans()):
                    link["background"]["rtt"] = f"{draw(st.integers(1, 10**6))}us"
        elif rates == "split":
            link["up"] = f"{draw(st.integers(1, 10**10))}bps"
            link["down"] = f"{draw(st.integers(1, 4 * 10**9))}Kbps"  # up to MAX_RATE_BPS
        elif rates == "one-way":
            link["direction"] = "one-way"
        links.append(link)
    replicas = {name: draw(st.integers(0, 3)) for name in service_names}
    events = []
    for name in service_names:
        for at in draw(st.lists(st.integers(0, 100), max_size=3)):
            events.append({"at": f"{at}s", "service": name, "action": "join", "amount": draw(st.integers(1, 3))})
    for link in links:
        if draw(st.booleans()):
            start = draw(st.integers(0, 50))
            events.append(
                {
                    "at": f"{start}s",
                    "link": [link["from"], link["to"]],
                    "flap": {"every": "1s", "until": f"{start + draw(st.integers(1, 9))}s"},
                }
            )
    document = {
        "experiment": {"name": "fuzz", "seed": draw(st.integers(0, 2**32))},
        "services": {name: {"command": ["run", name], "replicas": replicas[name]} for name in service_names},
        "bridges": bridge_names,
        "links": links,
        "events": events,
    }
    return document


@FUZZ
@given(experiments())
def test_valid_documents_parse_and_round_trip(document):
    experiment = parse_text(yaml.safe_dump(document), "f.yaml")
    assert [s.name for s in experiment.services] == list(document["services"])
    assert len(experiment.links) == len(document["links"])
    assert [e.at_us for e in experiment.events] == sorted(e.at_us for e in experiment.events)
    again = parse_text(to_yaml(experiment), "f.yaml")
    assert without_where(again) == without_where(experiment)
