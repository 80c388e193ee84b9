"""The YAML parser's messages about events: that act on services, instances
and bridges, with their exact `file:line: message` text: the list and its
items, the target and the time, actions and amounts, and what the timeline
refuses (leaving or crashing with nothing up, reconnecting what is connected,
acting on an instance that is gone or not yet joined, a bridge that is
already up or down).  Events on links and partitions:
test_parser_errors_link_events.py."""

import pytest
from parse_support import BASE, event, problems

# Events start at line 9 of `event(...)` documents.
EVENT_CASES = [
    (
        "events mapping",
        BASE + "events: {at: 1s}\n",
        ["t.yaml:8: events: expected a list of events like - {at: 10s, service: web, action: leave}, got a mapping"],
    ),
    ("event not mapping", event("leave web"), ["t.yaml:9: event: expected a mapping of key: value, got 'leave web'"]),
    (
        "no target",
        event("{at: 1s, action: leave}"),
        ["t.yaml:9: event: needs one of service, instance, bridge, link or partition"],
    ),
    (
        "two targets",
        event("{at: 1s, service: web, link: [s1, s2], action: leave}"),
        ["t.yaml:9: event: names both 'service' and 'link'; write one event for each"],
    ),
    ("missing at", event("{service: web, action: leave}"), ["t.yaml:9: service web: missing 'at'"]),
    (
        "negative at",
        event("{at: -5s, service: web, action: leave}"),
        ["t.yaml:9: service web: at: a time cannot be negative, got '-5s'"],
    ),
    (
        "at unit",
        event("{at: 5, service: web, action: leave}"),
        ["t.yaml:9: service web: at: expected a duration like 10ms, 250us or 1.5s (a unit is required), got 5"],
    ),
    ("missing action", event("{at: 1s, service: web}"), ["t.yaml:9: service web: missing 'action'"]),
    (
        "bad action",
        event("{at: 1s, service: web, action: crsh}"),
        [
            "t.yaml:9: service web: action: expected join or leave or crash or disconnect or "
            "reconnect, got 'crsh' (did you mean 'crash'?)"
        ],
    ),
    (
        "unknown event key",
        event("{at: 1s, service: web, action: leave, amout: 1}"),
        ["t.yaml:9: service web: unknown key 'amout' (did you mean 'amount'?)"],
    ),
    (
        "unknown service",
        event("{at: 1s, service: wbe, action: leave}"),
        ["t.yaml:9: service wbe: unknown service 'wbe' (did you mean 'web'?)"],
    ),
    (
        "service is a bridge",
        event("{at: 1s, service: s1, action: leave}"),
        ["t.yaml:9: service s1: 's1' is a bridge; write bridge: s1"],
    ),
    (
        "bridge is a service",
        event("{at: 1s, bridge: web, action: leave}"),
        ["t.yaml:9: bridge web: 'web' is a service; write service: web"],
    ),
    (
        "amount",
        event("{at: 1s, service: web, action: join, amount: 0}"),
        ["t.yaml:9: service web: amount: expected a whole number from 1 to 10000, got '0'"],
    ),
    (
        "amount on instance",
        event("{at: 1s, service: db-2, action: leave, amount: 1}"),
        ["t.yaml:9: service db-2: amount does not apply to one instance; write service: db to pick 1 of them"],
    ),
    (
        "join an instance",
        event("{at: 1s, instance: db-2, action: join}"),
        ["t.yaml:9: instance db-2: join creates new instances with the next free names; write service: db"],
    ),
    (
        "not an instance",
        event("{at: 1s, instance: s1, action: leave}"),
        ["t.yaml:9: instance s1: 's1' is not an instance of a service (instances are named web, web-2, web-3, ...)"],
    ),
    (
        "instances of two services",
        event("{at: 1s, instance: [web, db-2], action: leave}"),
        ["t.yaml:9: instance: names instances of two services; one event acts on distinct instances of one service"],
    ),
    (
        "leave nothing up",
        event("{at: 1s, service: web, action: leave}", "{at: 2s, service: web, action: crash}"),
        ["t.yaml:10: service web: cannot crash at 2s: no instance of web is up"],
    ),
    (
        "leave too many",
        event("{at: 1s, service: db, action: leave, amount: 3}"),
        ["t.yaml:9: service db: cannot leave 3 instances at 1s: only 2 are up"],
    ),
    (
        "reconnect connected",
        event("{at: 1s, service: db, action: reconnect}", "{at: 2s, instance: db-2, action: reconnect}"),
        [
            "t.yaml:9: service db: cannot reconnect at 1s: no instance of db is disconnected",
            "t.yaml:10: instance db-2: cannot reconnect at 2s: db-2 is not disconnected",
        ],
    ),
    (
        "disconnect twice",
        event(
            "{at: 1s, service: web, action: disconnect}",
            "{at: 2s, service: web, action: disconnect}",
            "{at: 3s, instance: web, action: disconnect}",
        ),
        [
            "t.yaml:10: service web: cannot disconnect at 2s: no instance of web is connected and up",
            "t.yaml:11: instance web: cannot disconnect at 3s: web is already disconnected",
        ],
    ),
    (
        "gone instance",
        event(
            "{at: 1s, service: db-2, action: crash}",
            "{at: 2s, service: db-2, action: reconnect}",
            "{at: 3s, service: db-3, action: leave}",
        ),
        [
            "t.yaml:10: service db-2: cannot reconnect at 2s: db-2 is gone (it left or crashed before)",
            "t.yaml:11: service db-3: cannot leave at 3s: db-3 has not joined yet",
        ],
    ),
    (
        "order is by time",
        event("{at: 2s, service: web, action: leave}", "{at: 1s, service: web, action: leave}"),
        ["t.yaml:9: service web: cannot leave at 2s: no instance of web is up"],
    ),
    (
        "bridge twice",
        event(
            "{at: 1s, bridge: s2, action: leave}",
            "{at: 2s, bridge: s2, action: leave}",
            "{at: 3s, bridge: s1, action: join}",
        ),
        [
            "t.yaml:10: bridge s2: cannot leave at 2s: it already left at 1s",
            "t.yaml:11: bridge s1: cannot join at 3s: it is already up",
        ],
    ),
    (
        "bridge action",
        event("{at: 1s, bridge: s2, action: crash}"),
        ["t.yaml:9: bridge s2: action: expected join or leave, got 'crash'"],
    ),
]


@pytest.mark.parametrize(
    ("text", "expected"), [case[1:] for case in EVENT_CASES], ids=[case[0] for case in EVENT_CASES]
)
def test_event_message(text, expected):
    assert problems(text) == expected
