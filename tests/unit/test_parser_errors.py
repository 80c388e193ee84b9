"""Every message of the YAML parser, with its exact `file:line: message` text.

Each case is a small document; most extend BASE, a valid experiment of seven
lines, so the line numbers in the expected messages are easy to check.
"""

import textwrap

import pytest

from collapsar.errors import TopologyError
from collapsar.parser import parse_text

BASE = """\
services:
  web: {command: [x]}
  db: {command: [y], replicas: 2}
bridges: [s1, s2]
links:
  - {from: web, to: s1, latency: 10ms}
  - {from: db, to: s1, latency: 1ms}
"""


def problems(text: str) -> list[str]:
    with pytest.raises(TopologyError) as error:
        parse_text(textwrap.dedent(text), "t.yaml")
    return error.value.lines()


def event(*lines: str) -> str:
    return BASE + "events:\n" + "".join(f"  - {line}\n" for line in lines)


def link(*lines: str) -> str:
    return BASE + "".join(f"  - {line}\n" for line in lines)


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
        "experiment: {name: -x, period: 0.5ms, paths: hop, seed: -1, wire-overhead: 1, sed: 4}\n" + BASE,
        [
            "t.yaml:1: experiment: unknown key 'sed' (did you mean 'seed'?)",
            "t.yaml:1: experiment: name: '-x' is not a valid name: use letters, digits and '-', "
            "not starting or ending with '-', at most 63 characters",
            "t.yaml:1: experiment: period: expected at least 1ms (default 50ms), got '0.5ms'",
            "t.yaml:1: experiment: paths: expected latency or hops, got 'hop' (did you mean 'hops'?)",
            "t.yaml:1: experiment: seed: expected a whole number from 0 to 9223372036854775807, got '-1'",
            "t.yaml:1: experiment: wire-overhead: expected true or false, got '1'",
        ],
    ),
    (
        "period unit",
        "experiment: {period: 50}\n" + BASE,
        ["t.yaml:1: experiment: period: expected a duration like 10ms, 250us or 1.5s (a unit is required), got 50"],
    ),
    # ---- services:
    ("no services", "bridges: [s1]\n", ["t.yaml:1: services: an experiment needs at least one service"]),
    ("services list", "services: [web]\n", ["t.yaml:1: services: expected a mapping of key: value, got a list"]),
    (
        "service name",
        "services:\n  web_1: {command: [x]}\n  -web: {command: [x]}\n",
        [
            "t.yaml:2: service 'web_1': not a valid name: use letters, digits and '-', not "
            "starting or ending with '-', at most 63 characters",
            "t.yaml:3: service '-web': not a valid name: use letters, digits and '-', not "
            "starting or ending with '-', at most 63 characters",
        ],
    ),
    (
        "long name",
        f"services:\n  {'a' * 64}: {{command: [x]}}\n",
        [
            f"t.yaml:2: service '{'a' * 64}': not a valid name: use letters, digits and '-', not "
            "starting or ending with '-', at most 63 characters"
        ],
    ),
    (
        "unknown service key",
        "services:\n  web:\n    comand: [x]\n    image: nginx\n",
        ["t.yaml:3: service web: unknown key 'comand' (did you mean 'command'?)"],
    ),
    (
        "no command",
        "services:\n  web:\n  db: {replicas: 2}\n",
        [
            "t.yaml:2: service web: needs a command (or an image for the Docker modes)",
            "t.yaml:3: service db: needs a command (or an image for the Docker modes)",
        ],
    ),
    (
        "service body",
        "services:\n  web: nginx\n",
        ["t.yaml:2: service web: expected a mapping of key: value, got 'nginx'"],
    ),
    (
        "command items",
        "services:\n  web: {command: [ls, [a], {b: c}]}\n",
        [
            "t.yaml:2: service web: command[1]: expected a string, got a list",
            "t.yaml:2: service web: command[2]: expected a string, got a mapping",
        ],
    ),
    (
        "command null item",
        "services:\n  web: {command: [ls, null]}\n",
        ["t.yaml:2: service web: command[1]: expected a string, got nothing"],
    ),
    (
        "command empty",
        "services:\n  web: {command: []}\n",
        ["t.yaml:2: service web: command: expected at least one word, got an empty list"],
    ),
    (
        "command quote",
        'services:\n  web: {command: "sh -c \'echo"}\n',
        [
            't.yaml:2: service web: command: cannot split "sh -c \'echo" into words: no closing '
            "quotation; write it as a list"
        ],
    ),
    (
        "replicas",
        "services:\n  web: {command: [x], replicas: -1}\n  db: {command: [x], "
        "replicas: 10001}\n  c: {command: [x], replicas: two}\n",
        [
            "t.yaml:2: service web: replicas: expected a whole number from 0 to 10000, got '-1'",
            "t.yaml:3: service db: replicas: expected a whole number from 0 to 10000, got '10001'",
            "t.yaml:4: service c: replicas: expected a whole number from 0 to 10000, got 'two'",
        ],
    ),
    (
        "replicas huge",
        "services:\n  web: {command: [x], replicas: " + "9" * 5000 + "}\n",
        [
            "t.yaml:2: service web: replicas: expected a whole number from 0 to 10000, got "
            "'9999999999999999999999999999999999999...'"
        ],
    ),
    (
        "env",
        "services:\n  web:\n    command: [x]\n    env: {1X: a, OK: [b]}\n",
        [
            "t.yaml:4: service web: env: '1X' is not a valid variable name (letters, digits and "
            "'_', not starting with a digit)",
            "t.yaml:4: service web: env: OK: expected a string, got a list",
        ],
    ),
    (
        "env list",
        "services:\n  web: {command: [x], env: [A=1]}\n",
        ["t.yaml:2: service web: env: expected a mapping of key: value, got a list"],
    ),
    (
        "workdir cpus memory",
        "services:\n  web: {command: [x], workdir: tmp, cpus: 0, memory: 12 parsecs}\n",
        [
            "t.yaml:2: service web: workdir: expected an absolute path like /tmp, got 'tmp'",
            "t.yaml:2: service web: cpus: expected a number of CPUs above 0 like 0.5 or 2, got '0'",
            "t.yaml:2: service web: memory: expected a size like 512m, 2GiB or 1GB, got unknown "
            "size unit 'parsecs' in '12 parsecs'",
        ],
    ),
    (
        "cpus nan",
        "services:\n  web: {command: [x], cpus: .nan}\n",
        ["t.yaml:2: service web: cpus: expected a number of CPUs above 0 like 0.5 or 2, got '.nan'"],
    ),
    (
        "image empty",
        "services:\n  web: {image: ''}\n",
        ["t.yaml:2: service web: image: expected a string, got an empty one"],
    ),
    # ---- bridges: and the namespace
    (
        "bridges mapping",
        "services:\n  web: {command: [x]}\nbridges: {s1: {}}\n",
        ["t.yaml:3: bridges: expected a list of names like [s1, s2], got a mapping"],
    ),
    (
        "bridge twice",
        "services:\n  web: {command: [x]}\nbridges: [s1, s1]\n",
        ["t.yaml:3: bridge s1: defined twice (first at line 3)"],
    ),
    (
        "bridge as service",
        "services:\n  web: {command: [x]}\nbridges: [web]\n",
        ["t.yaml:3: bridge web: name already used by the service at line 2"],
    ),
    (
        "bridge name",
        "services:\n  web: {command: [x]}\nbridges: [s_1, 5]\n",
        [
            "t.yaml:3: bridges: 's_1' is not a valid name: use letters, digits and '-', not "
            "starting or ending with '-', at most 63 characters"
        ],
    ),
    (
        "instance clash",
        "services:\n  web: {command: [x]}\n  web-2: {command: [x]}\nbridges: [web-3, web-03]\n",
        [
            "t.yaml:3: service web-2: name collides with instance 2 of service 'web' (instances "
            "are named web, web-2, web-3, ...)",
            "t.yaml:4: bridge web-3: name collides with instance 3 of service 'web' (instances "
            "are named web, web-2, web-3, ...)",
        ],
    ),
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
    (
        "NUL in a command, env and workdir",
        'services:\n  web: {command: ["a\\0b"], env: {X: "1\\0"}, workdir: "/t\\0"}\nbridges: [s]\n'
        "links: [{from: web, to: s}]\n",
        [
            "t.yaml:2: service web: command[0]: a NUL character (\\0) is not allowed, got 'a\\x00b'",
            "t.yaml:2: service web: workdir: a NUL character (\\0) is not allowed, got '/t\\x00'",
            "t.yaml:2: service web: env: X: a NUL character (\\0) is not allowed, got '1\\x00'",
        ],
    ),
    (
        "NUL in a command line",
        'services:\n  web: {command: "run \\0me"}\nbridges: [s]\nlinks: [{from: web, to: s}]\n',
        ["t.yaml:2: service web: command: a NUL character (\\0) is not allowed, got 'run \\x00me'"],
    ),
    (
        "too many instances in all",
        "services:\n  a: {command: [x], replicas: 6000}\n  b: {command: [x], replicas: 3000}\nbridges: [s]\n"
        "links: [{from: a, to: s}, {from: b, to: s}]\n"
        "events: [{at: 1s, service: b, action: join, amount: 1001}, {at: 2s, service: b, action: join, amount: 1}]\n",
        [
            "t.yaml:1: services: 10002 instances in all (9000 at the start, 1002 joining later), more than the "
            "10000 an experiment may have"
        ],
    ),
]


@pytest.mark.parametrize(("text", "expected"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_message(text, expected):
    assert problems(text) == expected


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
        [
            "t.yaml:9: link web -> s1: set: unknown key 'latncy' (did you mean 'latency'?)",
            "t.yaml:9: link web -> s1: set: expected at least one of latency, jitter, "
            "distribution, loss, bandwidth, up, down",
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
