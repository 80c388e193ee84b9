"""The parser's messages about burst loss, reordering, duplication,
corruption, jitter in order and queues, on links and sets, with their exact
`file:line: message` text: one line for each bad value."""

import pytest
from parse_support import link, problems

CASES = [
    (
        "loss not a number",
        link("{from: s1, to: s2, loss: lots}"),
        ["t.yaml:8: link s1 -> s2: loss: expected a loss like 0.1% or 0.001, got 'lots'"],
    ),
    (
        "loss a list",
        link("{from: s1, to: s2, loss: [1%]}"),
        [
            "t.yaml:8: link s1 -> s2: loss: expected a loss like 1%, or a burst loss like {rate: 1%, burst: 3} or "
            "{to-bad: 1%, to-good: 30%}, got a list"
        ],
    ),
    (
        "loss unknown key",
        link("{from: s1, to: s2, loss: {rate: 1%, bursts: 3}}"),
        ["t.yaml:8: link s1 -> s2: loss: unknown key 'bursts' (did you mean 'burst'?)"],
    ),
    (
        "loss rate over 100%",
        link("{from: s1, to: s2, loss: {rate: 120%, burst: 3}}"),
        ["t.yaml:8: link s1 -> s2: loss: rate: expected a probability like 1% or 0.01 between 0 and 100%, got '120%'"],
    ),
    (
        "burst below one",
        link("{from: s1, to: s2, loss: {rate: 1%, burst: 0.5}}"),
        [
            "t.yaml:8: link s1 -> s2: loss: burst: expected a mean burst length in packets, a number of at least 1 "
            "like 3, got 0.5"
        ],
    ),
    (
        "burst with a unit",
        link("{from: s1, to: s2, loss: {rate: 1%, burst: 3ms}}"),
        [
            "t.yaml:8: link s1 -> s2: loss: burst: expected a mean burst length in packets, a number of at least 1 "
            "like 3, got '3ms'"
        ],
    ),
    (
        "burst too short for the rate",
        link("{from: s1, to: s2, loss: {rate: 60%, burst: 1}}"),
        [
            "t.yaml:8: link s1 -> s2: loss: bursts of 1 packets on average cannot lose 60% of the packets; "
            "expected a burst of at least 1.5"
        ],
    ),
    (
        "burst and correlation",
        link("{from: s1, to: s2, loss: {rate: 1%, burst: 3, correlation: 20%}}"),
        ["t.yaml:8: link s1 -> s2: loss: burst and correlation say the same thing; use one"],
    ),
    (
        "rate and chain",
        link("{from: s1, to: s2, loss: {rate: 1%, to-bad: 1%}}"),
        ["t.yaml:8: link s1 -> s2: loss: use either rate (with burst or correlation) or to-bad and to-good, not both"],
    ),
    (
        "chain without to-good",
        link("{from: s1, to: s2, loss: {to-bad: 1%}}"),
        [
            "t.yaml:8: link s1 -> s2: loss: expected rate (with burst or correlation), or both to-bad and to-good; "
            "to-good is missing"
        ],
    ),
    (
        "chain that never leaves bad",
        link("{from: s1, to: s2, loss: {to-bad: 1%, to-good: 0}}"),
        ["t.yaml:8: link s1 -> s2: loss: to-good must be above 0 (the chain would stay in its bad state for good)"],
    ),
    (
        "correlation of 100%",
        link("{from: s1, to: s2, loss: {rate: 1%, correlation: 100%}}"),
        ["t.yaml:8: link s1 -> s2: loss: correlation must be below 100% (at 100% the first packet decides all)"],
    ),
    (
        "burst of a total loss",
        link("{from: s1, to: s2, loss: {rate: 100%, burst: 3}}"),
        ["t.yaml:8: link s1 -> s2: loss: a loss of 100% has no bursts; use loss: 100%"],
    ),
    (
        "loss-in-bad over 100%",
        link("{from: s1, to: s2, loss: {to-bad: 1%, to-good: 10%, loss-in-bad: 2}}"),
        [
            "t.yaml:8: link s1 -> s2: loss: loss-in-bad: expected a probability like 1% or 0.01 between 0 and "
            "100%, got 2"
        ],
    ),
    (
        "empty loss mapping",
        link("{from: s1, to: s2, loss: {}}"),
        [
            "t.yaml:8: link s1 -> s2: loss: expected a loss like 1%, or a burst loss like {rate: 1%, burst: 3} or "
            "{to-bad: 1%, to-good: 30%}, got a mapping"
        ],
    ),
    (
        "reorder bad",
        link("{from: s1, to: s2, latency: 5ms, reorder: often}"),
        ["t.yaml:8: link s1 -> s2: reorder: expected a probability like 1% or 0.01, got 'often'"],
    ),
    (
        "reorder without latency",
        link("{from: s1, to: s2, reorder: 1%}"),
        ["t.yaml:8: link s1 -> s2: reorder needs a latency (a reordered packet is one sent without it)"],
    ),
    (
        "reorder up without latency there",
        link("{from: s1, to: s2, down: {latency: 5ms}, up: {reorder: 1%}}"),
        ["t.yaml:8: link s1 -> s2: up: reorder needs a latency (a reordered packet is one sent without it)"],
    ),
    (
        "duplicate over 100%",
        link("{from: s1, to: s2, duplicate: 150%}"),
        ["t.yaml:8: link s1 -> s2: duplicate: expected a probability like 1% or 0.01 between 0 and 100%, got '150%'"],
    ),
    (
        "corrupt unit",
        link("{from: s1, to: s2, corrupt: 1ms}"),
        ["t.yaml:8: link s1 -> s2: corrupt: expected a probability like 1% or 0.01, got unknown unit 'ms' in '1ms'"],
    ),
    (
        "in-order not a boolean",
        link("{from: s1, to: s2, latency: 5ms, jitter: 1ms, in-order: yes please}"),
        ["t.yaml:8: link s1 -> s2: in-order: expected true or false, got 'yes please'"],
    ),
    (
        "in-order without jitter",
        link("{from: s1, to: s2, latency: 5ms, in-order: true}"),
        ["t.yaml:8: link s1 -> s2: in-order needs a jitter"],
    ),
    (
        "queue without bandwidth",
        link("{from: s1, to: s2, queue: 100}"),
        ["t.yaml:8: link s1 -> s2: queue needs a bandwidth (the queue fills at the link's rate)"],
    ),
    (
        "queue zero",
        link("{from: s1, to: s2, bandwidth: 1Mbps, queue: 0}"),
        ["t.yaml:8: link s1 -> s2: queue: expected from 1 to 1000000 packets, got 0"],
    ),
    (
        "queue negative time",
        link("{from: s1, to: s2, bandwidth: 1Mbps, queue: -5ms}"),
        [
            "t.yaml:8: link s1 -> s2: queue: expected a queue in packets like 100, or a time at the link's rate "
            "like 20ms, got '-5ms'"
        ],
    ),
    (
        "queue too long",
        link("{from: s1, to: s2, bandwidth: 1Mbps, queue: 2m}"),
        ["t.yaml:8: link s1 -> s2: queue: expected a time above 0 and up to 1m, got '2m'"],
    ),
    (
        "queue words",
        link("{from: s1, to: s2, bandwidth: 1Mbps, queue: deep}"),
        [
            "t.yaml:8: link s1 -> s2: queue: expected a queue in packets like 100, or a time at the link's rate "
            "like 20ms, got 'deep'"
        ],
    ),
    (
        "queue both and up",
        link("{from: s1, to: s2, bandwidth: 1Mbps, queue: 10, up: {queue: 20}}"),
        ["t.yaml:8: link s1 -> s2: use either queue (both directions) or queue under up, not both"],
    ),
    (
        "queue down without down bandwidth",
        link("{from: s1, to: s2, up: 1Mbps, down: {queue: 20}}"),
        ["t.yaml:8: link s1 -> s2: down: queue needs a bandwidth (the queue fills at the link's rate)"],
    ),
]

