"""The YAML form of a workload service, compiled into a wl-node or wl-client argv.

A service may say what it runs as `workload:` instead of `command:`:

    db:    {workload: {node: {threads: 2}}, replicas: 3}
    users: {workload: {client: {to: front, rate: 200/s, duration: 30s,
                                chain: [{compute: 1ms}, {forward: [db, db-2], quorum: 1}]}}}

`compile_workload` checks the shape, every key and every unit here, with
file:line, and returns the argv the form stands for (`wl-client --to front
-r 200 -n 6000 -C 1ms -F db,db-2,nack=1`), which becomes the service's
`command`.  What an argv means is not decided here: `collapsar validate`
hands it to the binaries' own parser (collapsar.chaincheck) exactly like a
command written by hand, so chains have one grammar, and target names are
checked there against every instance of the experiment.  Each key maps to
one option of wl-node or wl-client (workload-node/README.md);
docs/language.md is the reference for the form.
"""

from __future__ import annotations

from fractions import Fraction

from collapsar import parse_common as pc
from collapsar import wl_values as wv
from collapsar.parse_common import Report
from collapsar.units import parse_duration_us
from collapsar.yamlsrc import Node

KINDS = ("node", "client")
NODE_KEYS = ("threads", "port", "proto", "storage", "max-storage", "sync-period", "trace")
CLIENT_KEYS = (
    "to",
    "proto",
    "rate",
    "requests",
    "duration",
    "threads",
    "sessions",
    "seed",
    "timeout",
    "request-size",
    "reply-size",
    "json",
    "output",
    "trace",
    "chain",
)
# An operation is a mapping with one of these keys (its amount or targets)
# and that operation's modifiers.
OPERATIONS = {
    "compute": ("clock",),
    "load": (),
    "store": ("sync",),
    "forward": ("quorum", "timeout", "retries", "request-size", "reply-size", "chain", "branches"),
    "skip": ("probability",),
}
CLOCKS = ("cpu", "wall", "loop")
WL_DEFAULT_PORT = 7891
# Python's own guard against a hostile file; wl-client allows 8 levels of forward.
MAX_NESTING = 32


def compile_workload(report: Report, node: Node, label: str) -> tuple[str, ...] | None:
    """The argv of a `workload:` value, or None after reporting what is wrong."""
    if node.is_scalar and node.value in KINDS:  # `workload: node`, a node with every default
        node = Node({node.value: Node(None, node.line)}, node.line, key_lines={node.value: node.line})
    if not node.is_mapping:
        report.add(
            node.line,
            f"{label}: expected node, or a mapping like {{node: {{threads: 2}}}} "
            f"or {{client: {{to: web, ...}}}}, got {pc.describe(node)}",
        )
        return None
    kinds = [kind for kind in KINDS if kind in node.value]
    before = len(report.problems)
    pc.check_keys(report, node, KINDS, label)
    if len(kinds) != 1:
        if kinds or len(report.problems) == before:  # else the unknown key said it
            which = "both node and client" if kinds else "neither"
            report.add(node.line, f"{label}: expected node or client (a service runs one), got {which}")
        return None
    kind = kinds[0]
    body = node.value[kind]
    if body.is_scalar and body.value is None:
        body = Node({}, body.line)
    if pc.mapping(report, body, f"{label}: {kind}") is None:
        return None
    read = _node if kind == "node" else _client
    argv = read(report, body, f"{label}: {kind}")
    return tuple(argv) if len(report.problems) == before else None


# ---- wl-node ----------------------------------------------------------------


def _node(report: Report, body: Node, label: str) -> list[str]:
    pc.check_keys(report, body, NODE_KEYS, label)
    fields = body.value
    argv = ["wl-node"]
    if "port" in fields or "proto" in fields:
        port = _port(report, fields["port"], f"{label}: port") if "port" in fields else WL_DEFAULT_PORT
        udp = "proto" in fields and _proto(report, fields["proto"], f"{label}: proto") == "udp"
        argv += ["-b", f"{'udp://' if udp else ''}0.0.0.0:{port}"]
    if "threads" in fields:
        argv += ["--nt", wv.count(report, fields["threads"], f"{label}: threads", 1, 1024)]
    if "storage" in fields:
        argv += ["-s", wv.text(report, fields["storage"], f"{label}: storage")]
    if "max-storage" in fields:
        argv += ["-m", wv.size(report, fields["max-storage"], f"{label}: max-storage")]
    if "sync-period" in fields:
        argv += ["--sync", wv.duration(report, fields["sync-period"], f"{label}: sync-period")]
    if "trace" in fields:
        argv += ["--trace", wv.text(report, fields["trace"], f"{label}: trace")]
    return argv


