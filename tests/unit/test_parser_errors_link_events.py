"""The YAML parser's messages about events on links and partitions, with
their exact `file:line: message` text: the link's two ends, action, set and
flap and what each refuses (a missing or existing link, a set after a leave,
jitter above the latency, flaps too frequent or expanded past the cap by YAML
aliases), and partition groups, until and heal."""

import pytest
from parse_support import event, problems

# Events start at line 9 of `event(...)` documents.
EVENT_CASES = [
    (
        "link pair",
        event("{at: 1s, link: s1, action: leave}"),
        ["t.yaml:9: link: expected the two ends of a link like [s1, s2], got 's1'"],
    ),
    (
        "link unknown end",
        event("{at: 1s, link: [s1, s9], action: leave}"),
        ["t.yaml:9: link s1 -> s9: unknown element 's9'"],
    ),
    (
        "link no mode",
        event("{at: 1s, link: [web, s1]}"),
        ["t.yaml:9: link web -> s1: needs one of action (join or leave), set or flap"],
    ),
    (
        "link two modes",
        event("{at: 1s, link: [web, s1], action: leave, set: {loss: 1%}}"),
        ["t.yaml:9: link web -> s1: needs only one of action (join or leave), set or flap"],
    ),
    (
        "link missing",
        event("{at: 1s, link: [web, s2], action: leave}"),
        ["t.yaml:9: link web -> s2: cannot leave at 1s: there is no link between web and s2"],
    ),
    (
        "link join up",
        event("{at: 1s, link: [s1, web], action: join}"),
        ["t.yaml:9: link s1 -> web: cannot join at 1s: the link is already up"],
    ),
    (
        "link join missing",
        event("{at: 1s, link: [web, s2], action: join}"),
        [
            "t.yaml:9: link web -> s2: cannot join at 1s: there is no link between web and s2; "
            "give the join properties (latency, bandwidth, ...) to create it"
        ],
    ),
    (
        "link create existing",
        event("{at: 1s, link: [web, s1], action: join, latency: 1ms}"),
        [
            "t.yaml:9: link web -> s1: cannot join at 1s: a link between web and s1 already "
            "exists (line 6); a join with properties creates a new link"
        ],
    ),
    (
        "link leave twice",
        event("{at: 1s, link: [web, s1], action: leave}", "{at: 2s, link: [web, s1], action: leave}"),
        ["t.yaml:10: link web -> s1: cannot leave at 2s: the link already left at 1s"],
    ),
    (
        "leave with properties",
        event("{at: 1s, link: [web, s1], action: leave, latency: 1ms}"),
        ["t.yaml:9: link web -> s1: latency only goes with a join (a join with properties creates a new link)"],
    ),
    (
        "new link jitter",
        event("{at: 1s, link: [web, s2], action: join, jitter: 1ms}"),
        ["t.yaml:9: link web -> s2: jitter needs a latency"],
    ),
    (
        "set unknown key",
        event("{at: 1s, link: [web, s1], set: {latncy: 1ms}}"),
        ["t.yaml:9: link web -> s1: set: unknown key 'latncy' (did you mean 'latency'?)"],
    ),
    (
        "set nothing",
        event("{at: 1s, link: [web, s1], set: {}}"),
        [
            "t.yaml:9: link web -> s1: set: expected at least one of latency, jitter, "
            "distribution, loss, bandwidth, reorder, duplicate, corrupt, in-order, queue, background, up, down"
        ],
    ),
    (
        "set after leave",
        event("{at: 1s, link: [web, s1], action: leave}", "{at: 2s, link: [web, s1], set: {loss: 1%}}"),
        ["t.yaml:10: link web -> s1: cannot set at 2s: the link left at 1s; it must join first"],
    ),
    (
        "set jitter",
        event(
            "{at: 1s, link: [web, s1], set: {jitter: 11ms}}",
            "{at: 2s, link: [web, s1], set: {latency: 0ms, jitter: 0ms, distribution: pareto}}",
        ),
        [
            "t.yaml:9: link web -> s1: jitter (11ms) must not exceed the latency (10ms); delays "
            "below zero would be clipped",
            "t.yaml:10: link web -> s1: distribution needs a jitter",
        ],
    ),
    (
        "set both rates",
        event("{at: 1s, link: [web, s1], set: {bandwidth: 1Gbps, down: 1Mbps}}"),
        ["t.yaml:9: link web -> s1: set: use either bandwidth (both directions) or up/down, not both"],
    ),
    (
        "flap",
        event(
            "{at: 5s, link: [web, s1], flap: {every: 0s, until: 9s}}",
            "{at: 5s, link: [web, s1], flap: {every: 1s, until: 4s}}",
            "{at: 5s, link: [web, s1], flap: {every: 1us, until: 1h}}",
            "{at: 5s, link: [web, s1], flap: {every: 1s}}",
        ),
        [
            "t.yaml:9: link web -> s1: flap: every: expected a duration above zero",
            "t.yaml:10: link web -> s1: flap: until (4s) must come after at (5s)",
            "t.yaml:11: link web -> s1: flap: would change the link 3595000000 times; at most "
            "10000 (make every longer)",
            "t.yaml:12: link web -> s1: flap: missing 'until'",
        ],
    ),
    (
        "aliased flaps expand past the cap",
        "x-f: &f {at: 1s, link: [web, s1], flap: {every: 1ms, until: 10s}}\n" + event(*["*f"] * 12),
        [
            "t.yaml:1: events: expand to more than 100000 changes here (each flap change and each repeat "
            "through a YAML alias counts); make flap intervals longer or the timeline shorter"
        ],
    ),
    (
        "flap over a leave",
        event("{at: 1s, link: [web, s1], flap: {every: 1s, until: 5s}}", "{at: 2s, link: [web, s1], action: leave}"),
        ["t.yaml:9: link web -> s1: flap: cannot leave at 3s: the link already left at 2s"],
    ),
    (
        "partition groups",
        event(
            "{at: 1s, partition: [web]}",
            "{at: 1s, partition: [[web], [web, db]]}",
            "{at: 1s, partition: [[web], [s1]]}",
            "{at: 1s, partition: [[web], []]}",
            "{at: 1s, partition: [[web], [dbb]]}",
        ),
        [
            "t.yaml:9: partition: expected two or more groups of services like [[client], [server, db]], got a list",
            "t.yaml:10: partition: service 'web' is in two groups",
            "t.yaml:11: partition: 's1' is a bridge; write bridge: s1",
            "t.yaml:12: partition: a group needs at least one service",
            "t.yaml:13: partition: unknown service 'dbb' (did you mean 'db'?)",
        ],
    ),
    (
        "partition until",
        event("{at: 5s, partition: [web, db], until: 5s}", "{at: 5s, partition: [web, db], action: heal, until: 9s}"),
        [
            "t.yaml:9: partition: until (5s) must come after at (5s)",
            "t.yaml:10: partition: until goes with the start of a partition, not with a heal",
        ],
    ),
    (
        "partition state",
        event(
            "{at: 1s, partition: [web, db]}",
            "{at: 2s, partition: [db, web]}",
            "{at: 3s, partition: [[web], [db]], action: heal}",
            "{at: 4s, partition: [web, db], action: heal}",
        ),
        [
            "t.yaml:10: partition: cannot start at 2s: the same partition is already in effect",
            "t.yaml:12: partition: cannot heal at 4s: no partition with these groups is in effect",
        ],
    ),
]


@pytest.mark.parametrize(
    ("text", "expected"), [case[1:] for case in EVENT_CASES], ids=[case[0] for case in EVENT_CASES]
)
def test_event_message(text, expected):
    assert problems(text) == expected