SET = link("{from: s1, to: s2}") + "events:\n"
SET_CASES = [
    (
        "{at: 1s, link: [s1, s2], set: {reorder: 1%}}",
        ["t.yaml:10: link s1 -> s2: reorder needs a latency (a reordered packet is one sent without it)"],
    ),
    (
        "{at: 1s, link: [s1, s2], set: {queue: 5ms}}",
        ["t.yaml:10: link s1 -> s2: queue needs a bandwidth (the queue fills at the link's rate)"],
    ),
    (
        "{at: 1s, link: [s1, s2], set: {up: {latency: 5ms, reorder: 1%}, down: {reorder: 2%}}}",
        ["t.yaml:10: link s1 -> s2: down: reorder needs a latency (a reordered packet is one sent without it)"],
    ),
    (
        "{at: 1s, link: [s1, s2], set: {loss: {rate: 1%, burst: 0}}}",
        [
            "t.yaml:10: link s1 -> s2: set: loss: burst: expected a mean burst length in packets, a number of at "
            "least 1 like 3, got 0"
        ],
    ),
]


@pytest.mark.parametrize(("text", "expected"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_link_message(text, expected):
    assert problems(text) == expected


@pytest.mark.parametrize(("line", "expected"), SET_CASES)
def test_set_message(line, expected):
    assert problems(SET + f"  - {line}\n") == expected


def test_experiment_in_order_message():
    text = "experiment: {name: t, in-order: sometimes}\nservices: {a: {command: [x]}}\n"
    assert problems(text) == ["t.yaml:1: experiment: in-order: expected true or false, got 'sometimes'"]


BACKGROUND_CASES = [
    (
        "{from: s1, to: s2, bandwidth: 1Mbps, background: 4Mbps}",
        "t.yaml:8: link s1 -> s2: background: expected background traffic like {mean: 4Mbps, sd: 2Mbps, every: 5s}, "
        "got '4Mbps'",
    ),
    (
        "{from: s1, to: s2, bandwidth: 1Mbps, background: {sd: 1Mbps}}",
        "t.yaml:8: link s1 -> s2: background: expected a mean rate (mean: 4Mbps); it is missing",
    ),
    (
        "{from: s1, to: s2, bandwidth: 1Mbps, background: {mean: 1Mbps, every: 50ms}}",
        "t.yaml:8: link s1 -> s2: background: every: expected at least 100ms, got 50ms",
    ),
    (
        "{from: s1, to: s2, bandwidth: 1Mbps, background: {mean: 1Mbps, sd: -1Mbps}}",
        "t.yaml:8: link s1 -> s2: background: sd: expected a rate like 2Mbps, or 0, got '-1Mbps'",
    ),
    (
        "{from: s1, to: s2, bandwidth: 1Mbps, background: {mean: 1Mbps, spread: 1Mbps}}",
        "t.yaml:8: link s1 -> s2: background: unknown key 'spread' (expected one of: mean, sd, every, rtt)",
    ),
    (
        "{from: s1, to: s2, up: 1Mbps, down: {background: {mean: 1Mbps}}}",
        "t.yaml:8: link s1 -> s2: down: background needs a bandwidth (it takes a share of the link's rate)",
    ),
]


@pytest.mark.parametrize(("line", "expected"), BACKGROUND_CASES)
def test_background_message(line, expected):
    assert problems(link(line)) == [expected]


def test_no_sharing_refuses_background(tmp_path, capsys):
    from collapsar.cli import main

    path = tmp_path / "e.yaml"
    path.write_text(
        link("{from: s1, to: s2, bandwidth: 1Mbps}") + "events:\n"
        "  - {at: 2s, link: [s1, s2], set: {down: {background: {mean: 1Mbps}}}}\n"
    )
    assert main(["run", "--no-sharing", "--dry-run", str(path)]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"{path}:10: link s1 -> s2: background traffic takes its share through the sharing loop, which "
        "--no-sharing turns off; run without --no-sharing"
    )
