"""What the dashboard draws, from a real timeline (collapsar.manager.status.topoview)."""

from collapsar.manager.status.topoview import flow_rows, live_links, topology_json
from collapsar.parser import parse_text
from collapsar.timeline import build_timeline

TEXT = """
experiment: {name: view}
services:
  web: {command: [sleep, "1"], replicas: 2}
  db: {command: [sleep, "1"]}
bridges: [sw]
links:
  - {from: web, to: sw, bandwidth: 20Mbps}
  - {from: sw, to: db, up: 100Mbps, down: 50Mbps}
events:
  - {at: 1s, link: [web, sw], set: {bandwidth: 5Mbps}}
  - {at: 2s, link: [sw, db], action: leave}
  - {at: 3s, link: [web, db], action: join, bandwidth: 1Mbps}
"""
TIMELINE = build_timeline(parse_text(TEXT, "view.yaml"))


def by_id(links):
    return {link["id"]: link for link in links}


def test_topology_lists_services_bridges_and_every_link_ever():
    topo = topology_json(TIMELINE.steps[0].state)
    assert topo["experiment"] == "view"
    assert topo["nodes"] == [
        {"id": "web", "kind": "service", "instances": ["web", "web-2"]},
        {"id": "db", "kind": "service", "instances": ["db"]},
        {"id": "sw", "kind": "bridge"},
    ]
    assert [(link["id"], link["a"], link["b"]) for link in topo["links"]] == [
        (0, "web", "sw"),
        (1, "sw", "db"),
        (2, "web", "db"),
    ]
    assert topo["links"][1]["up"]["rate_bps"] == 100_000_000
    assert topo["links"][1]["down"]["rate_bps"] == 50_000_000


def test_at_start_all_written_links_present_none_degraded():
    links = by_id(live_links(TIMELINE.state_at(0), []))
    assert [(links[i]["present"], links[i]["degraded"]) for i in range(3)] == [
        (True, False),
        (True, False),
        (False, False),
    ]
    assert links[0]["up"]["load_bps"] == 0 and links[0]["up"]["utilisation"] == 0.0


def test_set_degrades_leave_removes_join_adds():
    at_1 = by_id(live_links(TIMELINE.state_at(1_000_000), []))
    assert at_1[0]["degraded"] and at_1[0]["up"]["rate_bps"] == 5_000_000
    at_2 = by_id(live_links(TIMELINE.state_at(2_000_000), []))
    assert not at_2[1]["present"]
    at_3 = by_id(live_links(TIMELINE.state_at(3_000_000), []))
    assert at_3[2]["present"] and at_3[2]["up"]["rate_bps"] == 1_000_000


def test_load_follows_the_paths_and_sums_per_instance_link():
    flows = [
        {"src": "web", "dst": "db", "rate_bps": 4_000_000},
        {"src": "web-2", "dst": "db", "rate_bps": 6_000_000},
        {"src": "db", "dst": "web", "rate_bps": 0},
    ]
    links = by_id(live_links(TIMELINE.state_at(0), flows))
    # web and web-2 each have their own 20 Mbit/s link to sw: the busiest counts.
    assert links[0]["up"]["load_bps"] == 6_000_000 and links[0]["up"]["utilisation"] == 0.3
    # Both cross sw -> db (up: 100 Mbit/s).
    assert links[1]["up"]["load_bps"] == 10_000_000 and links[1]["up"]["utilisation"] == 0.1
    assert links[1]["down"]["load_bps"] == 0


def test_flow_rows_carry_the_configured_rate_or_cut():
    rows = flow_rows(
        TIMELINE.state_at(2_500_000),
        [{"src": "web", "dst": "db", "rate_bps": 1}, {"src": "web", "dst": "nobody", "rate_bps": 1}],
    )
    assert rows[0]["cut"] and rows[0]["configured_bps"] is None  # sw -- db has left
    assert rows[1]["cut"]  # unknown instance: shown, never an exception
    rows = flow_rows(TIMELINE.state_at(0), [{"src": "web", "dst": "db", "rate_bps": 1}])
    assert rows[0]["configured_bps"] == 20_000_000 and not rows[0]["cut"]
