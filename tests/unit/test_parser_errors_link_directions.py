"""The parser's messages about per-direction link properties (`up:` and
`down:` as mappings), on links, joins and sets, with their exact
`file:line: message` text: one line for each bad key."""

import pytest
from parse_support import event, link, problems

CASES = [
    # ---- each key's value, under each direction
    (
        "up latency",
        link("{from: s1, to: s2, up: {latency: 10 parsecs}}"),
        [
            "t.yaml:8: link s1 -> s2: up: latency: expected a duration like 10ms, 250us or 1.5s, "
            "got unknown time unit 'parsecs' in '10 parsecs'"
        ],
    ),
    (
        "down jitter",
        link("{from: s1, to: s2, latency: 1h, down: {jitter: 2h}}"),
        ["t.yaml:8: link s1 -> s2: down: jitter: expected at most 1h per link, got '2h'"],
    ),
    (
        "up distribution",
        link("{from: s1, to: s2, latency: 5ms, jitter: 1ms, up: {distribution: gauss}}"),
        [
            "t.yaml:8: link s1 -> s2: up: distribution: expected normal or pareto or paretonormal or uniform, "
            "got 'gauss'"
        ],
    ),
    (
        "down loss",
        link("{from: s1, to: s2, down: {loss: 200%}}"),
        ["t.yaml:8: link s1 -> s2: down: loss: expected a loss like 0.1% or 0.001 between 0 and 100%, got '200%'"],
    ),
    (
        "up bandwidth",
        link("{from: s1, to: s2, up: {bandwidth: 10}}"),
        [
            "t.yaml:8: link s1 -> s2: up: bandwidth: expected a rate like 128Kbps, 10Mbps or 1Gbps "
            "(a unit is required), got 10"
        ],
    ),
    (
        "down rate above what the metadata carries",
        link("{from: s1, to: s2, down: {bandwidth: 5Tbps}}"),
        ["t.yaml:8: link s1 -> s2: down: bandwidth: expected a rate up to 4Tbps, got '5Tbps'"],
    ),
    # ---- the shape of up and down
    (
        "unknown key under up",
        link("{from: s1, to: s2, up: {latncy: 1ms}}"),
        ["t.yaml:8: link s1 -> s2: up: unknown key 'latncy' (did you mean 'latency'?)"],
    ),
    (
        "a direction inside a direction",
        link("{from: s1, to: s2, up: {down: 1Mbps}}"),
        [
            "t.yaml:8: link s1 -> s2: up: unknown key 'down' (expected one of: latency, jitter, "
            "distribution, loss, bandwidth, reorder, duplicate, corrupt, in-order, queue, background, trace)"
        ],
    ),
    (
        "empty direction",
        link("{from: s1, to: s2, down: {}}"),
        [
            "t.yaml:8: link s1 -> s2: down: expected at least one of latency, jitter, distribution, loss, bandwidth, "
            "reorder, duplicate, corrupt, in-order, queue, background"
        ],
    ),
    (
        "direction as a list",
        link("{from: s1, to: s2, up: [10ms]}"),
        [
            "t.yaml:8: link s1 -> s2: up: expected a rate like 10Mbps, or the properties of this direction "
            "like {latency: 10ms, bandwidth: 10Mbps}, got a list"
        ],
    ),
    (
        "direction with nothing",
        link("{from: s1, to: s2, down: }"),
        [
            "t.yaml:8: link s1 -> s2: down: expected a rate like 10Mbps, or the properties of this direction "
            "like {latency: 10ms, bandwidth: 10Mbps}, got nothing"
        ],
    ),
    # ---- a key in one place
    (
        "latency for both and under up",
        link("{from: s1, to: s2, latency: 5ms, up: {latency: 10ms}}"),
        ["t.yaml:8: link s1 -> s2: use either latency (both directions) or latency under up, not both"],
    ),
    (
        "bandwidth for both and under down",
        link("{from: s1, to: s2, bandwidth: 1Gbps, down: {bandwidth: 5Mbps}}"),
        ["t.yaml:8: link s1 -> s2: use either bandwidth (both directions) or bandwidth under down, not both"],
    ),
    (
        "the clash is reported where the direction writes it",
        link("{from: s1, to: s2, loss: 1%,\n     down: {loss: 2%}}"),
        ["t.yaml:9: link s1 -> s2: use either loss (both directions) or loss under down, not both"],
    ),
    # ---- the link rules, per direction
    (
        "jitter without latency in one direction",
        link("{from: s1, to: s2, jitter: 1ms, up: {latency: 5ms}}"),
        ["t.yaml:8: link s1 -> s2: down: jitter needs a latency"],
    ),
    (
        "jitter above one direction's latency",
        link("{from: s1, to: s2, latency: 5ms, up: {jitter: 6ms}}"),
        [
            "t.yaml:8: link s1 -> s2: up: jitter (6ms) must not exceed the latency (5ms); "
            "delays below zero would be clipped"
        ],
    ),
    (
        "distribution for both, jitter in one direction",
        link("{from: s1, to: s2, latency: 5ms, distribution: pareto, up: {jitter: 1ms}}"),
        ["t.yaml:8: link s1 -> s2: down: distribution needs a jitter"],
    ),
    (
        "distribution in a direction without jitter",
        link("{from: s1, to: s2, latency: 5ms, down: {distribution: pareto}}"),
        ["t.yaml:8: link s1 -> s2: down: distribution needs a jitter"],
    ),
    (
        "distribution for both without jitter",
        link("{from: s1, to: s2, latency: 5ms, distribution: pareto, up: {loss: 1%}}"),
        ["t.yaml:8: link s1 -> s2: distribution needs a jitter"],
    ),
    (
        "down of a one-way link",
        link("{from: s1, to: s2, direction: one-way, down: {latency: 5ms}}"),
        ["t.yaml:8: link s1 -> s2: a one-way link has no down direction; use up or bandwidth"],
    ),
]