# ---- wl-client --------------------------------------------------------------


def _client(report: Report, body: Node, label: str) -> list[str]:
    pc.check_keys(report, body, CLIENT_KEYS, label)
    fields = body.value
    to_node = pc.required(report, body, "to", label)
    target = wv.target(report, to_node, f"{label}: to") if to_node else "?"
    if "proto" in fields and _proto(report, fields["proto"], f"{label}: proto") == "udp":
        target = f"udp://{target}"
    argv = ["wl-client", "--to", target]
    if "threads" in fields:
        argv += ["--nt", wv.count(report, fields["threads"], f"{label}: threads", 1, 1024)]
    rate = wv.rate(report, fields["rate"], f"{label}: rate") if "rate" in fields else None
    if rate is not None:
        argv += ["-r", wv.decimal(rate)]
    argv += _how_many(report, body, rate, label)
    if "sessions" in fields:
        argv += ["--ns", wv.count(report, fields["sessions"], f"{label}: sessions", 1, 2**40)]
    if "seed" in fields:
        argv += ["--seed", wv.count(report, fields["seed"], f"{label}: seed", 0, 2**64 - 1)]
    if "timeout" in fields:
        argv += ["--timeout", wv.duration(report, fields["timeout"], f"{label}: timeout")]
    for key, option in (("request-size", "--ps"), ("reply-size", "--rs")):
        if key in fields:
            argv += [option, wv.size(report, fields[key], f"{label}: {key}")]
    if "json" in fields and pc.boolean(report, fields["json"], f"{label}: json"):
        argv.append("--json")
    for key, option in (("output", "-o"), ("trace", "--trace")):
        if key in fields:
            argv += [option, wv.text(report, fields[key], f"{label}: {key}")]
    if "chain" in fields:
        ops = _chain(report, fields["chain"], f"{label}: chain", 0)
        while ops and ops[-1] == "--fwd-end":  # closing the outermost forwards changes nothing
            ops.pop()
        argv += ops
    return argv


def _how_many(report: Report, body: Node, rate: Fraction | None, label: str) -> list[str]:
    """`requests`, or `duration` at the `rate`: wl-client counts requests (-n)."""
    fields = body.value
    if "requests" in fields and "duration" in fields:
        report.add(fields["duration"].line, f"{label}: use either requests or duration, not both")
        return []
    if "requests" in fields:
        return ["-n", wv.count(report, fields["requests"], f"{label}: requests", 1, 2**40 - 1)]
    if "duration" not in fields:
        report.add(body.line, f"{label}: needs requests (how many each thread sends) or a duration with a rate")
        return []
    node = fields["duration"]
    duration_us = pc.unit(report, node, f"{label}: duration", parse_duration_us)
    if duration_us is None:
        return []
    if "rate" not in fields:
        report.add(
            node.line,
            f"{label}: duration needs a rate (a client without one sends each "
            "request when the last reply is in: give requests instead)",
        )
        return []
    if rate is None:
        return []
    count = rate * duration_us / 1_000_000
    if count.denominator != 1 or count < 1:
        report.add(
            node.line,
            f"{label}: duration: {wv.decimal(rate)}/s for {pc.describe(node)} is "
            f"{float(count):g} requests; expected a whole number, at least 1",
        )
        return []
    return ["-n", str(count.numerator)]


def _chain(report: Report, node: Node, label: str, depth: int) -> list[str]:
    if depth > MAX_NESTING:
        # Named from the client's own chain: the full label would be as deep as the file.
        report.add(node.line, f"{label.split('[', 1)[0]}: forwards nested more than {MAX_NESTING} deep")
        return []
    if not node.is_list:
        report.add(
            node.line, f"{label}: expected a list of operations like - {{compute: 1ms}}, got {pc.describe(node)}"
        )
        return []
    words: list[str] = []
    for index, item in enumerate(node.value):
        words += _operation(report, item, f"{label}[{index}]", depth)
    return words


