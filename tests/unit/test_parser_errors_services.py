"""The YAML parser's messages about services: and bridges:, with their exact
`file:line: message` text: names and the namespace they share (a bridge named
like a service or like an instance of one), unknown keys, commands (missing,
empty, unsplittable, NUL characters), replicas, env, workdir, cpus, memory and
image, and the cap on instances in all."""

import pytest
from parse_support import problems

CASES = [
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
