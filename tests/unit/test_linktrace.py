"""Links that follow a trace (collapsar.linktraces): the `trace` key read,
each step compiled into the timeline at its exact time with its values,
what collapse and the dry run show, and every mistake one line naming the
experiment's or the trace file's line."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from collapsar.cli import main
from collapsar.errors import TopologyError, Where
from collapsar.model import LinkSetEvent, LinkTrace
from collapsar.parser import parse_file, parse_text
from collapsar.timeline import build_timeline

ROOT = Path(__file__).resolve().parents[2]
S = 1_000_000
STEPS = "time,bandwidth\n0s,8Mbps\n1s,2Mbps\n2s,5Mbps\n3s,1Mbps\n"
HEAD = """\
services:
  a: {command: [sleep, "1"]}
  b: {command: [sleep, "1"]}
bridges: [sw]
links:
"""


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "steps.csv").write_text(STEPS)
    (tmp_path / "traces" / "delay.csv").write_text("time_ms,latency_ms,loss_percent\n0,10,0\n500,30,1\n")
    (tmp_path / "traces" / "up.mahimahi").write_text("".join(f"{t}\n" for t in range(2, 1001, 2)))
    return tmp_path


def write(folder, *links: str, events: str = "") -> str:
    path = folder / "t.yaml"
    path.write_text(HEAD + "".join(f"  - {link}\n" for link in links) + textwrap.dedent(events))
    return str(path)


def rates(experiment, src="a", dst="b"):
    """(time, rate) of every timeline step for the path src -> dst."""
    return [(step.at_us, step.state.path(src, dst).rate_bps) for step in build_timeline(experiment).steps]


def test_a_trace_is_a_link_change_at_each_step(folder):
    path = write(folder, "{from: a, to: sw, trace: traces/steps.csv}", "{from: b, to: sw, bandwidth: 100Mbps}")
    experiment = parse_file(path)
    assert rates(experiment) == [(0, 8_000_000), (S, 2_000_000), (2 * S, 5_000_000), (3 * S, 1_000_000)]
    assert rates(experiment, "b", "a") == rates(experiment)  # both directions
    # Step 0 is the link itself; each later step one event naming the trace's row.
    assert experiment.links[0].up.rate_bps == experiment.links[0].down.rate_bps == 8_000_000
    trace_file = str(folder / "traces" / "steps.csv")
    assert experiment.events == tuple(
        LinkSetEvent(k * S, "a", "sw", {"rate_bps": rate}, {"rate_bps": rate}, Where(trace_file, k + 2))
        for k, rate in ((1, 2_000_000), (2, 5_000_000), (3, 1_000_000))
    )
    assert experiment.traces == (
        LinkTrace("a", "sw", ("up", "down"), trace_file, "csv", ("rate_bps",), S, 0, 4, 3, where=Where(path, 6)),
    )


def test_at_loop_until_and_a_finer_step(folder):
    trace = "{file: traces/steps.csv, step: 500ms, at: 10s, loop: true, until: 14500ms}"
    path = write(folder, f"{{from: a, to: sw, bandwidth: 50Mbps, trace: {trace}}}", "{from: b, to: sw}")
    times = rates(parse_file(path))
    # The written 50 Mbit/s until 10 s; then steps of 500 ms, the last row's
    # (at 3 s) holding for one step: a repetition is 3.5 s; cut at 14.5 s.
    assert times == [
        (0, 50_000_000),
        (10 * S, 8_000_000),
        (11 * S, 2_000_000),
        (12 * S, 5_000_000),
        (13 * S, 1_000_000),
        (13_500_000, 8_000_000),
    ]
    (summary,) = parse_file(path).traces
    assert (summary.steps, summary.changes, summary.loop, summary.until_us) == (9, 5, True, 14_500_000)


def test_per_direction_traces_and_the_link_written_values(folder):
    path = write(
        folder,
        "{from: a, to: sw, up: {latency: 5ms, trace: traces/up.mahimahi}, down: {trace: traces/delay.csv}}",
        "{from: b, to: sw}",
    )
    experiment = parse_file(path)
    timeline = build_timeline(experiment)
    up = [(s.at_us, s.state.path("a", "b").rate_bps, s.state.path("a", "b").delay_us) for s in timeline.steps]
    down = [(s.at_us, s.state.path("b", "a").rate_bps, s.state.path("b", "a").loss_ratio) for s in timeline.steps]
    # Mahimahi: 500 packets in its 1 s (one every 2 ms) is 6 Mbit/s, then it stays.
    assert up == [(0, 6_000_000, 5000)]
    # The CSV's 10 ms for 500 ms then 30 ms: 20 ms in its one 1 s step, with 0.5% loss.
    assert down == [(0, None, 0.005)]
    assert timeline.steps[0].state.path("b", "a").delay_us == 20_000
    assert experiment.events == ()  # each trace here is one step, at t=0: it is in the link


def test_a_set_event_of_other_fields_goes_with_the_trace(folder):
    path = write(
        folder,
        "{from: a, to: sw, trace: traces/steps.csv}",
        "{from: b, to: sw}",
        events="events:\n  - {at: 1500ms, link: [sw, a], set: {latency: 7ms}}\n",
    )
    timeline = build_timeline(parse_file(path))
    values = [(s.at_us, s.state.path("a", "b").rate_bps, s.state.path("a", "b").delay_us) for s in timeline.steps]
    assert values == [
        (0, 8_000_000, 0),
        (S, 2_000_000, 0),
        (1_500_000, 2_000_000, 7000),
        (2 * S, 5_000_000, 7000),
        (3 * S, 1_000_000, 7000),
    ]


def test_collapse_and_the_dry_run_say_the_link_is_traced(folder, capsys):
    path = write(folder, "{from: a, to: sw, trace: {file: traces/steps.csv, at: 2s}}", "{from: b, to: sw}")
    trace_file = folder / "traces" / "steps.csv"
    line = (
        f"link a -> sw (both directions) follows trace {trace_file} (csv: bandwidth): "
        "4 steps of 1s from 2s, 4 link changes in the timeline"
    )
    assert main(["collapse", path, "--at", "3500ms"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[:6] == ["a", "b", "0ms", "0ms", "0%", "2Mbps"]
    assert out[-1] == line
    assert main(["run", "--dry-run", path]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:3] == [line, "timeline: 8 path changes after t=0, each prepared before t=0"]


def problems(folder, *links: str, events: str = "") -> list[str]:
    with pytest.raises(TopologyError) as error:
        parse_file(write(folder, *links, events=events))
    return [line.replace(str(folder) + "/", "") for line in error.value.lines()]


LINK_ERRORS = [
    (
        "{from: a, to: sw, trace: traces/steps.csv, up: {trace: traces/steps.csv}}",
        "t.yaml:6: link a -> sw: use either trace (both directions) or trace under up, not both",
    ),
    (
        "{from: a, to: sw, direction: one-way, down: {trace: traces/steps.csv}}",
        "t.yaml:6: link a -> sw: a one-way link has no down direction; use trace or up",
    ),
    (
        "{from: a, to: sw, trace: {file: traces/steps.csv, step: 50ms}}",
        "t.yaml:6: link a -> sw: trace: step: 50ms is finer than the finest step, 100ms; the file is "
        "resampled onto the step, so write step: 100ms or more",
    ),
    (
        "{from: a, to: sw, trace: {file: traces/steps.csv, loop: true}}",
        "t.yaml:6: link a -> sw: trace: loop needs an until (when the repeating stops)",
    ),
    (
        "{from: a, to: sw, trace: {file: traces/steps.csv, at: 5s, until: 5s}}",
        "t.yaml:6: link a -> sw: trace: until (5s) must come after at (5s)",
    ),
    (
        "{from: a, to: sw, trace: {file: traces/steps.csv, every: 1s}}",
        "t.yaml:6: link a -> sw: trace: unknown key 'every' (expected one of: file, step, at, loop, until)",
    ),
    ("{from: a, to: sw, trace: {step: 1s}}", "t.yaml:6: link a -> sw: trace: missing 'file'"),
    (
        "{from: a, to: sw, trace: [traces/steps.csv]}",
        "t.yaml:6: link a -> sw: trace: expected a mapping of key: value, got a list",
    ),
    (
        "{from: a, to: sw, bandwidth: 10Mbps, trace: traces/steps.csv}",
        "t.yaml:6: link a -> sw: the trace sets bandwidth from t=0, so the bandwidth written on the link "
        "never applies; remove it, or start the trace later with at",
    ),
    (
        "{from: a, to: sw, trace: ../steps.csv}",
        "t.yaml:6: link a -> sw: trace ../steps.csv: expected a path below the experiment file's folder "
        "(relative, without ..)",
    ),
    (
        "{from: a, to: sw, trace: traces/none.csv}",
        "t.yaml:6: link a -> sw: trace traces/none.csv: cannot read it: No such file or directory",
    ),
    (
        "{from: a, to: sw, trace: {file: traces/up.mahimahi, step: 1500us}}",
        "t.yaml:6: link a -> sw: trace: step: 1500us is finer than the finest step, 100ms; the file is "
        "resampled onto the step, so write step: 100ms or more",
    ),
    (
        "{from: a, to: sw, trace: {file: traces/up.mahimahi, step: 100500us}}",
        "t.yaml:6: link a -> sw: trace: step: a Mahimahi trace counts whole milliseconds; got 100500us",
    ),
    (
        "{from: a, to: sw, trace: {file: traces/steps.csv, step: 100ms, loop: true, until: 3h}}",
        "t.yaml:6: link a -> sw: trace: 108000 steps, more than 100000; make the step longer",
    ),
    (
        "{from: a, to: sw, latency: 20ms, jitter: 15ms, trace: {file: traces/delay.csv, step: 500ms, at: 1s}}",
        "traces/delay.csv:2: link a -> sw: jitter (15ms) must not exceed the latency (10ms); delays below "
        "zero would be clipped",
    ),
]


@pytest.mark.parametrize("link,expected", LINK_ERRORS, ids=[e[1][7:60] for e in LINK_ERRORS])
def test_trace_key_errors(folder, link, expected):
    assert problems(folder, link, "{from: b, to: sw}") == [expected]


def test_a_bad_row_names_the_trace_file_and_nothing_is_half_applied(folder):
    (folder / "traces" / "bad.csv").write_text("time,bandwidth\n0s,8Mbps\n1s,fast\n2s,1Mbps\n3s,1Mbps\n2s,4Mbps\n")
    assert problems(folder, "{from: a, to: sw, trace: traces/bad.csv}", "{from: b, to: sw}") == [
        "traces/bad.csv:3: bandwidth: expected a rate like 128Kbps, 10Mbps or 1Gbps, got 'fast'",
        "traces/bad.csv:6: time 2000000us does not come after the row before (3000000us)",
    ]


def test_a_set_of_a_traced_field_after_the_trace_starts_is_refused(folder):
    links = ("{from: a, to: sw, trace: {file: traces/steps.csv, at: 10s}}", "{from: b, to: sw}")
    before = "events:\n  - {at: 5s, link: [a, sw], set: {bandwidth: 3Mbps}}\n"
    assert rates(parse_file(write(folder, *links, events=before)))[:2] == [(0, None), (5 * S, 3_000_000)]
    after = "events:\n  - {at: 11s, link: [a, sw], set: {up: 3Mbps}}\n"
    assert problems(folder, *links, events=after) == [
        "t.yaml:9: link a -> sw: cannot set bandwidth at 11s: it follows the trace traces/steps.csv from 10s"
    ]


def test_trace_is_a_key_of_the_links_block_only(folder):
    join = "events:\n  - {at: 1s, link: [a, b], action: join, latency: 1ms, trace: traces/steps.csv}\n"
    (message,) = problems(folder, "{from: a, to: sw}", "{from: b, to: sw}", events=join)
    assert message.startswith("t.yaml:9: link a -> b: unknown key 'trace' (expected one of: at, link, action, ")
    set_up = "events:\n  - {at: 1s, link: [a, sw], set: {up: {trace: traces/steps.csv}}}\n"
    (message,) = problems(folder, "{from: a, to: sw}", "{from: b, to: sw}", events=set_up)
    assert message.startswith("t.yaml:9: link a -> sw: set: up: unknown key 'trace' (expected one of: latency, ")


def test_a_trace_needs_the_experiment_files_folder():
    text = HEAD + "  - {from: a, to: sw, trace: steps.csv}\n  - {from: b, to: sw}\n"
    with pytest.raises(TopologyError) as error:
        parse_text(text)
    assert error.value.lines() == [
        "<memory>:6: link a -> sw: trace: a trace file is read from the experiment file's folder; <memory> has none"
    ]


def test_generate_writes_a_traced_link_out_as_its_steps(folder):
    path = write(folder, "{from: a, to: sw, trace: traces/steps.csv}", "{from: b, to: sw}")
    assert main(["generate", "--compose", path, "-o", str(folder / "compose.yml")]) == 0
    assert (folder / "compose.yml").exists()  # its timeline: tests/unit/test_deploy.py


def test_a_link_that_leaves_comes_back_with_the_step_then_in_force(folder):
    events = "events:\n  - {at: 500ms, link: [a, sw], action: leave}\n  - {at: 2500ms, link: [a, sw], action: join}\n"
    path = write(folder, "{from: a, to: sw, trace: traces/steps.csv}", "{from: b, to: sw}", events=events)
    timeline = build_timeline(parse_file(path))
    seen = [(s.at_us, p.rate_bps if (p := s.state.path("a", "b")) else None) for s in timeline.steps]
    assert seen == [
        (0, 8_000_000),
        (500_000, None),
        (S, None),
        (2 * S, None),
        (2_500_000, 5_000_000),
        (3 * S, 1_000_000),
    ]


def _docs_section() -> str:
    text = (ROOT / "docs" / "language.md").read_text()
    return text.split("### Links that follow a trace\n", 1)[1].split("\n## ", 1)[0]


def test_the_docs_examples(tmp_path):
    """The first block is topologies/traced-link.yaml's links (that example is
    run by tests/kernel/test_examples_run.py), the CSV block is its downlink
    file; the short forms parse, with files of the names they give."""
    blocks = re.findall(r"```(\w*)\n(.*?)```", _docs_section(), re.S)
    (example, yaml_kind), (short, _), (csv_text, csv_kind) = [(body, kind) for kind, body in blocks]
    assert (yaml_kind, csv_kind) == ("yaml", "")
    assert example in (ROOT / "topologies" / "traced-link.yaml").read_text()
    assert csv_text == (ROOT / "topologies" / "traces" / "downlink.csv").read_text()
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "bandwidth.csv").write_text(csv_text)
    (tmp_path / "traces" / "delay.csv").write_text("time_ms,latency_ms\n0,10\n750,30\n")
    head = HEAD.replace("sw]", "s1, s2]").replace("a: {", "client: {").replace("b: {", "server: {")
    links = textwrap.indent(short, "  ") + "  - {from: server, to: s2}\n"
    (tmp_path / "docs.yaml").write_text(head + links)
    timeline = build_timeline(parse_file(tmp_path / "docs.yaml"))
    seen = [(s.at_us, p.rate_bps, p.delay_us) for s in timeline.steps for p in [s.state.path("client", "server")]]
    # The downlink file at 1 s steps (20, 15, 10, 5 Mbit/s); the delay file's
    # 10 ms, then 30 ms from 750 ms: at 500 ms steps 10 and 20 ms, from 30 s.
    assert seen == [
        (0, 20_000_000, 20_000),
        (S, 15_000_000, 20_000),
        (2 * S, 10_000_000, 20_000),
        (3 * S, 5_000_000, 20_000),
        (30 * S, 5_000_000, 30_000),
        (30_500_000, 5_000_000, 40_000),
    ]
