"""Per-direction link properties: `up:` and `down:` written as a mapping,
read into each direction of the model, collapsed per direction, changed per
direction by `set` events, and printed back by to_yaml."""

import pytest
from model_compare import without_where

from collapsar.collapse import collapse
from collapsar.model import LinkProps
from collapsar.parser import parse_text
from collapsar.timeline import build_timeline
from collapsar.yamlout import to_yaml

HEAD = """\
services:
  a: {command: [x]}
  b: {command: [y]}
bridges: [s1]
links:
"""


def parse(*links: str, events: tuple[str, ...] = ()):
    text = HEAD + "".join(f"  - {line}\n" for line in links)
    if events:
        text += "events:\n" + "".join(f"  - {line}\n" for line in events)
    return parse_text(text, "t.yaml")


# (key, what the link writes for both directions, the value under one
# direction, the LinkProps field it sets, its value there, the default).
PROPERTIES = [
    ("latency", "", "7ms", "delay_us", 7000, 0),
    ("jitter", "latency: 10ms, ", "1500us", "jitter_us", 1500, 0),
    ("distribution", "latency: 10ms, jitter: 1ms, ", "pareto", "distribution", "pareto", "normal"),
    ("loss", "", "2%", "loss_ratio", 0.02, 0.0),
    ("bandwidth", "", "5Mbps", "rate_bps", 5_000_000, None),
]
KEYS = [p[0] for p in PROPERTIES]


@pytest.mark.parametrize("direction", ["up", "down"])
@pytest.mark.parametrize(("key", "both", "text", "name", "value", "default"), PROPERTIES, ids=KEYS)
def test_each_property_can_be_set_for_one_direction(direction, key, both, text, name, value, default):
    experiment = parse(f"{{from: a, to: b, {both}{direction}: {{{key}: {text}}}}}")
    (spec,) = experiment.links
    other = "down" if direction == "up" else "up"
    assert getattr(getattr(spec, direction), name) == value
    assert getattr(getattr(spec, other), name) == default
    # The path from a to b crosses the link's up direction, the path back its down.
    state = collapse(experiment)
    there, back = state.path("a", "b"), state.path("b", "a")
    paths = {"up": there, "down": back}
    assert getattr(paths[direction], name) == value
    assert getattr(paths[other], name) == default


def test_collapse_sums_each_direction_on_its_own():
    experiment = parse(
        "{from: a, to: s1, up: {latency: 10ms, jitter: 3ms, loss: 10%, bandwidth: 5Mbps}, down: {latency: 20ms}}",
        # Written from b: its down direction carries s1 -> b.
        "{from: b, to: s1, up: {latency: 1ms, bandwidth: 9Mbps}, down: {latency: 2ms, jitter: 2ms, loss: 20%,"
        " bandwidth: 8Mbps, distribution: uniform}}",
    )
    state = collapse(experiment)
    there, back = state.path("a", "b"), state.path("b", "a")
    assert (there.delay_us, there.jitter_us, there.loss_ratio, there.rate_bps, there.distribution) == (
        12_000,
        round((3000**2 + 2000**2) ** 0.5),
        0.28,
        5_000_000,
        "normal",  # the link with the largest jitter has the say
    )
    assert (back.delay_us, back.jitter_us, back.loss_ratio, back.rate_bps) == (21_000, 0, 0.0, 9_000_000)


def test_both_directions_and_one_direction_combine():
    (spec,) = parse("{from: a, to: b, latency: 10ms, bandwidth: 1Gbps, up: {loss: 1%}, down: {jitter: 2ms}}").links
    assert spec.up == LinkProps(10_000, 0, "normal", 0.01, 10**9)
    assert spec.down == LinkProps(10_000, 2000, "normal", 0.0, 10**9)


def test_todays_rate_forms_keep_their_meaning_beside_a_mapping():
    (spec,) = parse("{from: a, to: b, loss: 1%, up: 5Mbps, down: {latency: 3ms}}").links
    assert spec.up == LinkProps(0, loss_ratio=0.01, rate_bps=5_000_000)
    assert spec.down == LinkProps(3000, loss_ratio=0.01, rate_bps=None)


def test_a_one_way_link_takes_its_properties_under_up():
    (spec,) = parse("{from: a, to: b, direction: one-way, up: {latency: 4ms, bandwidth: 1Mbps}}").links
    assert (spec.up, spec.down) == (LinkProps(4000, rate_bps=10**6), None)