def _operation(report: Report, item: Node, label: str, depth: int) -> list[str]:
    if pc.mapping(report, item, label) is None:
        return []
    kinds = [kind for kind in OPERATIONS if kind in item.value]
    if len(kinds) != 1:
        got = f"both {kinds[0]!r} and {kinds[1]!r}" if kinds else "none"
        report.add(item.line, f"{label}: expected one operation ({', '.join(OPERATIONS)}), got {got}")
        return []
    kind = kinds[0]
    label = f"{label}: {kind}"
    pc.check_keys(report, item, (kind, *OPERATIONS[kind]), label)
    fields, amount = item.value, item.value[kind]
    if kind == "compute":
        spec = wv.amount(report, amount, label, "duration")
        clock = pc.choice(report, fields["clock"], f"{label}: clock", CLOCKS) if "clock" in fields else "cpu"
        return ["-C", spec if clock == "cpu" else f"{spec},{clock}"]
    if kind == "load":
        return ["-L", wv.amount(report, amount, label, "size")]
    if kind == "store":
        spec = wv.amount(report, amount, label, "size")
        sync = _sync(report, fields["sync"], f"{label}: sync") if "sync" in fields else None
        return ["-S", f"{spec},{sync}" if sync else spec]
    if kind == "skip":
        count = wv.count(report, amount, label, 1, 65535)
        if "probability" in fields:
            count += f",prob={wv.probability(report, fields['probability'], f'{label}: probability')}"
        return ["--skip", count]
    return _forward(report, item, label, depth)


def _forward(report: Report, item: Node, label: str, depth: int) -> list[str]:
    fields = item.value
    to = fields["forward"]
    if to.is_mapping:
        report.add(
            to.line,
            f"{label}: expected the targets as forward's value (a name or a list "
            "of names), with quorum, chain and the rest beside forward, got a mapping",
        )
        return []
    names = to.value if to.is_list else [to]
    targets = [wv.target(report, name, label) for name in names]
    if not targets:
        report.add(to.line, f"{label}: expected a target name or a list of them, got an empty list")
    spec = ",".join(str(target) for target in targets)
    if "quorum" in fields:
        spec += f",nack={wv.count(report, fields['quorum'], f'{label}: quorum', 1, 255)}"
    if "timeout" in fields:
        spec += f",timeout={wv.duration(report, fields['timeout'], f'{label}: timeout')}"
    if "retries" in fields:
        spec += f",retry={wv.count(report, fields['retries'], f'{label}: retries', 0, 255)}"
    for key, word in (("request-size", "ps"), ("reply-size", "rs")):
        if key in fields:
            spec += f",{word}={wv.size(report, fields[key], f'{label}: {key}')}"
    if "chain" in fields and "branches" in fields:
        report.add(
            fields["branches"].line,
            f"{label}: use either chain (one for every target) or branches (one per target), not both",
        )
        return []
    words = ["-F", spec]
    if "branches" in fields:
        words[1] += ",branch"
        words += _branches(report, fields["branches"], f"{label}: branches", len(targets), depth)
    elif "chain" in fields:
        words += _chain(report, fields["chain"], f"{label}: chain", depth + 1)
    return [*words, "--fwd-end"]


def _branches(report: Report, node: Node, label: str, ntargets: int, depth: int) -> list[str]:
    if not node.is_list or len(node.value) != ntargets:
        got = f"{len(node.value)}" if node.is_list else pc.describe(node)
        report.add(node.line, f"{label}: expected a list of {ntargets} chains, one per target in order, got {got}")
        return []
    words: list[str] = []
    for index, chain in enumerate(node.value):
        if index:
            words.append("--next-branch")
        words += _chain(report, chain, f"{label}[{index}]", depth + 1)
    return words


# ---- values of the form's own (the rest: collapsar.wl_values) ----------------


def _sync(report: Report, node: Node, label: str) -> str | None:
    """true: fsync before replying; periodic: the node's --sync timer; false: none."""
    if node.value is True:
        return "sync"
    if node.value is False:
        return None
    if node.value == "periodic":
        return "psync"
    report.add(node.line, f"{label}: expected true, false or periodic, got {pc.describe(node)}")
    return None


def _proto(report: Report, node: Node, label: str) -> str | None:
    return pc.choice(report, node, label, ("tcp", "udp"))


def _port(report: Report, node: Node, label: str) -> str:
    return wv.count(report, node, label, 1, 65535)
