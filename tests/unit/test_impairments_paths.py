"""Burst loss, reordering, duplication, corruption, order and queues from the
language to the collapsed paths, the timeline and the tc plan."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest

from collapsar.collapse import collapse
from collapsar.impairments import Extras, LossModel, Queue
from collapsar.parser import parse_text
from collapsar.tcal import Shaping
from collapsar.tcal.nlmsg import netem_options
from collapsar.tcal.plan import describe_leaf, leaf_params
from collapsar.timeline import build_timeline

DOCS = Path(__file__).resolve().parents[2] / "docs" / "language.md"
SERVICES = "services: {client: {command: [x]}, server: {command: [x]}}\nbridges: [s1, s2]\n"


def docs_example() -> str:
    """The links of docs/language.md's impairments example."""
    text = DOCS.read_text()
    section = text[text.index("### Impairments beyond delay and loss") :]
    return re.search(r"```yaml\n(.*?)```", section, re.S).group(1)


def paths(text: str) -> dict[tuple[str, str], object]:
    return {(p.src, p.dst): p for p in collapse(parse_text(text, "t.yaml")).paths()}


def test_the_docs_example_collapses_as_the_docs_say():
    got = paths(SERVICES + docs_example())
    up, down = got[("client", "server")], got[("server", "client")]
    # client -> server crosses two bursty links (s1-s2 both ways, s2 -> server up):
    # the chain with the path's exact rate and mean burst.
    first, second = LossModel.bursts(0.01, 4), LossModel(0.005, 0.2, 0.6, 0.0)
    keep = (1 - first.rate) * (1 - second.rate)
    assert up.loss_ratio == pytest.approx(1 - keep, abs=1e-12)
    assert up.extras.loss_model.rate == pytest.approx(1 - keep, rel=1e-12)
    pair_keep = first.pair_keep() * second.pair_keep()
    assert up.extras.loss_model.mean_burst() == pytest.approx((1 - keep) / (1 - keep - (1 - 2 * keep + pair_keep)))
    # server -> client crosses one: its own chain.
    assert down.loss_ratio == pytest.approx(0.01, abs=1e-12)
    assert down.extras.loss_model == first
    for path in (up, down):
        assert path.extras.reorder_ratio == pytest.approx(0.005)
        assert path.extras.corrupt_ratio == pytest.approx(0.0001)
        assert path.extras.in_order is True  # the only link with jitter keeps order
        assert path.extras.queue == Queue(packets=42)  # 25 ms at 20 Mbit/s of 1514-byte frames
        assert (path.delay_us, path.jitter_us, path.rate_bps) == (61_000, 4_000, 20_000_000)


def test_each_direction_has_its_own():
    got = paths(
        SERVICES
        + "links:\n"
        + "  - {from: client, to: s1, latency: 5ms, up: {reorder: 1%, duplicate: 2%}, down: {corrupt: 3%}}\n"
        + "  - {from: s1, to: server, latency: 5ms, duplicate: 1%}\n"
    )
    up, down = got[("client", "server")].extras, got[("server", "client")].extras
    assert (up.reorder_ratio, up.duplicate_ratio, up.corrupt_ratio) == (0.01, pytest.approx(1.02 * 1.01 - 1), 0.0)
    assert (down.reorder_ratio, down.duplicate_ratio, down.corrupt_ratio) == (0.0, 0.01, 0.03)


def test_in_order_for_the_experiment_and_against_it():
    text = (
        "experiment: {name: t, in-order: true}\n"
        + SERVICES
        + "links:\n"
        + "  - {from: client, to: s1, latency: 5ms, jitter: 1ms}\n"
        + "  - {from: s1, to: server, latency: 5ms, up: {jitter: 1ms, in-order: false}}\n"
    )
    got = paths(text)
    assert got[("client", "server")].extras.in_order is False  # one link reorders
    assert got[("server", "client")].extras == Extras(in_order=True)
    assert paths(text.replace("in-order: true", "in-order: false"))[("server", "client")].extras == Extras()


def test_a_set_that_only_changes_the_bursts_changes_the_path():
    text = (
        SERVICES
        + "links:\n"
        + "  - {from: client, to: s1, loss: {rate: 2%, burst: 2}}\n"
        + "  - {from: s1, to: server}\n"
        + "events:\n"
        + "  - {at: 1s, link: [client, s1], set: {up: {loss: {rate: 2%, burst: 5}}}}\n"
        + "  - {at: 2s, link: [client, s1], set: {loss: 2%}}\n"
    )
    timeline = build_timeline(parse_text(text, "t.yaml"))
    first, second, third = timeline.steps
    assert set(second.changed) == {("client", "server")}  # the loss rate is the same 2%
    assert second.state.path("client", "server").extras.loss_model == LossModel.bursts(0.02, 5)
    assert second.state.path("server", "client").extras.loss_model == LossModel.bursts(0.02, 2)
    assert set(third.changed) == {("client", "server"), ("server", "client")}
    assert third.state.path("client", "server").extras == Extras()
    assert third.state.path("client", "server").loss_ratio == 0.02


def test_a_queue_set_later_follows_the_new_bandwidth():
    text = (
        SERVICES
        + "links:\n"
        + "  - {from: client, to: s1, bandwidth: 10Mbps, queue: 20ms}\n"
        + "  - {from: s1, to: server, bandwidth: 100Mbps, queue: 5}\n"
        + "events:\n"
        + "  - {at: 1s, link: [client, s1], set: {bandwidth: 20Mbps}}\n"
        + "  - {at: 2s, link: [client, s1], set: {bandwidth: 200Mbps}}\n"
    )
    steps = build_timeline(parse_text(text, "t.yaml")).steps
    queues = [step.state.path("client", "server").extras.queue for step in steps]
    # 20 ms at 10 then 20 Mbit/s; then s1 -> server is the bottleneck.
    assert queues == [Queue(packets=17), Queue(packets=34), Queue(packets=5)]