# Events start at line 9 of `event(...)` documents; web -> s1 has a latency of 10ms.
EVENT_CASES = [
    (
        "set under up",
        event("{at: 1s, link: [web, s1], set: {up: {loss: 2}}}"),
        ["t.yaml:9: link web -> s1: set: up: loss: expected a loss like 0.1% or 0.001 between 0 and 100%, got 2"],
    ),
    (
        "set unknown key under down",
        event("{at: 1s, link: [web, s1], set: {down: {bandwith: 1Mbps}}}"),
        ["t.yaml:9: link web -> s1: set: down: unknown key 'bandwith' (did you mean 'bandwidth'?)"],
    ),
    (
        "set a key in two places",
        event("{at: 1s, link: [web, s1], set: {jitter: 1ms, down: {jitter: 2ms}}}"),
        ["t.yaml:9: link web -> s1: set: use either jitter (both directions) or jitter under down, not both"],
    ),
    (
        "set jitter above one direction's latency",
        event("{at: 1s, link: [web, s1], set: {up: {jitter: 11ms}}}"),
        [
            "t.yaml:9: link web -> s1: up: jitter (11ms) must not exceed the latency (10ms); "
            "delays below zero would be clipped"
        ],
    ),
    (
        "set from the other end, jitter",
        event("{at: 1s, link: [s1, web], set: {down: {jitter: 11ms}}}"),
        [
            "t.yaml:9: link s1 -> web: down: jitter (11ms) must not exceed the latency (10ms); "
            "delays below zero would be clipped"
        ],
    ),
    (
        "join with properties per direction",
        event("{at: 1s, link: [web, s2], action: join, latency: 1ms, down: {jitter: 2ms}}"),
        [
            "t.yaml:9: link web -> s2: down: jitter (2ms) must not exceed the latency (1ms); "
            "delays below zero would be clipped"
        ],
    ),
]

ONE_WAY = "  - {from: s1, to: s2, latency: 5ms, direction: one-way}\n"
ONE_WAY_CASES = [
    (
        "set down of a one-way link",
        "{at: 1s, link: [s1, s2], set: {down: {latency: 1ms}}}",
        [
            "t.yaml:10: link s1 -> s2: the link is one-way from s1 to s2; set it without up and down, "
            "or with up on [s1, s2]"
        ],
    ),
    (
        "set up of a one-way link named from its far end",
        "{at: 1s, link: [s2, s1], set: {up: {latency: 1ms}}}",
        [
            "t.yaml:10: link s2 -> s1: the link is one-way from s1 to s2; set it without up and down, "
            "or with up on [s1, s2]"
        ],
    ),
    (
        "set a one-way link from its far end without up and down",
        "{at: 1s, link: [s2, s1], set: {jitter: 6ms}}",
        [
            "t.yaml:10: link s2 -> s1: jitter (6ms) must not exceed the latency (5ms); "
            "delays below zero would be clipped"
        ],
    ),
]


@pytest.mark.parametrize(("text", "expected"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_link_message(text, expected):
    assert problems(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"), [case[1:] for case in EVENT_CASES], ids=[case[0] for case in EVENT_CASES]
)
def test_event_message(text, expected):
    assert problems(text) == expected


@pytest.mark.parametrize(
    ("line", "expected"), [case[1:] for case in ONE_WAY_CASES], ids=[case[0] for case in ONE_WAY_CASES]
)
def test_one_way_message(line, expected):
    text = link(ONE_WAY.strip()[2:]) + "events:\n" + f"  - {line}\n"
    assert problems(text) == expected
