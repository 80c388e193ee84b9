"""The YAML parser's messages about links:, with their exact
`file:line: message` text: the list and its items, units and ranges of
latency, jitter, loss, bandwidth and direction, unknown ends and keys, a link
to itself or twice, and the properties that need or exclude one another."""

import pytest
from parse_support import link, problems

CASES = [
    # ---- links:
    (
        "links mapping",
        "services:\n  web: {command: [x]}\nlinks: {from: a}\n",
        ["t.yaml:3: links: expected a list of links like - {from: a, to: b, latency: 5ms}, got a mapping"],
    ),
    ("link not mapping", link("web s2"), ["t.yaml:8: link 3: expected a mapping of key: value, got 'web s2'"]),
    (
        "link unit",
        link("{from: web, to: s2, latency: 10 parsecs}"),
        [
            "t.yaml:8: link web -> s2: latency: expected a duration like 10ms, 250us or 1.5s, "
            "got unknown time unit 'parsecs' in '10 parsecs'"
        ],
    ),
    (
        "link units",
        link("{from: web, to: s2, bandwidth: 10, loss: 200%, distribution: gauss, latency: [1]}"),
        [
            "t.yaml:8: link web -> s2: latency: expected a single value, got a list",
            "t.yaml:8: link web -> s2: distribution: expected normal or pareto or paretonormal or uniform, got 'gauss'",
            "t.yaml:8: link web -> s2: loss: expected a loss like 0.1% or 0.001 between 0 and 100%, got '200%'",
            "t.yaml:8: link web -> s2: bandwidth: expected a rate like 128Kbps, 10Mbps or 1Gbps "
            "(a unit is required), got 10",
        ],
    ),
    ("link missing end", link("{from: web, latency: 1ms}"), ["t.yaml:8: link 3: missing 'to'"]),
    (
        "link unknown key",
        link("{from: web, to: s2, latncy: 1ms}"),
        ["t.yaml:8: link web -> s2: unknown key 'latncy' (did you mean 'latency'?)"],
    ),
    (
        "link unknown element",
        link("{from: web, to: s3}", "{from: wbe, to: s2}"),
        [
            "t.yaml:8: link web -> s3: to: unknown element 's3'",
            "t.yaml:9: link wbe -> s2: from: unknown element 'wbe' (did you mean 'web'?)",
        ],
    ),
    ("link to itself", link("{from: s2, to: s2}"), ["t.yaml:8: link s2 -> s2: a link needs two different ends"]),
    (
        "duplicate link",
        link("{from: s1, to: web, latency: 1ms}"),
        ["t.yaml:8: link s1 -> web: a link between s1 and web already exists (line 6)"],
    ),
    (
        "jitter without latency",
        link("{from: s1, to: s2, jitter: 1ms}"),
        ["t.yaml:8: link s1 -> s2: jitter needs a latency"],
    ),
    (
        "jitter above latency",
        link("{from: s1, to: s2, latency: 5ms, jitter: 6ms}"),
        ["t.yaml:8: link s1 -> s2: jitter (6ms) must not exceed the latency (5ms); delays below zero would be clipped"],
    ),
    (
        "distribution without jitter",
        link("{from: s1, to: s2, latency: 5ms, distribution: pareto}"),
        ["t.yaml:8: link s1 -> s2: distribution needs a jitter"],
    ),
    (
        "bandwidth and up",
        link("{from: s1, to: s2, bandwidth: 1Gbps, up: 5Mbps}"),
        ["t.yaml:8: link s1 -> s2: use either bandwidth (both directions) or up/down, not both"],
    ),
    (
        "down on one-way",
        link("{from: s1, to: s2, down: 5Mbps, direction: one-way}"),
        ["t.yaml:8: link s1 -> s2: a one-way link has no down direction; use up or bandwidth"],
    ),
    (
        "direction",
        link("{from: s1, to: s2, direction: oneway}"),
        ["t.yaml:8: link s1 -> s2: direction: expected both or one-way, got 'oneway' (did you mean 'one-way'?)"],
    ),
    (
        "rate above what the metadata carries",
        link("{from: db, to: s2, bandwidth: 5Tbps}"),
        ["t.yaml:8: link db -> s2: bandwidth: expected a rate up to 4Tbps, got '5Tbps'"],
    ),
    (
        "latency above an hour",
        link("{from: db, to: s2, latency: 61m, jitter: 2h}"),
        [
            "t.yaml:8: link db -> s2: latency: expected at most 1h per link, got '61m'",
            "t.yaml:8: link db -> s2: jitter: expected at most 1h per link, got '2h'",
        ],
    ),
]


@pytest.mark.parametrize(("text", "expected"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_message(text, expected):
    assert problems(text) == expected
