"""The `workload:` form of a service: the argv it compiles to, key by key, and
every message it gives on bad input, with its exact `file:line: message`."""

import textwrap

import pytest
from model_compare import without_where

from collapsar.errors import TopologyError, Where
from collapsar.model import CommandOrigin, Service
from collapsar.parser import parse_text
from collapsar.wl_values import wl_bytes, wl_time
from collapsar.yamlout import to_yaml


def parse(text: str):
    return parse_text(textwrap.dedent(text), "t.yaml")


def argv(workload: str) -> tuple[str, ...]:
    """The command of service `s` whose `workload:` value is `workload` (flow YAML)."""
    return parse(f"services:\n  s: {{workload: {workload}}}\n").services[0].command


def problems(text: str) -> list[str]:
    with pytest.raises(TopologyError) as error:
        parse(text)
    return error.value.lines()


def workload_problems(workload: str) -> list[str]:
    return problems(f"services:\n  s: {{workload: {workload}}}\n")


# ---- what it compiles to ----------------------------------------------------

NODE_CASES = [
    ("node", ("wl-node",)),
    ("{node: }", ("wl-node",)),
    ("{node: {threads: 2}}", ("wl-node", "--nt", "2")),
    ("{node: {port: 7000}}", ("wl-node", "-b", "0.0.0.0:7000")),
    ("{node: {proto: udp}}", ("wl-node", "-b", "udp://0.0.0.0:7891")),
    (
        "{node: {storage: /tmp/db.bin, max-storage: 64MiB, sync-period: 50ms, trace: /tmp/n.jsonl}}",
        ("wl-node", "-s", "/tmp/db.bin", "-m", "64m", "--sync", "50ms", "--trace", "/tmp/n.jsonl"),
    ),
]


@pytest.mark.parametrize("workload,expected", NODE_CASES, ids=[c[0] for c in NODE_CASES])
def test_node(workload, expected):
    assert argv(workload) == expected


def test_the_example_of_the_docs():
    experiment = parse("""\
        services:
          front: {workload: {node: {threads: 2}}, replicas: 3}
          db: {workload: node, replicas: 3}
          users:
            workload:
              client:
                to: front
                rate: 200/s
                duration: 30s
                chain:
                  - compute: 1ms
                  - forward: [db, db-2, db-3]
                    quorum: 2
                    chain: [{store: 4KiB, sync: true}]
                  - compute: 500us
        """)
    assert experiment.services[2].command == (
        "wl-client",
        "--to",
        "front",
        "-r",
        "200",
        "-n",
        "6000",
        "-C",
        "1ms",
        "-F",
        "db,db-2,db-3,nack=2",
        "-S",
        "4k,sync",
        "--fwd-end",
        "-C",
        "500us",
    )
    assert experiment.services[2].command_origin == CommandOrigin("workload", Where("t.yaml", 5))
    assert experiment.services[0].command_origin == CommandOrigin("workload", Where("t.yaml", 2))


CLIENT_CASES = [
    ("{to: front, requests: 10}", ("--to", "front", "-n", "10")),
    ("{to: 'front-2:7000', requests: 1, proto: udp}", ("--to", "udp://front-2:7000", "-n", "1")),
    ("{to: a, rate: 30/min, duration: 10s}", ("--to", "a", "-r", "0.5", "-n", "5")),
    (
        "{to: a, rate: 2.5/s, duration: 2s, threads: 4, sessions: 5}",
        ("--to", "a", "--nt", "4", "-r", "2.5", "-n", "5", "--ns", "5"),
    ),
    (
        "{to: a, requests: 3, seed: 9, timeout: 2s, request-size: 1KiB, reply-size: 1000, json: true, "
        "output: /tmp/r.csv, trace: /tmp/c.jsonl}",
        (
            "--to",
            "a",
            "-n",
            "3",
            "--seed",
            "9",
            "--timeout",
            "2s",
            "--ps",
            "1k",
            "--rs",
            "1000",
            "--json",
            "-o",
            "/tmp/r.csv",
            "--trace",
            "/tmp/c.jsonl",
        ),
    ),
    ("{to: a, requests: 1, json: false}", ("--to", "a", "-n", "1")),
]


@pytest.mark.parametrize("client,expected", CLIENT_CASES, ids=[c[0][:40] for c in CLIENT_CASES])
def test_client_keys(client, expected):
    assert argv(f"{{client: {client}}}") == ("wl-client", *expected)


