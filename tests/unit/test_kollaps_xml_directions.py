"""Kollaps XML links per direction: two one-way links in opposite directions
become one link, asymmetric where they differ; a geo-distributed mesh of
such pairs imports, validates and collapses; link changes act on the
direction Kollaps changes.  The XML here is written for these tests."""

import pytest
from model_compare import without_where

from collapsar.collapse import collapse
from collapsar.errors import TopologyError
from collapsar.kollaps_xml import parse_xml_text, to_yaml
from collapsar.model import LinkProps
from collapsar.parser import parse_text


def document(links: str, services: str = "<service name='a' image='i'/><service name='b' image='i'/>", dynamic=""):
    return (
        "<experiment>\n"
        f"<services>{services}</services>\n"
        "<bridges><bridge name='s'/><bridge name='t'/></bridges>\n"
        f"<links>\n{links}</links>\n"
        f"<dynamic>\n{dynamic}</dynamic>\n"
        "</experiment>\n"
    )


def xml_problems(text: str) -> list[str]:
    with pytest.raises(TopologyError) as error:
        parse_xml_text(text, "k.xml")
    return error.value.lines()


ACCESS = (
    "<link origin='a' dest='s' latency='1' upload='1Gbps' download='1Gbps'/>\n"
    "<link origin='b' dest='t' latency='1' upload='1Gbps' download='1Gbps'/>\n"
)


def test_one_way_twins_that_differ_become_one_asymmetric_link():
    experiment = parse_xml_text(
        document(
            ACCESS + "<link origin='s' dest='t' latency='105' jitter='7.071' upload='100Mbps' drop='0.01'/>\n"
            "<link origin='t' dest='s' latency='104' jitter='9.899' upload='50Mbps'/>\n"
        ),
        "k.xml",
    )
    assert len(experiment.links) == 3
    spec = experiment.links[2]
    assert (spec.a, spec.b, spec.where.line) == ("s", "t", 7)
    assert spec.up == LinkProps(105_000, 7071, "normal", 0.01, 100_000_000)
    assert spec.down == LinkProps(104_000, 9899, "normal", 0.0, 50_000_000)
    state = collapse(experiment)
    assert (state.path("a", "b").delay_us, state.path("b", "a").delay_us) == (107_000, 106_000)
    assert (state.path("a", "b").rate_bps, state.path("b", "a").rate_bps) == (100_000_000, 50_000_000)


def test_what_twins_share_is_written_once_for_both_directions():
    experiment = parse_xml_text(
        document(
            ACCESS + "<link origin='s' dest='t' latency='85' jitter='7.778' upload='100Mbps'/>\n"
            "<link origin='t' dest='s' latency='85' jitter='9.899' upload='100Mbps'/>\n"
        ),
        "k.xml",
    )
    line = to_yaml(experiment).splitlines()[-1]
    assert line == (
        "  - {from: s, to: t, latency: 85ms, bandwidth: 100Mbps, up: {jitter: 7778us}, down: {jitter: 9899us}}"
    )


GEO = ["ireland", "saopaulo", "oregon", "sydney"]


def geo_document() -> str:
    """Four regions, each with a server and a client, and a full mesh of
    one-way links between the regions whose latency and jitter differ each way."""
    services, links = [], []
    for region in GEO:
        services.append(f"<service name='s-{region}' image='server'/><service name='c-{region}' image='client'/>")
        for end in ("s", "c"):
            links.append(f"<link origin='{end}-{region}' dest='{region}' latency='1' upload='1Gbps' download='1Gbps'/>")
    for i, origin in enumerate(GEO):
        for j, dest in enumerate(GEO):
            if i != j:
                latency = 80 + 10 * (i + j) + (i > j)
                links.append(
                    f"<link origin='{origin}' dest='{dest}' latency='{latency}' jitter='{i + 1}.5' upload='100Mbps'/>"
                )
    bridges = "".join(f"<bridge name='{region}'/>" for region in GEO)
    return (
        "<experiment>\n<services>\n" + "\n".join(services) + "\n</services>\n"
        f"<bridges>{bridges}</bridges>\n<links>\n" + "\n".join(links) + "\n</links>\n</experiment>\n"
    )


def test_a_geo_distributed_mesh_of_one_way_links_imports_and_collapses():
    experiment = parse_xml_text(geo_document(), "geo.xml")
    assert len(experiment.links) == 8 + 6  # access links, then one link per pair of regions
    again = parse_text(to_yaml(experiment), "geo.xml")
    assert without_where(again) == without_where(experiment)
    state = collapse(experiment)
    assert len(list(state.paths())) == 8 * 7
    # ireland (0) -> sydney (3): 90 + 2 access ms; the way back is 1 ms slower.
    there, back = state.path("c-ireland", "s-sydney"), state.path("s-sydney", "c-ireland")
    assert (there.delay_us, back.delay_us) == (112_000, 113_000)
    assert (there.jitter_us, back.jitter_us) == (1500, 4500)


def test_a_link_change_without_download_acts_on_origin_to_dest_only():
    experiment = parse_xml_text(
        document(
            ACCESS + "<link origin='s' dest='t' latency='10' upload='10Mbps'/>\n"
            "<link origin='t' dest='s' latency='20' upload='10Mbps'/>\n",
            dynamic="<schedule origin='t' dest='s' time='5' latency='30' drop='0.1'/>\n"
            "<schedule origin='s' dest='t' time='6' latency='40' upload='1Mbps' download='2Mbps'/>\n",
        ),
        "k.xml",
    )
    change, both = experiment.events
    assert (change.a, change.b, change.up, change.down) == (
        "s",
        "t",
        {},
        {"delay_us": 30_000, "loss_ratio": 0.1, "loss_model": None},
    )
    assert both.up == {"delay_us": 40_000, "rate_bps": 10**6}
    assert both.down == {"delay_us": 40_000, "rate_bps": 2 * 10**6}


def test_bad_input_in_either_twin_names_its_own_line():
    assert xml_problems(
        document(
            ACCESS + "<link origin='s' dest='t' latency='10' upload='10Mbps'/>\n"
            "<link origin='t' dest='s' latency='ten' jitter='1' upload='10 parsecs' colour='red'/>\n"
        )
    ) == [
        "k.xml:8: link t -> s: unknown attribute 'colour'",
        "k.xml:8: link t -> s: latency: expected milliseconds like 10 or 0.5, got 'ten'",
        "k.xml:8: link s -> t: down: bandwidth: expected a rate like 128Kbps, 10Mbps or 1Gbps, "
        "got unknown rate unit 'parsecs' in '10 parsecs'",
    ]


def test_a_twin_whose_jitter_exceeds_its_latency_names_the_direction():
    assert xml_problems(
        document(
            ACCESS + "<link origin='s' dest='t' latency='10' upload='10Mbps'/>\n"
            "<link origin='t' dest='s' latency='1' jitter='2' upload='10Mbps'/>\n"
        )
    ) == [
        "k.xml:8: link s -> t: down: jitter (2ms) must not exceed the latency (1ms); delays below zero would be clipped"
    ]


def test_a_one_way_link_against_a_two_way_one_is_a_second_link():
    assert xml_problems(
        document(
            ACCESS + "<link origin='s' dest='t' latency='10' upload='10Mbps' download='10Mbps'/>\n"
            "<link origin='t' dest='s' latency='20' upload='10Mbps'/>\n"
        )
    ) == ["k.xml:8: link t -> s: a link between t and s already exists (line 7)"]
