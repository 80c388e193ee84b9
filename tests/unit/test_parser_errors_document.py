"""The YAML parser's messages about the file as a whole and its experiment:
section, with their exact `file:line: message` text: empty files, YAML syntax,
tabs and NUL characters, a root that is not a mapping, several documents,
tags, duplicate and complex keys, unknown top-level keys, bad merges, and the
experiment's settings (name, period, paths, seed, wire-overhead).  Also how
problems are reported: all of them, in file order, a broken definition once,
and long messages cut."""

import pytest
from parse_support import BASE, problems

CASES = [
    # ---- the file as a whole
    (
        "empty",
        "",
        ["t.yaml:1: the file is empty; expected a mapping with experiment, services, bridges, links and events"],
    ),
    (
        "syntax",
        "services:\n  web: [x\n",
        [
            "t.yaml:3: YAML syntax: expected ',' or ']', but got '<stream end>' (while parsing a "
            "flow sequence started at line 2)"
        ],
    ),
    (
        "tab",
        "services:\n\tweb: {}\n",
        ["t.yaml:2: YAML syntax: while scanning for the next token: found character '\\t' that cannot start any token"],
    ),
    ("nul", "services: \x00\n", ["t.yaml:1: character '\\x00' is not allowed in YAML text"]),
    (
        "list root",
        "- a\n- b\n",
        ["t.yaml:1: expected a mapping with experiment, services, bridges, links and events at the top, got a list"],
    ),
    (
        "scalar root",
        "hello\n",
        ["t.yaml:1: expected a mapping with experiment, services, bridges, links and events at the top, got 'hello'"],
    ),
    (
        "two documents",
        "a: 1\n---\nb: 2\n",
        ["t.yaml:2: YAML syntax: expected a single document in the stream, but found another document"],
    ),
    (
        "python tag",
        BASE + "events: !!python/object:os.system {}\n",
        [
            "t.yaml:8: unsupported YAML tag '!!python/object:os.system'; only plain mappings, "
            "lists, strings and numbers are read",
            "t.yaml:8: events: expected a list of events like - {at: 10s, service: web, action: leave}, got a mapping",
        ],
    ),
    (
        "custom tag",
        BASE.replace("[x]", "!cmd [x]"),
        ["t.yaml:2: unsupported YAML tag '!cmd'; only plain mappings, lists, strings and numbers are read"],
    ),
    (
        "bad explicit scalars",
        BASE.replace("replicas: 2", "replicas: !!int two") + "x-a: [!!bool maybe, !!float x]\n",
        ["t.yaml:3: service db: replicas: expected a whole number from 0 to 10000, got 'two'"],
    ),
    ("duplicate key", BASE + "bridges: [s3]\n", ["t.yaml:8: duplicate key 'bridges' (first at line 4)"]),
    ("complex key", BASE + "[a]: 1\n", ["t.yaml:8: a mapping key must be a plain name, not a list or mapping"]),
    ("top key", BASE + "evnets: []\n", ["t.yaml:8: top level: unknown key 'evnets' (did you mean 'events'?)"]),
    (
        "bad merge",
        BASE + "x: {<<: 5}\n",
        [
            "t.yaml:8: '<<' merges mappings only (write <<: *name)",
            "t.yaml:8: top level: unknown key 'x' (expected one of: experiment, services, bridges, links, events)",
        ],
    ),
    # ---- experiment:
    (
        "experiment not mapping",
        "experiment: demo\n" + BASE,
        ["t.yaml:1: experiment: expected a mapping of key: value, got 'demo'"],
    ),
    (
        "settings",
        "experiment: {name: -x, period: 0.5ms, paths: hop, seed: -1, wire-overhead: 1, sed: 4,\n"
        "  congestion-control: Cubic}\n" + BASE,
        [
            "t.yaml:1: experiment: unknown key 'sed' (did you mean 'seed'?)",
            "t.yaml:1: experiment: name: '-x' is not a valid name: use letters, digits and '-', "
            "not starting or ending with '-', at most 63 characters",
            "t.yaml:1: experiment: period: expected at least 1ms (default 50ms), got '0.5ms'",
            "t.yaml:1: experiment: paths: expected latency or hops, got 'hop' (did you mean 'hops'?)",
            "t.yaml:1: experiment: seed: expected a whole number from 0 to 9223372036854775807, got '-1'",
            "t.yaml:1: experiment: wire-overhead: expected true or false, got '1'",
            "t.yaml:2: experiment: congestion-control: expected reno or cubic or bbr, got 'Cubic' "
            "(did you mean 'cubic'?)",
        ],
    ),
    (
        "period unit",
        "experiment: {period: 50}\n" + BASE,
        ["t.yaml:1: experiment: period: expected a duration like 10ms, 250us or 1.5s (a unit is required), got 50"],
    ),
]


@pytest.mark.parametrize(("text", "expected"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_message(text, expected):
    assert problems(text) == expected


def test_problems_are_in_file_order_and_all_reported():
    text = (
        "experiment: {sed: 1}\nservices:\n  web: {comand: [x]}\n"
        "bridges: [s1]\nlinks:\n  - {from: web, to: s1, latency: 1 parsec}\n"
    )
    assert [line.split(": ")[0] for line in problems(text)] == ["t.yaml:1", "t.yaml:3", "t.yaml:3", "t.yaml:6"]


def test_a_broken_definition_is_not_reported_again_at_each_use():
    text = "services:\n  web_1: {command: [x]}\nbridges: [s1]\nlinks:\n  - {from: web_1, to: s1}\n"
    assert problems(text) == [
        "t.yaml:2: service 'web_1': not a valid name: use letters, digits and '-', not "
        "starting or ending with '-', at most 63 characters"
    ]


def test_long_messages_are_cut():
    text = BASE.replace("latency: 10ms", "latency: " + "x" * 1000)
    (message,) = problems(text)
    assert len(message) == len("t.yaml:6: ") + 300 and message.endswith("...")
