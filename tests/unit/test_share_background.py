"""Background traffic on a link in the sharing loop: one more flow on that
link, wanting the rate drawn for the current interval of the run's clock."""

from test_share_loop import DUMBBELL, PERIOD_NS, Plant

from collapsar.impairments import Background

M = 1_000_000
WITH_BACKGROUND = DUMBBELL.replace(
    "  - {from: l, to: r, latency: 1ms, bandwidth: 10Mbps}",
    "  - {from: l, to: r, latency: 1ms, bandwidth: 10Mbps, up: {background: {mean: 4Mbps, sd: 3Mbps, every: 1s}}}",
)


def run(plant, loop, periods, start_us=0):
    rates = []
    for period in range(periods):
        run_us = start_us + period * PERIOD_NS // 1000
        loop.tick(plant.now_ns + PERIOD_NS, plant.advance(), plant.state(), run_us)
        rates.append(plant.rate("a", "ra"))
    return rates


def test_a_flow_gets_what_the_background_leaves():
    plant = Plant(WITH_BACKGROUND.replace("sd: 3Mbps, ", ""))
    plant.wants = {("a", "ra"): 50 * M}
    loop = plant.loop(increase_gain=1.0)
    # The background wants 4 of the 10 Mbit/s and weighs more (its round trip
    # is the link's 2 ms, the flow's 6 ms): it keeps its 4, the flow gets 6.
    assert run(plant, loop, 3)[1:] == [6 * M, 6 * M]
    (row,) = [f for f in loop.last["flows"] if f["src"] == "background"]
    # Its share is its plain RTT share, as for any flow that wants less: the
    # weights 2^-a : 6^-a, a = 0.47 for the host's default here (cubic).
    weight = 2**-0.47 / (2**-0.47 + 6**-0.47)
    assert (row["dst"], row["share_bps"], row["measured_bps"], row["local"]) == (
        "l -> r",
        round(10 * M * weight),
        4 * M,
        False,
    )
    assert row["rtt_us"] == 2000
    # The other direction carries none.
    assert plant.timeline.steps[0].state.links[row["link_ids"][0]].props.extras.background is not None


def test_the_background_follows_its_draws_the_same_on_every_host():
    # A 1 ms round trip: its share (7 of the 10 Mbit/s beside the flow's 6 ms) is above every draw.
    plant = Plant(WITH_BACKGROUND.replace("every: 1s}", "every: 1s, rtt: 1ms}"))
    plant.wants = {("a", "ra"): 50 * M}
    loop = plant.loop(increase_gain=1.0)
    (lid,) = [lid for lid, link in plant.timeline.steps[0].state.links.items() if link.props.extras.background]
    background = plant.timeline.steps[0].state.links[lid].props.extras.background
    assert background == Background(4 * M, 3 * M, 1_000_000, 1000)
    draws = [background.rate_at(0, lid, second * 1_000_000, 10 * M) for second in range(3)]
    assert draws == [
        Background(4 * M, 3 * M, 1_000_000).rate_at(0, lid, s * 1_000_000 + 999_999, 10 * M) for s in range(3)
    ]
    assert len(set(draws)) == 3 and all(0 <= d <= 10 * M for d in draws)
    for second, draw in enumerate(draws):
        # Two periods into each second (the loop's window needs two samples).
        got = run(plant, loop, 3, start_us=second * 1_000_000)[-1]
        assert got == 10 * M - draw