def test_set_changes_one_direction():
    experiment = parse(
        "{from: a, to: b, latency: 10ms, bandwidth: 10Mbps}",
        events=(
            "{at: 1s, link: [a, b], set: {up: {latency: 50ms, loss: 1%}}}",
            "{at: 2s, link: [b, a], set: {up: {bandwidth: 1Mbps}, down: {jitter: 1ms}}}",
        ),
    )
    first, second = experiment.events
    assert (first.up, first.down) == ({"delay_us": 50_000, "loss_ratio": 0.01, "loss_model": None}, {})
    # Written from b: its up is the link's down.
    assert (second.a, second.b, second.up, second.down) == ("a", "b", {"jitter_us": 1000}, {"rate_bps": 10**6})
    steps = build_timeline(experiment).steps
    there, back = steps[1].state.path("a", "b"), steps[1].state.path("b", "a")
    assert (there.delay_us, there.loss_ratio, back.delay_us, back.loss_ratio) == (50_000, 0.01, 10_000, 0.0)
    there, back = steps[2].state.path("a", "b"), steps[2].state.path("b", "a")
    assert (there.jitter_us, there.rate_bps, back.jitter_us, back.rate_bps) == (1000, 10**7, 0, 10**6)


def test_set_for_both_directions_and_one():
    experiment = parse(
        "{from: a, to: b, latency: 10ms}", events=("{at: 1s, link: [a, b], set: {latency: 20ms, down: {loss: 5%}}}",)
    )
    (event,) = experiment.events
    assert (event.up, event.down) == (
        {"delay_us": 20_000},
        {"delay_us": 20_000, "loss_ratio": 0.05, "loss_model": None},
    )


def test_a_join_creates_an_asymmetric_link():
    experiment = parse(
        "{from: a, to: s1, latency: 1ms}",
        events=("{at: 1s, link: [b, s1], action: join, up: {latency: 3ms}, down: {latency: 4ms}}",),
    )
    (event,) = experiment.events
    assert (event.spec.up.delay_us, event.spec.down.delay_us) == (3000, 4000)
    state = build_timeline(experiment).steps[1].state
    assert (state.path("a", "b").delay_us, state.path("b", "a").delay_us) == (5000, 4000)


def test_to_yaml_writes_what_differs_per_direction_and_parses_back():
    experiment = parse(
        "{from: a, to: s1, bandwidth: 100Mbps, up: {latency: 105ms, jitter: 7071us}, down: {latency: 104ms}}",
        "{from: s1, to: b, latency: 2ms, up: 10Mbps, down: 20Mbps}",
        events=(
            "{at: 1s, link: [a, s1], set: {up: {latency: 90ms}}}",
            "{at: 2s, link: [s1, a], set: {loss: 1%, up: {bandwidth: 1Mbps}}}",
            "{at: 3s, link: [s1, b], set: {down: 5Mbps}}",
        ),
    )
    text = to_yaml(experiment)
    assert text.splitlines()[-7:] == [
        "links:",
        "  - {from: a, to: s1, bandwidth: 100Mbps, up: {latency: 105ms, jitter: 7071us}, down: {latency: 104ms}}",
        "  - {from: s1, to: b, latency: 2ms, up: 10Mbps, down: 20Mbps}",
        "events:",
        "  - {at: 1s, link: [a, s1], set: {up: {latency: 90ms}}}",
        "  - {at: 2s, link: [a, s1], set: {loss: 0.01, down: 1Mbps}}",
        "  - {at: 3s, link: [s1, b], set: {down: 5Mbps}}",
    ]
    assert without_where(parse_text(text, "t.yaml")) == without_where(experiment)


def test_to_yaml_of_a_one_way_link_and_its_sets():
    experiment = parse(
        "{from: a, to: b, direction: one-way, latency: 3ms}",
        events=("{at: 1s, link: [a, b], set: {up: {latency: 4ms, bandwidth: 1Mbps}}}",),
    )
    lines = to_yaml(experiment).splitlines()
    assert lines[-3:] == [
        "  - {from: a, to: b, latency: 3ms, direction: one-way}",
        "events:",
        "  - {at: 1s, link: [a, b], set: {latency: 4ms, bandwidth: 1Mbps}}",
    ]
    again = parse_text(to_yaml(experiment), "t.yaml")
    assert without_where(again) == without_where(experiment)