def test_the_leaf_carries_every_impairment():
    chain = LossModel.bursts(0.01, 3)
    extras = Extras(loss_model=chain, reorder_ratio=0.02, duplicate_ratio=0.0, corrupt_ratio=0.001, in_order=True)
    shaping = Shaping("10.0.0.2", 10_000_000, delay_us=20_000, jitter_us=2_000, loss_ratio=chain.rate, extras=extras)
    leaf = leaf_params(shaping, netem=True)
    assert leaf.loss_model == chain and leaf.in_order is True
    assert (leaf.reorder_ratio, leaf.corrupt_ratio) == (0.02, 0.001)
    assert describe_leaf(leaf) == (
        "netem delay 20ms jitter 2ms normal in order loss gemodel p 0.003367 r 0.333333 1-h 1 1-k 0 "
        "(rate 0.01, mean burst 3) reorder 0.02 corrupt 0.001 limit 68 then queue pfifo limit 34"
    )  # 20 ms at 10 Mbit/s is 17 frames in flight, twice, and the queue is the 40 ms round trip: 34
    assert leaf.queue_pkts == 34 and leaf.limit_pkts == 2 * 17 + 34
    # jitter in order means nothing without jitter
    assert leaf_params(Shaping("10.0.0.2", None, delay_us=5, extras=extras), netem=True).in_order is False


def test_a_queue_sets_the_limit():
    shaping = Shaping("10.0.0.2", 10_000_000, delay_us=50_000, extras=Extras(queue=Queue(packets=30)))
    # 50 ms at 10 Mbit/s is 41.3 frames in flight: netem holds twice that and
    # the queue; its child is the queue
    leaf = leaf_params(shaping, netem=True)
    assert (leaf.limit_pkts, leaf.queue_pkts) == (2 * 42 + 30, 30)
    assert (
        leaf_params(Shaping("10.0.0.2", 10_000_000, extras=Extras(queue=Queue(packets=30))), netem=False).limit_pkts
        == 30
    )
    with pytest.raises(Exception, match="need sch_netem"):
        leaf_params(Shaping("10.0.0.2", None, extras=Extras(reorder_ratio=0.1)), netem=False)


def attrs(data: bytes) -> dict[int, bytes]:
    """Netlink attributes, type -> payload (flags stripped)."""
    out, at = {}, 0
    while at + 4 <= len(data):
        length, kind = struct.unpack_from("=HH", data, at)
        out[kind & 0x3FFF] = data[at + 4 : at + length]
        at += (length + 3) & ~3
    return out


def test_netem_options_carry_the_chain_and_reset_the_rest():
    chain = LossModel(0.01, 0.25, 0.6, 0.001)
    leaf = leaf_params(
        Shaping(
            "10.0.0.2",
            None,
            delay_us=10_000,
            jitter_us=1_000,
            loss_ratio=chain.rate,
            extras=Extras(loss_model=chain, reorder_ratio=0.05, corrupt_ratio=0.01, in_order=True),
        ),
        netem=True,
    )
    options = attrs(netem_options(leaf, with_table=False))[2]  # TCA_OPTIONS
    latency, limit, loss, gap, duplicate, jitter = struct.unpack_from("=IIIIII", options)
    assert (gap, duplicate) == (1, 0)
    nested = attrs(options[24:])
    ge = struct.unpack("=IIII", attrs(nested[5])[2])  # TCA_NETEM_LOSS / NETEM_LOSS_GE
    u32 = 0xFFFFFFFF
    assert ge == (round(0.01 * u32), round(0.25 * u32), round(0.4 * u32), round(0.001 * u32))
    assert struct.unpack("=II", nested[3]) == (round(0.05 * u32), 0)  # reorder
    assert struct.unpack("=II", nested[4]) == (round(0.01 * u32), 0)  # corrupt
    assert struct.unpack("=IiIi", nested[6]) == (u32, 0, 0, 0)  # rate: see RATE64
    assert struct.unpack("=Q", nested[8]) == (12_500_000_000,)  # 100 Gbit/s in bytes/s
    plain = attrs(
        attrs(netem_options(leaf_params(Shaping("10.0.0.2", None, delay_us=10_000), netem=True), False))[2][24:]
    )
    assert 5 not in plain and 8 not in plain
    assert struct.unpack("=II", plain[3]) == (0, 0) and struct.unpack("=II", plain[4]) == (0, 0)
    assert struct.unpack("=IiIi", plain[6]) == (0, 0, 0, 0)


def test_collapse_shows_them(tmp_path, capsys):
    from collapsar.cli import main

    path = tmp_path / "e.yaml"
    path.write_text(SERVICES + docs_example())
    assert main(["collapse", str(path), "--from", "server"]) == 0
    header, row, _ = capsys.readouterr().out.splitlines()
    assert header.split()[-2:] == ["LINKS", "OTHER"]
    assert row.split("  ")[-1] == (
        "bursts of 4 (gemodel p 0.002525 r 0.25 1-h 1 1-k 0), reorder 0.5%, corrupt 0.01%, in order, queue 42 packets"
    )
    assert main(["collapse", str(path), "--from", "server", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["loss_model"] == {
        "to_bad": pytest.approx(0.01 / 4 / 0.99),
        "to_good": 0.25,
        "loss_in_bad": 1.0,
        "loss_in_good": 0.0,
        "mean_burst": pytest.approx(4.0),
    }
    assert (row["reorder"], row["corrupt"], row["in_order"], row["queue_packets"]) == (0.005, 0.0001, True, 42)
