"""The `workload:` form of a service, what it says about bad input, with the
exact `file:line: message` text: command and workload together, the kind
(node or client), node keys and values, the client's count, rate and duration,
targets, chains and their operations, distributions, forward shapes, and
forwards nested too deep."""

import pytest
from parse_support import problems


def workload_problems(workload: str) -> list[str]:
    return problems(f"services:\n  s: {{workload: {workload}}}\n")


BAD = [
    (
        "both command and workload",
        "services:\n  s: {command: [x], workload: node}\n",
        [
            "t.yaml:2: service s: use either command or workload (the YAML form of a wl-node or "
            "wl-client command), not both"
        ],
    ),
    (
        "scalar",
        "services:\n  s: {workload: server}\n",
        [
            "t.yaml:2: service s: workload: expected node, or a mapping like {node: {threads: 2}} or "
            "{client: {to: web, ...}}, got 'server'"
        ],
    ),
    (
        "unknown kind",
        "services:\n  s:\n    workload:\n      nodes: {}\n",
        ["t.yaml:4: service s: workload: unknown key 'nodes' (did you mean 'node'?)"],
    ),
    (
        "two kinds",
        "services:\n  s: {workload: {node: {}, client: {to: a}}}\n",
        ["t.yaml:2: service s: workload: expected node or client (a service runs one), got both node and client"],
    ),
    (
        "empty mapping",
        "services:\n  s: {workload: {}}\n",
        ["t.yaml:2: service s: workload: expected node or client (a service runs one), got neither"],
    ),
    (
        "node body",
        "services:\n  s: {workload: {node: [1]}}\n",
        ["t.yaml:2: service s: workload: node: expected a mapping of key: value, got a list"],
    ),
    (
        "node key",
        "services:\n  s:\n    workload:\n      node: {treads: 2, port: 70000}\n",
        [
            "t.yaml:4: service s: workload: node: unknown key 'treads' (did you mean 'threads'?)",
            "t.yaml:4: service s: workload: node: port: expected a whole number from 1 to 65535, got '70000'",
        ],
    ),
    (
        "node values",
        "services:\n  s: {workload: {node: {threads: 0, proto: sctp, max-storage: 1 parsec, "
        "sync-period: 0, storage: ''}}}\n",
        [
            "t.yaml:2: service s: workload: node: proto: expected tcp or udp, got 'sctp'",
            "t.yaml:2: service s: workload: node: threads: expected a whole number from 1 to 1024, got '0'",
            "t.yaml:2: service s: workload: node: storage: expected a string, got an empty one",
            "t.yaml:2: service s: workload: node: max-storage: expected a size like 512m, 2GiB or 1GB, "
            "got unknown size unit 'parsec' in '1 parsec'",
            "t.yaml:2: service s: workload: node: sync-period: expected a duration above zero, got '0'",
        ],
    ),
    (
        "client without to or count",
        "services:\n  s:\n    workload:\n      client: {rate: 5/s}\n",
        [
            "t.yaml:4: service s: workload: client: missing 'to'",
            "t.yaml:4: service s: workload: client: needs requests (how many each thread sends) or a "
            "duration with a rate",
        ],
    ),
    (
        "requests and duration",
        "services:\n  s: {workload: {client: {to: a, requests: 5, duration: 1s}}}\n",
        ["t.yaml:2: service s: workload: client: use either requests or duration, not both"],
    ),
    (
        "duration without rate",
        "services:\n  s: {workload: {client: {to: a, duration: 1s}}}\n",
        [
            "t.yaml:2: service s: workload: client: duration needs a rate (a client without one sends "
            "each request when the last reply is in: give requests instead)"
        ],
    ),
    (
        "bare rate",
        "services:\n  s: {workload: {client: {to: a, rate: 200, duration: 1s}}}\n",
        [
            "t.yaml:2: service s: workload: client: rate: expected requests per second or minute above "
            "zero, like 200/s or 30/min, got '200'"
        ],
    ),
    (
        "zero rate",
        "services:\n  s: {workload: {client: {to: a, rate: 0/s, requests: 1}}}\n",
        [
            "t.yaml:2: service s: workload: client: rate: expected requests per second or minute above "
            "zero, like 200/s or 30/min, got '0/s'"
        ],
    ),
    (
        "fractional count",
        "services:\n  s: {workload: {client: {to: a, rate: 1.5/s, duration: 1s}}}\n",
        [
            "t.yaml:2: service s: workload: client: duration: 1.5/s for '1s' is 1.5 requests; "
            "expected a whole number, at least 1"
        ],
    ),
    (
        "bad duration",
        "services:\n  s: {workload: {client: {to: a, rate: 1/s, duration: 10}}}\n",
        [
            "t.yaml:2: service s: workload: client: duration: expected a duration like 10ms, 250us "
            "or 1.5s (a unit is required), got 10"
        ],
    ),
    (
        "bad targets",
        "services:\n  s:\n    workload:\n      client:\n        to: db_1\n"
        "        requests: 1\n        chain: [{forward: ['db:0', 'a:b', 7]}]\n",
        [
            "t.yaml:5: service s: workload: client: to: expected an instance name, optionally with a "
            "port (db, db-2:7000), got 'db_1'",
            "t.yaml:7: service s: workload: client: chain[0]: forward: expected an instance name, "
            "optionally with a port (db, db-2:7000), got 'db:0'",
            "t.yaml:7: service s: workload: client: chain[0]: forward: expected an instance name, "
            "optionally with a port (db, db-2:7000), got 'a:b'",
        ],
    ),
    (
        "client key",
        "services:\n  s: {workload: {client: {to: a, requests: 1, rates: 5/s}}}\n",
        ["t.yaml:2: service s: workload: client: unknown key 'rates' (did you mean 'rate'?)"],
    ),
    (
        "chain not a list",
        "services:\n  s: {workload: {client: {to: a, requests: 1, chain: {compute: 1ms}}}}\n",
        [
            "t.yaml:2: service s: workload: client: chain: expected a list of operations like - "
            "{compute: 1ms}, got a mapping"
        ],
    ),
    (
        "operations",
        "services:\n  s:\n    workload:\n      client:\n        to: a\n        requests: 1\n"
        "        chain:\n          - {compute: 1ms, store: 1k}\n          - {clock: wall}\n"
        "          - compute\n          - {compute: 1ms, clock: gpu, sync: true}\n",
        [
            "t.yaml:8: service s: workload: client: chain[0]: expected one operation (compute, load, store, "
            "forward, skip), got both 'compute' and 'store'",
            "t.yaml:9: service s: workload: client: chain[1]: expected one operation (compute, load, store, "
            "forward, skip), got none",
            "t.yaml:10: service s: workload: client: chain[2]: expected a mapping of key: value, got 'compute'",
            "t.yaml:11: service s: workload: client: chain[3]: compute: unknown key 'sync' (expected one "
            "of: compute, clock)",
            "t.yaml:11: service s: workload: client: chain[3]: compute: clock: expected cpu or wall or "
            "loop, got 'gpu' (did you mean 'cpu'?)",
        ],
    ),
    (
        "operation values",
        "services:\n  s:\n    workload:\n      client:\n        to: a\n"
        "        requests: 1\n        chain:\n          - {compute: 5}\n          - {store: 0, sync: always}\n"
        "          - {skip: 0, probability: 1.5}\n          - {load: -1}\n",
        [
            "t.yaml:8: service s: workload: client: chain[0]: compute: expected a duration like 10ms, "
            "250us or 1.5s (a unit is required), got 5",
            "t.yaml:9: service s: workload: client: chain[1]: store: expected a size above zero, got 0",
            "t.yaml:9: service s: workload: client: chain[1]: store: sync: expected true, false or "
            "periodic, got 'always'",
            "t.yaml:10: service s: workload: client: chain[2]: skip: expected a whole number from 1 to 65535, got '0'",
            "t.yaml:10: service s: workload: client: chain[2]: skip: probability: expected a probability "
            "like 0.3 or 30%, got '1.5'",
            "t.yaml:11: service s: workload: client: chain[3]: load: expected a size above zero, got -1",
        ],
    ),
    (
        "distributions",
        "services:\n  s:\n    workload:\n      client:\n        to: a\n"
        "        requests: 1\n        chain:\n          - compute: {distribution: exponential}\n"
        "          - compute: {distribution: uniform, min: 1ms, max: 2ms, std: 1ms}\n"
        "          - load: {distribution: zipf, mean: 1k}\n          - load: {mean: 1k}\n",
        [
            "t.yaml:8: service s: workload: client: chain[0]: compute: the exponential distribution needs mean",
            "t.yaml:9: service s: workload: client: chain[1]: compute: the uniform distribution takes "
            "min and max, not std",
            "t.yaml:10: service s: workload: client: chain[2]: load: distribution: expected uniform or "
            "exponential or normal or lognormal or gamma, got 'zipf'",
            "t.yaml:11: service s: workload: client: chain[3]: load: missing 'distribution'",
        ],
    ),
    (
        "forward shapes",
        "services:\n  s:\n    workload:\n      client:\n        to: a\n"
        "        requests: 1\n        chain:\n          - forward: {to: [b, c], quorum: 2}\n"
        "          - {forward: [], quorum: 0}\n          - {forward: [b, c], branches: [[]]}\n"
        "          - {forward: b, chain: [], branches: [[]]}\n",
        [
            "t.yaml:8: service s: workload: client: chain[0]: forward: expected the targets as forward's "
            "value (a name or a list of names), with quorum, chain and the rest beside forward, got a mapping",
            "t.yaml:9: service s: workload: client: chain[1]: forward: expected a target name or a list "
            "of them, got an empty list",
            "t.yaml:9: service s: workload: client: chain[1]: forward: quorum: expected a whole number "
            "from 1 to 255, got '0'",
            "t.yaml:10: service s: workload: client: chain[2]: forward: branches: expected a list of 2 "
            "chains, one per target in order, got 1",
            "t.yaml:11: service s: workload: client: chain[3]: forward: use either chain (one for every "
            "target) or branches (one per target), not both",
        ],
    ),
]


@pytest.mark.parametrize("text,expected", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_input(text, expected):
    assert problems(text) == expected


def test_hostile_nesting_is_refused_without_recursing_forever():
    chain = "[{compute: 1ms}]"
    for _ in range(40):
        chain = f"[{{forward: a, chain: {chain}}}]"
    found = workload_problems(f"{{client: {{to: a, requests: 1, chain: {chain}}}}}")
    assert found == ["t.yaml:2: service s: workload: client: chain: forwards nested more than 32 deep"]