OP_CASES = [
    ("{compute: 0}", ("-C", "0")),
    ("{compute: 1500us, clock: wall}", ("-C", "1500us,wall")),
    ("{compute: 2m, clock: loop}", ("-C", "120s,loop")),  # wl reads `m` as mega: never written
    ("{compute: 5ms, clock: cpu}", ("-C", "5ms")),
    ("{compute: {distribution: exponential, mean: 1ms}}", ("-C", "exp:avg=1ms")),
    ("{compute: {distribution: uniform, min: 1ms, max: 10ms}}", ("-C", "unif:min=1ms,max=10ms")),
    (
        "{compute: {distribution: normal, mean: 2ms, std: 500us, min: 0}, clock: wall}",
        ("-C", "norm:avg=2ms,std=500us,min=0,wall"),
    ),
    ("{load: 64KiB}", ("-L", "64k")),
    ("{load: {distribution: lognormal, mean: 4KiB, std: 1KiB}}", ("-L", "lognorm:avg=4k,std=1k")),
    ("{store: 1GB, sync: false}", ("-S", "1000000000")),
    ("{store: 2m, sync: periodic}", ("-S", "2m,psync")),
    ("{skip: 2}", ("--skip", "2")),
    ("{skip: 1, probability: 30%}", ("--skip", "1,prob=0.3")),
    (
        "{forward: db, timeout: 1s, retries: 2, request-size: 512, reply-size: 8KiB}",
        ("-F", "db,timeout=1s,retry=2,ps=512,rs=8k"),
    ),
]


@pytest.mark.parametrize("op,expected", OP_CASES, ids=[c[0][:40] for c in OP_CASES])
def test_each_operation(op, expected):
    assert argv(f"{{client: {{to: a, requests: 1, chain: [{op}]}}}}")[5:] == expected


def test_forwards_close_only_when_more_operations_follow():
    chain = (
        "[{forward: [a, b], chain: [{forward: c, chain: [{compute: 1ms}]}, {load: 1k}]}, "
        "{compute: 2ms}, {forward: d, chain: [{store: 1k}]}]"
    )
    assert argv(f"{{client: {{to: x, requests: 1, chain: {chain}}}}}")[5:] == (
        "-F",
        "a,b",
        "-F",
        "c",
        "-C",
        "1ms",
        "--fwd-end",
        "-L",
        "1k",
        "--fwd-end",
        "-C",
        "2ms",
        "-F",
        "d",
        "-S",
        "1k",
    )


def test_branches_give_each_target_its_own_chain():
    chain = (
        "[{forward: [a, b], quorum: 1, branches: [[{compute: 1ms}, {forward: c}], "
        "[{store: 4k, sync: true}]]}, {compute: 1ms}]"
    )
    assert argv(f"{{client: {{to: x, requests: 1, chain: {chain}}}}}")[5:] == (
        "-F",
        "a,b,nack=1,branch",
        "-C",
        "1ms",
        "-F",
        "c",
        "--fwd-end",
        "--next-branch",
        "-S",
        "4k,sync",
        "--fwd-end",
        "-C",
        "1ms",
    )


def test_values_are_spelled_as_wl_client_reads_them():
    assert [wl_time(us) for us in (0, 1, 999, 1000, 1500, 1_000_000, 120_000_000)] == [
        "0",
        "1us",
        "999us",
        "1ms",
        "1500us",
        "1s",
        "120s",
    ]
    assert [wl_bytes(b) for b in (1, 1000, 1024, 1536, 2**20, 3 * 2**30)] == ["1", "1000", "1k", "1536", "1m", "3g"]


def test_a_compiled_service_is_the_service_its_argv_would_write():
    compiled = parse("services:\n  s: {workload: {client: {to: a, requests: 2}}}\n").services[0]
    written = parse("services:\n  s: {command: [wl-client, --to, a, -n, '2']}\n").services[0]
    assert compiled == written
    assert written.command_origin == CommandOrigin("command", Where("t.yaml", 2))


def test_the_printed_yaml_writes_the_argv_and_parses_back_the_same():
    experiment = parse("""\
        services:
          db: {workload: {node: {threads: 2}}, replicas: 2}
          c: {workload: {client: {to: db, rate: 10/s, duration: 1s, chain: [{forward: [db, db-2]}]}}}
        """)
    printed = to_yaml(experiment)
    assert '    command: [wl-client, "--to", db, -r, "10", -n, "10", -F, "db,db-2"]\n' in printed
    assert without_where(parse(printed)) == without_where(experiment)


def test_a_service_with_an_image_may_use_the_form():
    service = parse("services:\n  s: {workload: node, image: 'collapsar/node:0.1.0'}\n").services[0]
    assert service == Service("s", ("wl-node",), image="collapsar/node:0.1.0", where=Where("t.yaml", 2))


# ---- what it says about bad input --------------------------------------------

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
