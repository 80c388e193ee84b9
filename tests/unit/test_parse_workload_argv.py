"""The `workload:` form of a service, what it compiles to: the wl-node and
wl-client argv, key by key (node settings, client keys, each operation of a
chain, forwards and their branches), values spelled as wl-client reads them,
and a compiled service equal to the one its argv would write, through the
printed YAML and back.  Its messages on bad input:
test_parse_workload_errors.py."""

import pytest
from model_compare import without_where
from parse_support import parse

from collapsar.errors import Where
from collapsar.model import CommandOrigin, Service
from collapsar.wl_values import wl_bytes, wl_time
from collapsar.yamlout import to_yaml


def argv(workload: str) -> tuple[str, ...]:
    """The command of service `s` whose `workload:` value is `workload` (flow YAML)."""
    return parse(f"services:\n  s: {{workload: {workload}}}\n").services[0].command


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
